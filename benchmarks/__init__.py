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

Design notes (moved from DESIGN.md, which points here):

- **Targets are ratios against a neighbour measured in the same rows** (`benchmarks/ratios.py`): the same code
  measured 70–106 µs per token in three runs on one machine, so an absolute target judged the machine. Rows
  alternate targets window by window (ABBA): the floor (`benchmarks/floor_app.py`: Flask under the
  `EventWorker` relaying `/completion`, none of the proxy's work), llama-server itself, and LiteLLM's proxy
  (pinned, in its own virtualenv in the cache: its ~150 packages are not ours).
- **`scripts/bench --quick` is the regression guard** (`benchmarks/quick.md`), not in `.ci/run` (timing on a
  shared machine is noise): run it before merging anything on the request path. `--against REV` adds the proxy
  at REV (a temporary worktree) to the same rows: two runs of one tree an hour apart differed by 10%, its
  windows in one row by less. LiteLLM's windows come last: the requests a window cuts keep it busy into the
  next.
- **The request-cost rows interleave their fronts a quarter-second at a time** under the same clients and
  read their CPU in scheduler nanoseconds per 2 s block, until proxy ÷ floor's standard error over the blocks
  is within 1.5% (issue 54): this machine's speed moves by a quarter from one quarter-second to the next,
  which windows of seconds, one front after the other, did not cancel (two runs read 2.95x and 2.49x).
"""
