"""llama.cpp's own API (/completion, /infill, /props, /tokenize, ...) relayed to a model's upstreams:
the request as the client sent it, the answer as llama.cpp sent it (status, body, event streams byte
for byte as they arrive), with failover, the access log and the metrics of every other request."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pydantic_core import from_json

from .. import sse
from ..backends.llamacpp import RawAnswer, cached_tokens
from ..errors import InvalidRequest, ProxyError, UpstreamUnavailable
from .inflight import Context
from .models import ServedModel


@dataclass
class NativeAnswer:
    """What to send back: llama.cpp's status and headers, the body's pieces, and `close`, to call
    once when the response is done with (sent, or abandoned by the client)."""

    status: int
    headers: dict[str, str]
    body: Iterable[bytes]
    streamed: bool
    close: Callable[[], None]


# Fields whose cost grows without bound in llama-server (n_probs 1e8 answered 187 MB and took 3 GB):
# capped as the proxy's own APIs cap them (top_logprobs 20; n by --max-n, whose default this is).
COSTLY_FIELDS = {"n_probs": 100, "n_cmpl": 16}


def requested_model(body: bytes, query_model: str | None, posted: bool = False) -> str | None:
    """The model a native request names: the `model` field of its JSON body, else `?model=`. The body
    is held to what llama-server can take first: a JSON object if `posted` (every native POST takes one;
    llama-server answered others with a 500), nesting bounded (a 400, not a RecursionError) and the
    fields of COSTLY_FIELDS capped (400)."""
    fields = _fields(body)
    if posted and fields is None:
        raise InvalidRequest("the request body must be a JSON object")
    fields = fields or {}
    for name, cap in COSTLY_FIELDS.items():
        value = fields.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > cap:
            raise InvalidRequest(f"{name} is at most {cap} here", param=name)
    named = fields.get("model")
    return named if isinstance(named, str) and named else query_model or None


def _fields(body: bytes) -> dict | None:
    """A JSON object body's fields; None for any other body."""
    if body.lstrip()[:1] != b"{":
        return None
    try:
        fields = from_json(body)  # pydantic's parser: nesting bounded, where json.loads recursed
    except ValueError as exc:
        if "recursion" in str(exc):
            raise InvalidRequest("the request body nests too deeply") from None
        return None
    return fields if isinstance(fields, dict) else None


def relay(model: ServedModel, method: str, path: str, body: bytes, query: str, context: Context) -> NativeAnswer:
    """llama.cpp's answer to the request, from the first of the model's servers that answers it."""
    if not model.upstream.capabilities.native_api:
        raise InvalidRequest(
            f"model {model.name!r} is served by an OpenAI-compatible upstream, which has no "
            f"llama.cpp API ({path}); use the /v1 endpoints",
            param="model",
            code="not_supported",
        )
    answer = context.door(model).relay(method, path, body, query, on_chosen=context.note_upstream)
    if answer.status == 501:  # llama-server's "not supported by this model" (/infill without FIM tokens, ...)
        raise _not_supported(model, answer)
    if answer.status == 500 and not answer.streamed:
        return _server_error(answer)
    if answer.streamed:
        stream = StreamRelay(answer, context)
        return NativeAnswer(answer.status, answer.headers, stream, True, stream.close)
    try:
        whole = answer.read()
    finally:
        answer.close()
    if context.record is not None:
        context.record.count(*token_counts(whole))
    return NativeAnswer(answer.status, answer.headers, [whole], False, lambda: None)


class StreamRelay:
    """An upstream event stream, relayed chunk by chunk and noted on the access record; it ends with
    an error event, as llama.cpp's own (`data: {"error": ...}`), when the upstream fails on the way
    or the proxy shuts down. close() closes the upstream and the record, once."""

    def __init__(self, answer: RawAnswer, context: Context):
        self.answer = answer
        self.context = context
        self.last_chunk = b""
        self.closed = False
        if context.record is not None:
            context.record.status = answer.status
            context.record.metrics.streams_in_flight.inc()

    def __iter__(self) -> Iterator[bytes]:
        record = self.context.record
        try:
            with self.context.inflight.track() as stop_event:
                for chunk in self.answer.iter_bytes():
                    if record is not None:
                        record.token_arrived()
                    self.last_chunk = chunk
                    yield chunk
                    if stop_event.is_set():
                        break
            if stop_event.is_set() and self.context.inflight.shutting_down:
                raise UpstreamUnavailable("the proxy is shutting down; generation ended before it finished")
        except ProxyError as exc:
            if record is not None:
                record.fail(exc.status, exc.code)
            yield sse.frame(self.context.shown(exc).to_dict())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.answer.close()
        record = self.context.record
        if record is not None:
            record.count(*token_counts(self.last_chunk))
            record.metrics.streams_in_flight.dec()
            record.close()


def token_counts(body: bytes) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached prompt) tokens from a /completion or /infill answer, or from the
    last event of its stream; Nones for anything else."""
    if b'"tokens_predicted"' not in body:
        return None, None, None
    last = body.rstrip().rsplit(b"\n", 1)[-1]
    try:
        answer = json.loads(last[6:] if last.startswith(b"data: ") else body)
    except ValueError:
        return None, None, None
    if not isinstance(answer, dict):
        return None, None, None
    return answer.get("tokens_evaluated"), answer.get("tokens_predicted"), cached_tokens(answer)


def _server_error(answer: RawAnswer) -> NativeAnswer:
    """llama-server's 500, relayed, but for an id past the vocabulary (/detokenize: a C++ range check),
    which is the caller's mistake: a 400 naming it."""
    try:
        whole = answer.read()
    finally:
        answer.close()
    if b"_M_range_check" in whole:
        raise InvalidRequest("a token id is outside the model's vocabulary", param="tokens", code="token_out_of_vocabulary")
    return NativeAnswer(answer.status, answer.headers, [whole], False, lambda: None)


def _not_supported(model: ServedModel, answer: RawAnswer) -> InvalidRequest:
    """llama-server's 501, read and closed: what the caller asked of this model it cannot do, the caller's 400
    (a 5xx says the server failed; it did not)."""
    try:
        body = answer.read()
    finally:
        answer.close()
    try:
        said = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        said = "llama-server does not support this request"
    return InvalidRequest(f"model {model.name!r}: {said}", param="model", code="not_supported")
