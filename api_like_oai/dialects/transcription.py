"""Speech to text (OpenAI's `/v1/audio/transcriptions` and `/translations`): the multipart form's fields,
what llama-server's own `/v1/audio/transcriptions` is sent, and its answer in each response format
(pure, no I/O).

llama-server answers `{"type": "transcript.text.done", "text", "usage"}` (streamed: `transcript.text.delta`
events, then that one) and writes only `json`. The proxy writes `text` from it, and `srt`, `vtt` and
`verbose_json` as one segment spanning the whole file (its length read from the file's header): llama.cpp
gives no timings inside a transcript. Word timestamps cannot be honestly made from that: a 400."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import InvalidRequest
from .audio_files import AudioFile

TRANSLATE_PROMPT = "Translate the speech into English text."  # llama-server has no translation endpoint
TEXT_FORMATS = {"text": "text/plain", "srt": "application/x-subrip", "vtt": "text/vtt"}


class TranscriptionForm(BaseModel):
    """The form's fields besides `file`. Multipart values are all strings: "0.2" is read as 0.2 and "true"
    as true (not strict, unlike the JSON requests)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    language: str | None = Field(None, max_length=32)
    prompt: str | None = Field(None, max_length=4096)
    response_format: Literal["json", "text", "srt", "vtt", "verbose_json"] = "json"
    temperature: float | None = Field(None, ge=0, le=2)
    timestamp_granularities: list[Literal["segment", "word"]] = Field([], alias="timestamp_granularities[]")
    stream: bool = False

    @model_validator(mode="after")
    def honest_formats(self):
        if "word" in self.timestamp_granularities:
            raise InvalidRequest(
                "word timestamps cannot be given: llama.cpp reports no timings inside a transcript",
                param="timestamp_granularities[]",
                code="not_supported",
            )
        if self.stream and self.response_format not in ("json", "text"):
            raise InvalidRequest(
                f"response_format {self.response_format} cannot be streamed: only json and text can",
                param="response_format",
                code="not_supported",
            )
        return self


def upstream_form(form: TranscriptionForm, audio: bytes, filename: str, *, translate: bool) -> tuple[bytes, str]:
    """(body, content type) of the multipart request llama-server's /v1/audio/transcriptions is sent: always
    response_format json (the only one it writes); a translation asks for English in the prompt."""
    prompt = " ".join(part for part in (TRANSLATE_PROMPT if translate else None, form.prompt) if part)
    fields = {
        "response_format": "json",
        "stream": "true" if form.stream else "false",
        **({"prompt": prompt} if prompt else {}),
        **({"language": form.language} if form.language and not translate else {}),
        **({"temperature": repr(form.temperature)} if form.temperature is not None else {}),
    }
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    safe_name = filename.replace('"', "").replace("\r", "").replace("\n", "") or "audio"
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe_name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + audio
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def answer(form: TranscriptionForm, upstream: dict, audio: AudioFile, *, translate: bool) -> dict | str:
    """llama-server's answer in the asked format: a dict (json, verbose_json) or text (text, srt, vtt)."""
    text = upstream.get("text") or ""
    usage = upstream.get("usage")
    if form.response_format == "json":
        return {"text": text, **({"usage": usage} if isinstance(usage, dict) else {})}
    if form.response_format == "text":
        return text + "\n"
    end = audio.seconds or 0.0
    if form.response_format == "srt":
        return f"1\n{_clock(0.0, ',')} --> {_clock(end, ',')}\n{text.strip()}\n\n"
    if form.response_format == "vtt":
        return f"WEBVTT\n\n{_clock(0.0, '.')} --> {_clock(end, '.')}\n{text.strip()}\n\n"
    return {
        "task": "translate" if translate else "transcribe",
        "language": _language(form, translate),
        "duration": round(end, 3),
        "text": text,
        "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": round(end, 3), "text": text}],
        **({"usage": usage} if isinstance(usage, dict) else {}),
    }


def _language(form: TranscriptionForm, translate: bool) -> str:
    """The language as far as known: English for a translation, else the one the client named."""
    return "english" if translate else (form.language or "unknown")


def _clock(seconds: float, decimal: str) -> str:
    """HH:MM:SS,mmm (SubRip) or HH:MM:SS.mmm (WebVTT)."""
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{decimal}{rest % 1000:03d}"
