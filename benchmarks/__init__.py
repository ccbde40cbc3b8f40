"""The benchmark behind scripts/bench: what the proxy costs, measured against llama.cpp itself.

fake_llamacpp.py is the fake upstream (instant, or paced like a model), client.py the load
generator, processes.py starts the servers and reads /proc, workload.py says what is sent and how
much is measured, and one module per part measures it (generation.py, capacity.py, paced.py,
tool_call.py, store.py, gateway.py, startup.py, agents.py; routing.py the routing row, over two real
llama-servers; agent_turns.py replays the recorded agent requests of fixtures/ in a process of its
own; swaps.py models on demand; ratios.py the ratio rows, the proxy beside floor_app.py, LiteLLM's
proxy and llama-server, and `--quick`'s guard; servers.py starts them all), results.py
holds the numbers and the targets, report.py writes results.md and results.png. PROFILE.md has
notes from a one-off profile of where the proxy's CPU goes.
"""
