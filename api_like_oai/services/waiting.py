"""The waiting step: a streamed request whose model is not ready (the proxy is loading it, swapping it
in, or restarting it after a crash) starts its answer at once and sends its API's keep-alive until the
model is ready, so clients with a read timeout do not give up; a refusal then (the load failed, the
queue is full) is the API's own error event. Nothing done before the wait is done again: admission,
a dialect's translation and a stored turn are kept, and the answer's own work (rendering, sending)
runs once, after it.

Two waits, one step: admission may leave a model load pending (`inflight.Waiting`, filled by the route's hold
on a model the proxy starts), which `after_wait` runs before the service generates; a restart after a
crash is waited for inside the upstream pool, which sends `events.Waiting` while it waits and
generation.stream writes the same keep-alive for each. Both wait on the supervisor's lease, with its
queue bound and its refusal. A request that is not streamed waits without keep-alives, at admission."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from .. import sse
from ..dialects.shape import Shape
from ..errors import ProxyError
from .inflight import Context, Wait

log = logging.getLogger("api_like_oai")

KEEPALIVE_SECONDS = sse.KEEPALIVE_SECONDS


def after_wait(context: Context, shape_of: Callable[[], Shape], proceed: Callable[[], tuple]) -> tuple:
    """(answer, headers): `proceed()`'s at once when the model is ready; else an event stream that
    sends the keep-alive of the shape `shape_of()` makes while the model loads, then `proceed()`'s
    stream (its headers are lost: the answer has started), or on a refusal that shape's error event.
    A factory: most requests never wait, and a shape costs an id (uuid4) to make."""
    wait = context.waiting.take() if context.waiting is not None else None
    if wait is None:
        return proceed()
    return _streamed_after(wait, shape_of(), proceed, context), {}


def _streamed_after(wait: Wait, shape, proceed: Callable[[], tuple], context: Context) -> Iterator[bytes]:
    record, answer = context.record, None
    try:
        yield shape.keepalive  # the answer starts at once (the model was not ready when admitted)
        while not wait(KEEPALIVE_SECONDS):
            yield shape.keepalive
        answer, _ = proceed()
    except Exception as exc:  # noqa: BLE001 - the stream has started: every failure is the API's error event
        error = exc if isinstance(exc, ProxyError) else _internal(exc)
        if record is not None:
            record.fail(error.status, error.code)
        yield shape.frame(shape.error_chunk(context.shown(error)))
        return
    finally:
        if record is not None and answer is None:
            record.close()  # the client left, or the error event is written: the answer's stream never came
    yield from answer


def _internal(exc: Exception) -> ProxyError:
    log.error("a stream failed after waiting for its model", exc_info=exc)
    return ProxyError("internal error in the proxy; see its log")
