"""A fleet: many instances, one API, through Redis (DESIGN.md "Fleet", docs/fleet.md).

A *box* is an instance with models of its own that publishes itself in Redis (`member.py`, a small
process beside the supervisor, which also runs a lending box's rpc-server); a *front* is any instance
with `--fleet`: it reads the boxes (`membership.py`), places a request for a model it does not serve
itself (`placement.py` and `affinity.py`, pure), takes the fleet's cold-start lock for a model loaded
nowhere (`lock.py`), has a pool's host start a model too large for one box (`placement.pool`), relays
the request to the box's own API with the fleet secret (`relay.py`, `front.py`) and counts the tokens
the box reports (`usage.py`); `metrics.py` and `commands.py` show the fleet; `discovery.py` writes
the endpoint picker's file of a model's boxes (an inference pool outside Kubernetes).
"""
