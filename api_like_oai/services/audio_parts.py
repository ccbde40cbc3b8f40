"""A chat request's audio: `{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"|"mp3"}}`
parts (OpenAI's Chat Completions), decoded, checked and put in the messages as placeholders, to reach
llama.cpp as `multimodal_data` beside the images, at the model's media marker (prompts/media.py).

Checked before any upstream work, as images are: base64 that decodes, a wav, mp3 or flac whose header
reads (dialects/audio_files.py), at most 25 MB and --max-audio-seconds (settings.AudioLimits' defaults),
and a model whose llama-server hears (`/props` `modalities.audio`); each refusal a 400 naming the part."""

from __future__ import annotations

from ..dialects.audio_files import AudioFile, inspect
from ..errors import InvalidRequest
from ..prompts.media import Audio, decode_base64
from ..protocol import ChatCompletionRequest, ContentPart
from ..settings import AudioLimits

AUDIO_PART_TYPE = "input_audio"
LIMITS = AudioLimits()


def audio_parts(request: ChatCompletionRequest) -> list[tuple[int, int, ContentPart]]:
    """(message index, part index, part) of every audio part of the request, in order."""
    return request.parts_of((AUDIO_PART_TYPE,))


def resolve_audio(request: ChatCompletionRequest, model) -> tuple[ChatCompletionRequest, dict[str, Audio]]:
    """(the request with its audio parts as placeholders, the clips by digest); the request itself, and
    none, when it has no audio. A malformed part is named first, whatever the model; then a model that
    does not hear (a ServedModel: takes_audio(), name) is a 400 naming the first part."""
    found = audio_parts(request)
    if not found:
        return request, {}
    params = [f"messages.{n}.content.{m}" for n, m, _ in found]
    clips = [_clip(part, param) for param, (_, _, part) in zip(params, found, strict=True)]
    if not model.takes_audio():
        raise InvalidRequest(
            f"model {model.name!r} does not take audio: its llama-server has no audio projector (--mmproj of an audio model)",
            param=params[0],
            code="audio_not_supported",
        )
    placed = {(n, m): clip.placeholder for clip, (n, m, _) in zip(clips, found, strict=True)}
    return request.with_placeholders(placed), {clip.digest: clip for clip in clips}


def audio_seconds(request: ChatCompletionRequest, *, strict: bool = True) -> float | None:
    """The seconds of the request's audio parts, for its key's usage and limit before anything is sent (0.0
    with none; None when a part's header does not say its length). `strict`: a malformed part is
    resolve_audio's 400, said now; else (a `kind: openai` upstream reads the parts itself) its length is unknown."""
    total = 0.0
    for n, m, part in audio_parts(request):
        try:
            seconds = _decoded(part, f"messages.{n}.content.{m}")[1].seconds
        except InvalidRequest:
            if strict:
                raise
            seconds = None
        if seconds is None:
            return None
        total += seconds
    return total


def _clip(part: ContentPart, param: str) -> Audio:
    """The part's audio, decoded and checked (format, header, size and length)."""
    raw, clip = _decoded(part, param)
    return Audio(raw, clip.format)


def _decoded(part: ContentPart, param: str) -> tuple[bytes, AudioFile]:
    """The part's audio bytes and what its header says, checked (format, header, size and length); decoded
    once a part (admission's audio_seconds, then resolve_audio: up to 25 MB of base64 each)."""
    if part._decoded_audio is None:
        part._decoded_audio = _checked(part, param)
    return part._decoded_audio


def _checked(part: ContentPart, param: str) -> tuple[bytes, AudioFile]:
    given = (part.model_extra or {}).get("input_audio")
    data = given.get("data") if isinstance(given, dict) else None
    if not isinstance(data, str) or not data:
        raise InvalidRequest(
            "an input_audio part needs input_audio.data: the audio as base64",
            param=f"{param}.input_audio.data",
            code="invalid_audio",
        )
    raw = decode_base64(data, f"{param}.input_audio.data", "audio")
    if len(raw) > LIMITS.max_file_bytes:
        raise InvalidRequest(
            f"the audio is {len(raw)} bytes; at most {LIMITS.max_file_bytes} are accepted", param=param, code="audio_too_large"
        )
    clip = inspect(raw, param=f"{param}.input_audio.data")
    if clip.seconds is not None and clip.seconds > LIMITS.max_seconds:
        raise InvalidRequest(
            f"the audio is {clip.seconds:.1f} seconds long; the limit is {LIMITS.max_seconds:g}",
            param=param,
            code="audio_too_long",
        )
    return raw, clip
