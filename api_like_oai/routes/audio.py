"""Speech to text (OpenAI's multipart `/v1/audio/transcriptions` and `/translations`): the form parsed and
checked, the model admitted, then transcribed (services/transcription.py) or, for a `kind: openai`
model, passed to its upstream as it is."""

from __future__ import annotations

from flask import Blueprint, Response, g, request
from pydantic import ValidationError

from ..dialects.transcription import TEXT_FORMATS, TranscriptionForm
from ..errors import InvalidRequest
from ..observability import stage
from ..services.admission import capability_mismatch, invalid_request
from ..services.transcription import AudioUpload, check_audio, transcribe
from . import lookup_model, respond, state

bp = Blueprint("audio", __name__)
FORM_OVERHEAD_BYTES = 1024 * 1024   # the form's other fields and boundaries, beside the file


@bp.post("/v1/audio/transcriptions")
@bp.post("/audio/transcriptions")
def create_transcription():
    return _speech_to_text(translate=False)


@bp.post("/v1/audio/translations")
@bp.post("/audio/translations")
def create_translation():
    return _speech_to_text(translate=True)


def _speech_to_text(*, translate: bool):
    limits = state().settings.audio
    # A file may be larger than a JSON body (--max-body-bytes): OpenAI's 25 MB, and the form around it.
    request.max_content_length = max(state().settings.limits.max_body_bytes, limits.max_file_bytes + FORM_OVERHEAD_BYTES)
    with stage(g.get("record"), "admission"):
        form, upload = _parsed_form()
        audio = check_audio(upload, limits)
    model, model_name = lookup_model(form.model)
    if model.settings.kind == "openai":
        raise InvalidRequest(f"model {model_name!r} is served by an OpenAI-compatible upstream: speech to text "
                             "is relayed only to llama.cpp upstreams", param="model", code="not_supported")
    if model.reranks() or not model.takes_audio():
        raise capability_mismatch(model, model_name, "transcribe audio (its llama-server reads no audio)")
    answer = transcribe(form, upload, audio, model, g.get("record"), translate=translate)
    if isinstance(answer, str):
        return Response(answer, mimetype=TEXT_FORMATS[form.response_format])
    return respond(answer)


def _parsed_form() -> tuple[TranscriptionForm, AudioUpload]:
    """The form's fields validated (a 400 naming the field) and its file (a 400 if there is none)."""
    if request.mimetype != "multipart/form-data":
        raise InvalidRequest("send the audio as multipart/form-data, with the file in `file`", param="file")
    fields = {name: values if name == "timestamp_granularities[]" else values[0]
              for name, values in request.form.lists()}
    try:
        form = TranscriptionForm.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc) from None
    file = request.files.get("file")
    if file is None:
        raise InvalidRequest("missing required field 'file'", param="file")
    return form, AudioUpload(file.read(), file.filename or "audio")
