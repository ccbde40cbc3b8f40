"""Long pure computations off the event loop.

Under gunicorn's gevent worker every stream of the worker is relayed by one thread: a request that
computes for 10 ms stalls every other stream's tokens for 10 ms. `off_the_loop` runs such work (a
grammar built for a large tool list) in gevent's thread pool, so the loop keeps relaying while it
runs; the worker lowers Python's switch interval (worker.py) so that the thread holding the GIL
gives it back to the loop every millisecond. Without an event loop (the threaded worker, --debug,
tests) the work runs where it is called. `let_others_run` splits a request's own work into stages
with a switch to the loop between them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def event_loop_active() -> bool:
    """Whether gevent patched this process (the gevent worker; not gthread, not --debug)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("socket")


def let_others_run() -> None:
    """A moment for the event loop between the stages of a long request (parse, translate, render,
    send): tokens that arrived for other streams meanwhile are relayed before this request goes on,
    so no stream waits for the CPU of a whole agent turn (~2-3 ms), only for one stage of it. One
    switch costs a few microseconds. Without an event loop it does nothing."""
    if event_loop_active():
        from gevent import sleep

        sleep(0)


def off_the_loop(function: Callable[..., T], *args) -> T:
    """function(*args), in gevent's thread pool when an event loop runs this process, else here.
    What it raises is raised here (and not also printed by gevent's pool)."""
    if not event_loop_active():
        return function(*args)
    from gevent import get_hub

    succeeded, outcome = get_hub().threadpool.apply(_captured, (function, args))
    if not succeeded:
        raise outcome
    return outcome


def _captured(function: Callable[..., T], args: tuple) -> tuple[bool, T | BaseException]:
    try:
        return True, function(*args)
    except Exception as exc:  # noqa: BLE001 - handed back to the caller, which raises it
        return False, exc
