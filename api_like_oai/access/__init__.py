"""Keys, limits and usage: what admission asks before a request runs (see DESIGN.md, "access/").

keys.py    key records (stored only as keyed hashes), per-key models, who a caller is (pure)
limits.py  requests/tokens per minute, tokens per day, requests in flight: counts -> decision (pure)
usage.py   what each answered request cost, per key, model, API and day (pure)
book.py    the interface over the store: keys, atomic limit counters, usage; sqlite.py and redis.py
gate.py    a request's caller (Gate) and its passage (Ticket: admit before upstream work, reserve
           each generation's prompt, write llama.cpp's counts as they come, finish after)
priority.py  a pool's generations held to its servers' slots, the waiting ones let in by priority
manage.py  create, update, revoke, list, usage: for the CLI and the HTTP API alike
"""
