"""Audio for a `kind: openai` model (an OpenAI-compatible server: whisper.cpp's, a TTS server, OpenAI's):
speech to text and text to speech passed through as they are, the alias replaced by the upstream's model
name, the answer's bytes relayed with its content type (JSON, text, an event stream or audio)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..observability import RequestRecord
from .models import ServedModel
from .passthrough import upstream_model


@dataclass(frozen=True)
class Relayed:
    """The upstream's answer: its content type and its body as it arrives."""

    content_type: str
    body: Iterator[bytes]


def relay_form(
    model: ServedModel, path: str, fields: list[tuple[str, str]], file: tuple[str, bytes], record: RequestRecord | None
) -> Relayed:
    """A multipart form (the client's fields, in order, with the upstream's model name; its file) sent on."""
    sent = [(name, upstream_model(model) if name == "model" else value) for name, value in fields]
    if not any(name == "model" for name, _ in sent):
        sent.append(("model", upstream_model(model)))
    return _relayed(model, path, record, data=sent, files={"file": file})


def relay_json(model: ServedModel, path: str, body: dict, record: RequestRecord | None) -> Relayed:
    """A JSON request (text to speech) sent on with the upstream's model name."""
    return _relayed(model, path, record, json=body | {"model": upstream_model(model)})


def _relayed(model: ServedModel, path: str, record: RequestRecord | None, **request) -> Relayed:
    response = model.upstream.send(path, on_chosen=record.sent_upstream if record is not None else None, **request)
    content_type = response.headers.get("Content-Type", "application/octet-stream")
    # A stream's record is closed by the stream itself (the app closes the others' when they are answered).
    streamed = record if content_type.startswith("text/event-stream") else None
    return Relayed(content_type, _body(response, streamed))


def _body(response, streamed: RequestRecord | None) -> Iterator[bytes]:
    import requests

    try:
        yield from response.iter_content(chunk_size=None)
    except requests.exceptions.RequestException:
        if streamed is not None:
            streamed.fail(502, "upstream_unavailable", "lost the connection to the upstream")
    finally:
        response.close()
        if streamed is not None:
            streamed.close()
