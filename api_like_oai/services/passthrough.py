"""Models served by an OpenAI-compatible upstream (`kind: openai`): OpenAI's own requests go through as
they are, with the alias replaced by the upstream's model name; the other APIs' requests, translated
into chat requests, are streamed from the upstream's chat endpoint as generation events; what only a
llama.cpp upstream can do is a 400 saying so."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator

from ..backends.openai import SSEData, relay
from ..errors import InvalidRequest
from ..observability import RequestRecord
from ..protocol import ChatCompletionRequest
from .models import ServedModel


def passthrough(api_request, model: ServedModel, model_name: str, path: str, record: RequestRecord | None = None):
    """The upstream's answer: a dict (with our model name), or its event stream byte for byte. The usage
    the upstream reports is counted on the request's access record (the metrics, the access line, the
    key's usage); a stream closes its record itself when it ends (the app closes the others')."""
    body = api_request.model_dump(exclude_unset=True) | {"model": upstream_model(model)}
    response = model.upstream.forward(path, body, on_chosen=record.sent_upstream if record is not None else None)
    if body.get("stream"):
        if record is None:
            return relay(response)
        return recorded(
            relay(
                response,
                on_lost=functools.partial(record.fail, 502, "upstream_unavailable", "lost the connection to the upstream"),
            ),
            record,
        )
    with response:
        answer = response.json()
    answer["model"] = model_name
    if record is not None:
        count_usage(record, answer.get("usage"))
    return answer


def recorded(pieces: Iterator[bytes], record: RequestRecord) -> Iterator[bytes]:
    """A relayed stream as it is, watched for the chunk that carries the usage (sent when the client asked
    for it with `stream_options`); the record closes when the stream ends or the client goes away, which
    also ends the request's place in its key's limits."""
    record.metrics.streams_in_flight.inc()
    lines, usage = SSEData(), None
    try:
        for piece in pieces:
            if record.first_token is None:
                record.token_arrived()  # the answer's first bytes
            usage = _usage_in(lines.feed(piece)) or usage
            yield piece
        usage = _usage_in(lines.end()) or usage
    finally:
        record.metrics.streams_in_flight.dec()
        count_usage(record, usage)
        record.close()


def _usage_in(payloads: list[bytes]) -> dict | None:
    """The usage object of the last of an event stream's `data:` payloads whose chunk carries one, else None."""
    return next((usage for usage in map(_usage_of, reversed(payloads)) if usage is not None), None)


def _usage_of(payload: bytes) -> dict | None:
    """The usage object of one `data:` payload whose chunk carries one, else None."""
    if b'"usage"' not in payload:
        return None
    try:
        chunk = json.loads(payload)
    except ValueError:
        return None
    usage = chunk.get("usage") if isinstance(chunk, dict) else None
    return usage if isinstance(usage, dict) else None


def count_usage(record: RequestRecord, usage) -> None:
    """OpenAI's usage object (tokens of the prompt, of the answer, of the prompt from cache) on `record`."""
    if not isinstance(usage, dict):
        return
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    record.count(
        *(
            value if isinstance(value, int) and not isinstance(value, bool) else 0
            for value in (usage.get("prompt_tokens"), usage.get("completion_tokens"), cached)
        )
    )


def chat_body(chat_request: ChatCompletionRequest, model: ServedModel) -> dict:
    """What the upstream is sent: the fields the request set, under the upstream's model name, always
    streamed with usage (a non-streamed answer is the fold of the events, as for llama.cpp)."""
    body = chat_request.model_dump(exclude_unset=True, exclude_none=True)
    return body | {"model": upstream_model(model), "stream": True, "stream_options": {"include_usage": True}}


def needs(model: ServedModel, capable: bool, what: str) -> None:
    """A 400 for what the model's upstream cannot do (`capable`, as its capabilities say: a tokenizer, a
    prompt the proxy renders), saying what it cannot."""
    if not capable:
        raise InvalidRequest(
            f"model {model.name!r} is served by an OpenAI-compatible upstream, which cannot "
            f"{what}; only models with llama.cpp upstreams can",
            param="model",
            code="not_supported",
        )


def upstream_model(model: ServedModel) -> str:
    return model.settings.upstream_model or model.name
