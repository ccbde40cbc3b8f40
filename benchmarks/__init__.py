"""The benchmark behind scripts/bench: what the proxy costs, measured against llama.cpp itself.

fake_llamacpp.py is the fake upstream (instant, or paced like a model), client.py the load
generator, processes.py starts the servers and reads /proc, scenarios.py measures (routing.py the
routing row, over two real llama-servers; agent_turns.py replays the recorded agent requests of
fixtures/ in a process of its own), results.py
holds the numbers and the targets, report.py writes results.md and results.png. PROFILE.md has
notes from a one-off profile of where the proxy's CPU goes.
"""
