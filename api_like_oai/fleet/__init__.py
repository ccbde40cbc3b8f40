"""A fleet: many instances, one API, through Redis (DESIGN.md "Fleet").

A *box* is an instance with models of its own that publishes itself in Redis (`member.py`, a small
process beside the supervisor); a *front* is any instance with `--fleet`: it reads the boxes
(`membership.py`), places a request for a model it does not serve itself (`placement.py`, pure), takes
the fleet's cold-start lock for a model loaded nowhere (`lock.py`) and relays the request to the box's
own API with the fleet secret (`relay.py`).
"""
