"""Speech to text: an audio file checked before anything is sent (size, format, length), sent to the
model's llama-server (`/v1/audio/transcriptions`, from its audio projector) and answered in the format
asked for (dialects/transcription.py); a stream relayed as llama-server writes it (`transcript.text.delta`,
then `transcript.text.done` with the usage), its tokens counted on the request's record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from ..backends import http
from ..backends.openai import SSEData
from ..backends.upstream import Upstream
from ..dialects import transcription as shape
from ..dialects.audio_files import AudioFile, inspect
from ..errors import InvalidRequest, UpstreamError
from ..observability import RequestRecord
from ..settings import AudioLimits
from .models import ServedModel


@dataclass(frozen=True)
class AudioUpload:
    """The form's file: its bytes and the name the client gave it."""

    data: bytes
    filename: str


def check_audio(upload: AudioUpload, limits: AudioLimits) -> AudioFile:
    """The file's format and length, held to the limits: 400 for another format than wav, mp3 or flac, a
    broken header or a length over --max-audio-seconds (its size was held to 25 MB as it came)."""
    audio = inspect(upload.data)
    if audio.seconds is not None and audio.seconds > limits.max_seconds:
        raise InvalidRequest(
            f"the audio is {audio.seconds:.1f} seconds long; the limit is {limits.max_seconds:g}",
            param="file",
            code="audio_too_long",
        )
    return audio


def transcribe(
    form: shape.TranscriptionForm,
    upload: AudioUpload,
    audio: AudioFile,
    model: ServedModel,
    record: RequestRecord | None,
    *,
    translate: bool,
    door: Upstream | None = None,
) -> dict | str | Iterator[bytes]:
    """The answer: a dict or text in the asked format, or (streamed) llama-server's events as bytes; sent
    through `door` (the model's upstream as the request goes through it; the model's own without one)."""
    body, content_type = shape.upstream_form(form, upload.data, upload.filename, translate=translate)
    response = (door or model.upstream).transcribe(body, content_type)
    if record is not None and audio.seconds:
        record.metrics.child(record.metrics.audio_seconds, model.name).inc(audio.seconds)
    if form.stream:
        return _relayed(response, record, model.name)
    try:
        upstream = _final(response, model.name)
    finally:
        response.close()  # read to its end: a no-op that leaves the connection for the next request
    _count(record, upstream.get("usage"))
    return shape.answer(form, upstream, audio, translate=translate)


def _final(response: http.Response, model_name: str) -> dict:
    try:
        upstream = json.loads(response.read())
    except (ValueError, OSError, http.TransportError) as exc:
        raise UpstreamError(f"the transcription of model {model_name!r} came back unreadable") from exc
    if not isinstance(upstream, dict) or not isinstance(upstream.get("text"), str):
        raise UpstreamError(f"the transcription of model {model_name!r} came back without its text")
    return upstream


def _relayed(response: http.Response, record: RequestRecord | None, model_name: str) -> Iterator[bytes]:
    """llama-server's event stream byte for byte; the done event's usage counted; a connection lost on
    the way ends it with an error event. The record closes when the stream ends or the client leaves."""
    lines, usage = SSEData(), None
    try:
        for piece in response.iter_bytes():
            if record is not None and record.first_token is None:
                record.token_arrived()
            usage = _usage_in(lines.feed(piece)) or usage
            yield piece
    except (OSError, http.TransportError):
        if record is not None:
            record.fail(502, "upstream_unavailable", "lost the connection to the upstream")
        yield (
            b'data: {"error": {"message": "lost the connection to the model\'s server", "type": "upstream_error", '
            b'"param": null, "code": "upstream_unavailable"}}\n\n'
        )
    finally:
        response.close()
        _count(record, usage)
        if record is not None:
            record.close()


def _usage_in(payloads: list[bytes]) -> dict | None:
    for payload in payloads:
        if b"transcript.text.done" in payload:
            try:
                return json.loads(payload).get("usage")
            except (ValueError, AttributeError):
                return None
    return None


def _count(record: RequestRecord | None, usage) -> None:
    """llama.cpp's usage of a transcription ({input_tokens, output_tokens}: the audio and prompt, the text)."""
    if record is None or not isinstance(usage, dict):
        return
    record.count(
        *(
            value if isinstance(value, int) and not isinstance(value, bool) else 0
            for value in (usage.get("input_tokens"), usage.get("output_tokens"))
        )
    )
