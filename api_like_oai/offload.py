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


# A request body from which on a request's stages are long enough to let the event loop run between
# them: an agent's turn (tens of kilobytes) computes for milliseconds, a chat line for a fraction of one.
LONG_REQUEST_BYTES = 8 * 1024


def let_others_run(request_bytes: int) -> None:
    """A moment for the event loop between the stages of a long request (parse, translate, render,
    send): tokens that arrived for other streams meanwhile are relayed before this request goes on,
    so no stream waits for the CPU of a whole agent turn (~2-3 ms), only for one stage of it. A
    request of under LONG_REQUEST_BYTES (`request_bytes`, its body's) goes on without one: its stages
    are each well under a millisecond, and a switch (about 20 µs with the loop's poll) was 5% of its
    CPU (benchmarks/PROFILE.md). Without an event loop it does nothing."""
    if request_bytes >= LONG_REQUEST_BYTES and event_loop_active():
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
