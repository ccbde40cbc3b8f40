"""Models on demand: the only code that starts or stops processes.

The supervisor is one process per proxy instance (started by server.serve before gunicorn's workers,
and ended with it). It owns every llama-server child and the scheduling state; the workers ask it over
a Unix socket for a lease on a ready model (client.py) and hold the lease while they use the model.

    spec.py       what to run for a model: its llama-server command lines, budget settings (pure data)
    footprint.py  a model's memory estimate from its GGUF file
    plan.py       which models to start, drain or stop, given the budget (pure: state in, actions out)
    slots.py      KV caches saved before a stop and restored after a start, checked
    drafts.py     a draft model's acceptance, from its llama-servers' counters
    occupancy.py  how busy each model is (waiting, running, KV cache), for an inference pool's picker
    process.py    one llama-server child: spawn (parent-death signal), health while starting, stop, logs
    service.py    the state machine: models' statuses (plan.TRANSITIONS), leases, queues, events
    listener.py   the supervisor process: its socket (one Connection per request) and run loop
    messages.py   the socket's typed requests and replies, shared by listener.py and client.py
    client.py     the workers' side of the socket: acquire a lease, status, load, unload, events, logs

Design notes (moved from DESIGN.md, which points here):

- **Restores checked, not trusted** (`slots.py`): a note beside each saved slot (tokens saved, a fingerprint
  of the saving command line and files); a restore into another fingerprint is not tried, and counts only if
  llama-server's `n_restored` equals what was saved; a failure is a warning, never a client's error.
- **A budget per device**: `Budget.devices` (each GPU from nvidia-smi, the CPU) and each model's MiB per
  device (`footprint.per_device_mib`, by `--n-gpu-layers`/`--tensor-split`); `plan` evicts only models that
  free a device the waiter lacks. Draft acceptance is read from llama-server's counters (`drafts.py`); a
  logprobs request goes (pure, `routing.py`) to a replica without a draft (`draft_replicas`) where one is up.
- **A swap timed by stage** (drain, stop, exit, start, health, restore: `stage_seconds` in a model's status)
  on the supervisor's clock. A stopped model holds no lease and its slots are saved, so SIGKILL, not SIGTERM's
  ~150 ms; a starting child's `/health` is polled on each line it prints (it logs "model loaded"), else every
  20 ms.
"""
