"""Speech to text (OpenAI's multipart `/v1/audio/transcriptions` and `/translations`) and, for a `kind:
openai` model, text to speech (`/v1/audio/speech`): the form parsed, the model admitted, then transcribed
(services/transcription.py) or passed to an OpenAI-compatible upstream as it is (services/audio_relay.py)."""

from __future__ import annotations

from flask import Blueprint, Response, g, request
from pydantic import BaseModel, ConfigDict, ValidationError

from ..dialects.audio_files import inspect
from ..dialects.transcription import TEXT_FORMATS, TranscriptionForm
from ..errors import InvalidRequest, PayloadTooLarge
from ..observability import stage
from ..services.admission import capability_mismatch, invalid_request
from ..services.audio_relay import Relayed, relay_form, relay_json
from ..services.transcription import AudioUpload, check_audio, transcribe
from . import admission, door, lookup_model, parse_body, respond, state
from .declare import KEY, route

bp = Blueprint("audio", __name__)
FORM_OVERHEAD_BYTES = 1024 * 1024  # the form's other fields and boundaries, beside the file
# What transcriptions and translations take and answer: a form with the file, JSON or a text format, or a stream.
SPEECH_TO_TEXT = {
    "access": KEY,
    "request": TranscriptionForm,
    "body": "multipart",
    "model_in": "form",
    "metered": "seconds",
    "media": ("application/json", *TEXT_FORMATS.values()),
    "stream": "text/event-stream",
}


class SpeechRequest(BaseModel):
    """OpenAI's text to speech request: passed on as it is (`input`, `voice`, `response_format`, ...)."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str | None = None


@route(
    bp,
    "/v1/audio/transcriptions",
    "/audio/transcriptions",
    summary="Speech to text (a multipart form, OpenAI's shape; response_format text, srt and vtt answer text)",
    **SPEECH_TO_TEXT,
    refusals=("unsupported_format", "invalid_audio", "model_not_supported", "not_supported"),
)
def create_transcription():
    return _speech_to_text("/audio/transcriptions", translate=False)


@route(
    bp,
    "/v1/audio/translations",
    "/audio/translations",
    summary="Speech to English text (a multipart form, OpenAI's shape; response_format text, srt and vtt answer text)",
    **SPEECH_TO_TEXT,
    refusals=("unsupported_format", "invalid_audio", "model_not_supported", "not_supported"),
)
def create_translation():
    return _speech_to_text("/audio/translations", translate=True)


@route(
    bp,
    "/v1/audio/speech",
    "/audio/speech",
    summary="Text to speech (OpenAI's shape), by a `kind: openai` model's speech server; the audio as it answers it",
    access=KEY,
    request=SpeechRequest,
    body="json",
    model_in="json",
    metered="requests",
    media=(),  # the audio, as the speech server answers it
    refusals=("not_supported",),
)
def create_speech():
    speech = parse_body(SpeechRequest)
    model, model_name = lookup_model(speech.model)
    if not model.upstream.capabilities.speech:
        raise InvalidRequest(
            f"model {model_name!r} cannot speak: llama-server has no text to speech; serve a "
            "TTS server as a `kind: openai` model",
            param="model",
            code="not_supported",
        )
    return _relayed(relay_json(model, "/audio/speech", speech.model_dump(exclude_unset=True), g.get("record")))


def allow_audio_form() -> None:
    """A file may be larger than a JSON body (--max-body-bytes): OpenAI's 25 MB, and the form around it
    (here, and at a fleet's front that relays the form)."""
    settings = state().settings
    request.max_content_length = max(settings.limits.max_body_bytes, settings.audio.max_file_bytes + FORM_OVERHEAD_BYTES)


def _speech_to_text(path: str, *, translate: bool):
    settings = state().settings
    allow_audio_form()
    upload = _upload(settings.audio.max_file_bytes)
    with stage(g.get("record"), "admission"):
        # the file read before the key's limits count the request with its seconds (a broken one: a 400, uncounted)
        model, model_name = admission().find(request.form.get("model"))
        if model.upstream.capabilities.passes_through:
            admission().admit_audio(model, model_name, _relayed_seconds(upload))
            fields = [(name, value) for name, value in request.form.items(multi=True)]
            return _relayed(relay_form(model, path, fields, (upload.filename, upload.data), g.get("record")))
        form = _form()
        audio = check_audio(upload, settings.audio)
        admission().admit_audio(model, model_name, audio.seconds)  # then, as for every request, what the model does
    if model.reranks() or not model.takes_audio():
        raise capability_mismatch(model, model_name, "transcribe audio (its llama-server reads no audio)")
    answer = transcribe(form, upload, audio, model, g.get("record"), translate=translate, door=door(model))
    if isinstance(answer, str):
        return Response(answer, mimetype=TEXT_FORMATS[form.response_format])
    return respond(answer)


def _relayed_seconds(upload: AudioUpload) -> float | None:
    """The length of a file an OpenAI-compatible upstream reads itself (it may take formats llama.cpp does
    not): from its header if it is wav, mp3 or flac, else not known."""
    try:
        return inspect(upload.data).seconds
    except InvalidRequest:
        return None


def _upload(max_bytes: int) -> AudioUpload:
    """The form's file: a 400 without one, a 413 over OpenAI's 25 MB."""
    if request.mimetype != "multipart/form-data":
        raise InvalidRequest("send the audio as multipart/form-data, with the file in `file`", param="file")
    file = request.files.get("file")
    if file is None:
        raise InvalidRequest("missing required field 'file'", param="file")
    data = file.read()
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"the audio file is {len(data)} bytes; the limit is {max_bytes}")
    return AudioUpload(data, file.filename or "audio")


def _form() -> TranscriptionForm:
    """The form's fields validated: a 400 naming the field."""
    fields = {name: values if name == "timestamp_granularities[]" else values[0] for name, values in request.form.lists()}
    try:
        return TranscriptionForm.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc) from None


def _relayed(relayed: Relayed) -> Response:
    return Response(relayed.body, content_type=relayed.content_type, direct_passthrough=True)
