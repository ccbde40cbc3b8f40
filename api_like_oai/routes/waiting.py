"""A streamed request for a model the proxy is still loading (or swapping in) starts its event stream
at once and sends keep-alives until the model is ready, so clients with a read timeout do not give
up during a load: an SSE comment for OpenAI's APIs, a `ping` event for Anthropic's (as its API sends
while it waits). Once the model is ready the view runs again, with the lease already held, and its
stream follows; a refusal then is the API's error event. Without models on demand nothing changes."""

from __future__ import annotations

import functools

from flask import Response, g, request, stream_with_context
from pydantic_core import from_json

from .. import sse
from ..errors import ProxyError
from . import SSE_HEADERS, state

KEEPALIVE_SECONDS = sse.KEEPALIVE_SECONDS
WANTS_STREAM = "api_like_oai.wants_stream"
GRANTED = "api_like_oai.granted_lease"

KEEPALIVES = {"openai": sse.KEEPALIVE_COMMENT, "anthropic": sse.KEEPALIVE_PING}


class ModelLoading(Exception):
    """Raised by hold_model for a streamed request whose model is not ready: the view's wrapper answers."""

    def __init__(self, pending):
        super().__init__("waiting for a model load")
        self.pending = pending


def keeps_alive_while_loading(api: str):
    """Decorate a generation view of `api` ("openai", "anthropic" or "responses")."""
    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            if state().supervisor is None:
                return view(*args, **kwargs)
            request.environ[WANTS_STREAM] = _asks_to_stream()
            try:
                return view(*args, **kwargs)
            except ModelLoading as loading:
                body = stream_with_context(_after_load(loading.pending, api, functools.partial(view, *args, **kwargs)))
                return Response(body, mimetype="text/event-stream", headers=SSE_HEADERS)
        return wrapper
    return decorate


def _asks_to_stream() -> bool:
    """Whether the body says `"stream": true` (read here and kept: the view reads it again)."""
    try:
        body = from_json(request.get_data(cache=True) or b"{}", allow_inf_nan=False)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def _after_load(pending, api: str, view):
    keepalive = KEEPALIVES.get(api, KEEPALIVES["openai"])
    try:
        lease = pending.wait(KEEPALIVE_SECONDS)
        while lease is None:
            yield keepalive
            lease = pending.wait(KEEPALIVE_SECONDS)
        request.environ[GRANTED] = lease
        answer = view()
    except ProxyError as exc:
        _record_failure(exc)
        yield _error_frame(api, exc)
        return
    yield from answer.response
    close = getattr(answer.response, "close", None)
    if close:
        close()


def _record_failure(exc: ProxyError) -> None:
    record = g.get("record")
    if record is not None:
        record.fail(exc.status, exc.code)
        record.close()


def _error_frame(api: str, exc: ProxyError) -> bytes:
    if api == "anthropic":
        return sse.named_frame("error", exc.to_anthropic())
    if api == "responses":
        return sse.named_frame("error", {"type": "error", "code": exc.code, "message": exc.message,
                                         "param": exc.param, "sequence_number": 0})
    return sse.frame(exc.to_dict())
