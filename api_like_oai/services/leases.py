"""A model the proxy starts, held for one request: loaded (or swapped in) by the supervisor and kept
until the request's response is closed. No Flask: the route (routes.hold_model) gives the request's
closing callbacks, its record and its Waiting."""

from __future__ import annotations

import functools

from ..observability import LOADING_MODEL, QUEUED
from .inflight import Waiting


def hold(supervisor, model, on_close: list, record, waiting: Waiting, *, later: bool = False) -> None:
    """The model's lease asked of the supervisor; its release is the last thing the response does
    (`on_close`). With `later` (a streamed request whose service runs the waiting step), a model not ready
    yet is left pending in `waiting` instead of waited for here: the service sends keep-alives meanwhile."""
    from ..supervisor.client import PendingLease

    if record is not None:
        record.phase = LOADING_MODEL  # while the supervisor makes the model ready (at once if it is)
    lease = supervisor.acquire(model.name, wait=not later)
    on_close.append(lease.release)
    held = functools.partial(_held, supervisor, model, on_close, record, waiting)
    if isinstance(lease, PendingLease):
        waiting.pending = functools.partial(_when_granted, lease, held)
        return
    held(lease)


def _when_granted(pending, held, timeout: float) -> bool:
    """Whether the pending lease was granted within `timeout` seconds (then held); the refusal's error."""
    lease = pending.wait(timeout)
    if lease is None:
        return False
    held(lease)
    return True


def _held(supervisor, model, on_close: list, record, waiting: Waiting, lease) -> None:
    """A granted lease held for the request (also run from a waiting stream, outside the request); its
    renewal kept for the request's door (a crashed replica it finds: services/door.py)."""
    from ..supervisor.client import HeldLease

    if record is not None:
        record.phase = QUEUED
    held = HeldLease(supervisor, model.name, lease)
    waiting.renew = held.renew
    on_close.append(held.release)
    model.upstream.serve_only(lease.urls)
