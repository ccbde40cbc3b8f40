"""Images in prompts (pure: no I/O). An image travels as a placeholder in the prompt text until the
backend sends it; there the upstream's own media marker takes its place.

- `Image`: the decoded bytes of one image, checked (a format llama.cpp's stb_image reads, a size limit),
  and their digest. The placeholder `\\x00image:<digest>\\x00` names it in message text and in the rendered
  prompt, so two prompts with different images never share a prefix (routing, backends/routing.py).
- Templates that render typed content parts (Gemma 3, Qwen2.5-VL, SmolVLM, LLaVA, ...) get the user's
  images as `{"type": "image"}` parts, as Hugging Face's processors give them; what the template writes for
  one image (its markup, learnt by rendering a probe) is then replaced by the image's placeholder. llama.cpp's
  mtmd adds the model's own image tokens around each marker, so the template's markup must not stay.
  Other templates get the placeholder in the message text, as llama-server's own chat endpoint does.
- `MediaPrompt.upstream(marker)`: the /completion `prompt` object: the text with each placeholder replaced
  by the upstream's marker, any marker-like text of the conversation neutralised (a stray marker would
  shift the count and fail the request), and the images' base64 in the order of their markers.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import InvalidRequest

# A medium's placeholder (an image's or an audio clip's: llama.cpp's marker and multimodal_data take both)
PLACEHOLDER = re.compile(r"\x00(?:image|audio):([0-9a-f]{32})\x00")
IMAGE_PLACEHOLDER = re.compile(r"\x00image:([0-9a-f]{32})\x00")  # what a template's image parts stand for
DEFAULT_MARKER = "<__media__>"  # llama.cpp before PR #21962, and servers whose /props names none
# llama.cpp's markers since PR #21962 (`<__media_` + 32 random characters + `__>`) and the old fixed one
MARKER_LIKE = re.compile(r"<__media_[0-9A-Za-z_]*>")
ZERO_WIDTH_SPACE = "\u200b"

# What llama.cpp's stb_image decodes (WebP only in builds with MTMD_VIDEO and ffmpeg: refused here).
SIGNATURES = (("png", b"\x89PNG\r\n\x1a\n"), ("jpeg", b"\xff\xd8\xff"), ("gif", b"GIF87a"), ("gif", b"GIF89a"), ("bmp", b"BM"))
READABLE = ("png", "jpeg", "gif", "bmp")
DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,", re.IGNORECASE)


@dataclass(frozen=True)
class Image:
    """One image of a request: its bytes as the client sent them, their format and digest."""

    data: bytes
    format: str

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()[:32]

    @property
    def placeholder(self) -> str:
        return f"\x00image:{self.digest}\x00"


@dataclass(frozen=True)
class Audio(Image):
    """One audio clip of a chat request (wav, mp3 or flac: services/audio_parts.py checked it): sent as llama.cpp
    media like an image, at the model's marker, but never made a template's image part."""

    @property
    def placeholder(self) -> str:
        return f"\x00audio:{self.digest}\x00"


def sniff_format(data: bytes) -> str | None:
    """The image format `data` starts like, among those llama.cpp reads; "webp" too, to name it; else None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((name for name, signature in SIGNATURES if data.startswith(signature)), None)


def checked_image(data: bytes, param: str, max_bytes: int) -> Image:
    """`data` as an Image; InvalidRequest naming `param` if it is empty, too large or not a readable format."""
    if len(data) > max_bytes:
        raise InvalidRequest(
            f"the image is {len(data)} bytes; at most {max_bytes} are accepted (--max-image-bytes)",
            param=param,
            code="image_too_large",
        )
    image_format = sniff_format(data)
    if image_format not in READABLE:
        found = "a WebP image" if image_format == "webp" else "not an image llama.cpp reads"
        raise InvalidRequest(
            f"the image is {found}: PNG, JPEG, GIF and BMP are accepted", param=param, code="invalid_image_format"
        )
    if image_format == "png" and not png_is_whole(data):
        raise InvalidRequest(
            "the PNG image is cut short or damaged: its chunks do not reach IEND", param=param, code="invalid_image"
        )
    return Image(data, image_format)


def png_is_whole(data: bytes) -> bool:
    """Whether a PNG's chunks, walked by their lengths from the signature, reach its IEND chunk within
    `data` (a truncated upload does not). CRCs are not checked: stb_image, llama.cpp's decoder, skips them."""
    position = 8
    while position + 12 <= len(data):
        length = int.from_bytes(data[position : position + 4], "big")
        if data[position + 4 : position + 8] == b"IEND":
            return True
        position += 12 + length
    return False


def decode_base64(text: str, param: str, what: str = "image") -> bytes:
    """Standard or URL-safe base64 (whitespace and missing padding forgiven) as bytes; InvalidRequest if not."""
    compact = "".join(text.split())
    compact += "=" * (-len(compact) % 4)
    try:
        alphabet = b"-_" if ("-" in compact or "_" in compact) else None
        return base64.b64decode(compact, altchars=alphabet, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"the {what} is not valid base64", param=param, code=f"invalid_{what}") from None


def inline_image_bytes(url: str, param: str) -> bytes | None:
    """The bytes of an image given inline (a base64 data URL, or bare base64); None for an http(s) URL."""
    if url.startswith(("http://", "https://")):
        return None
    match = DATA_URL.match(url)
    if match:
        return decode_base64(url[match.end() :], param)
    if url.startswith("data:"):
        raise InvalidRequest("a data URL image must be base64 (data:image/png;base64,...)", param=param, code="invalid_image")
    if ":" in url[:12]:
        raise InvalidRequest("an image URL must be https://, http:// or a base64 data URL", param=param, code="invalid_image")
    return decode_base64(url, param)


def has_placeholder(text: str) -> bool:
    """Whether `text` holds a placeholder of an image or audio (a substring test: every prompt an agent sends
    is asked)."""
    return "\x00image:" in text or "\x00audio:" in text


def placeholders_in(text: str) -> list[str]:
    """The image digests that `text`'s placeholders name, in order."""
    return PLACEHOLDER.findall(text)


# --- templates that render image parts --------------------------------------------------------

_PROBE_BEFORE, _PROBE_AFTER = "\x01before\x01", "\x01after\x01"


def image_markup(render: Callable[[list[dict]], str]) -> str | None:
    """What a template writes for one `{"type": "image"}` part of a user message, learnt by rendering a
    probe with and without one (`render(messages) -> text`); None when it does not render image parts
    (it fails on a list content, writes the list as it is, or writes nothing for the image)."""

    def probe(with_image: bool) -> str:
        image = [{"type": "image"}] if with_image else []
        content = [{"type": "text", "text": _PROBE_BEFORE}, *image, {"type": "text", "text": _PROBE_AFTER}]
        return render([{"role": "user", "content": content}])

    try:
        with_image, without = probe(True), probe(False)
    except Exception:  # noqa: BLE001 - any template failure means "no image parts here"
        return None
    prefix = len(_common_prefix(with_image, without))
    suffix = len(_common_prefix(with_image[prefix:][::-1], without[prefix:][::-1]))
    markup = with_image[prefix : len(with_image) - suffix]
    if not markup.strip() or "\x01" in markup or "type" in markup:
        return None
    return markup


def _common_prefix(first: str, second: str) -> str:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return first[:length]


def with_image_parts(messages: list[dict], markup: str) -> list[dict]:
    """The messages with each user message's placeholders turned into image parts. The markup in those
    messages' own text is neutralised, so that each copy of it in the prompt is an image's."""
    typed = []
    for message in messages:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, str) or not IMAGE_PLACEHOLDER.search(content):
            typed.append(message)
            continue
        typed.append({**message, "content": _content_parts(content.replace(markup, _neutralised(markup)))})
    return typed


def _content_parts(text: str) -> list[dict]:
    """`text` as text parts and {"type": "image", "image": placeholder} parts, in order (audio placeholders
    stay in the text, where llama-server's own chat endpoint puts a clip's marker)."""
    parts: list[dict] = []
    position = 0
    for match in IMAGE_PLACEHOLDER.finditer(text):
        if match.start() > position:
            parts.append({"type": "text", "text": text[position : match.start()]})
        parts.append({"type": "image", "image": match[0]})
        position = match.end()
    if position < len(text):
        parts.append({"type": "text", "text": text[position:]})
    return parts


def markup_to_placeholders(text: str, markup: str, typed_messages: list[dict]) -> str | None:
    """The rendered `text` with the template's markup for each image part replaced by that image's placeholder
    (images keep their order through every template, LLaVA's too, which writes them before the text);
    None if the markup's count is not the parts' (then the caller renders placeholders as text)."""
    images = [
        part["image"]
        for message in typed_messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part["type"] == "image"
    ]
    pieces = text.split(markup)
    if len(pieces) - 1 != len(images):
        return None
    return pieces[0] + "".join(image + piece for image, piece in zip(images, pieces[1:], strict=True))


# --- the upstream's prompt ---------------------------------------------------------------------


def _neutralised(text: str) -> str:
    """`text` with a zero-width space after its first character: it reads the same, but no longer matches."""
    return text[:1] + ZERO_WIDTH_SPACE + text[1:] if text else text


@dataclass(frozen=True)
class MediaPrompt:
    """A prompt with images: its text (with placeholders), the images' base64 by digest, and the tokens the
    images take in the context beyond their placeholders (what a key's token limits must count too)."""

    text: str
    images: Mapping[str, str]
    media_tokens: int = 0

    def upstream(self, marker: str) -> dict:
        """llama.cpp's /completion prompt object for an upstream whose media marker is `marker`."""
        text = self.text.replace(marker, _neutralised(marker)) if marker else self.text
        text = MARKER_LIKE.sub(lambda match: _neutralised(match[0]), text)
        data: list[str] = []

        def substitute(match: re.Match) -> str:
            if match[1] not in self.images:  # a placeholder typed by the client: text, not an image
                return _neutralised(match[0])
            data.append(self.images[match[1]])
            return marker

        return {"prompt_string": PLACEHOLDER.sub(substitute, text), "multimodal_data": data}


def media_prompt(text: str, images: Mapping[str, Image], tokens_per_image: int = 0) -> MediaPrompt:
    """The MediaPrompt of a rendered `text` with the request's `images` (by digest), base64 encoded once;
    each placeholder counts as `tokens_per_image` tokens."""
    named = placeholders_in(text)
    used = set(named)
    return MediaPrompt(
        text,
        {digest: base64.b64encode(image.data).decode() for digest, image in images.items() if digest in used},
        len(named) * tokens_per_image,
    )
