"""A chat request's images: found, fetched or decoded, checked, and put in the messages as placeholders.

`resolve_images(request, model, limits)` returns the request with each `image_url` part replaced by a text
part holding the image's placeholder (prompts/media.py), and the images by digest, which go upstream
with the prompt. An image for a model whose llama-server takes none (no --mmproj) is a 400 naming the
part; so is one too large, in a format llama.cpp does not read, or at a URL that cannot be fetched.
Images at http(s) URLs are fetched here, with a time, size and redirect limit, and never from a
private, loopback or link-local address unless --allow-private-image-urls says so (a proxy that fetches
what a client names must not become a way into the network behind it).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from ..errors import InvalidRequest
from ..prompts.media import Image, checked_image, inline_image_bytes
from ..protocol import ChatCompletionRequest, ContentPart
from ..settings import ImageLimits

if TYPE_CHECKING:
    import requests

IMAGE_PART_TYPES = ("image_url",)
MAX_REDIRECTS = 3


def image_parts(request: ChatCompletionRequest) -> list[tuple[int, int, ContentPart]]:
    """(message index, part index, part) of every image part of the request, in order."""
    return request.parts_of(IMAGE_PART_TYPES)


def resolve_images(request: ChatCompletionRequest, model) -> tuple[ChatCompletionRequest, dict[str, Image]]:
    """(the request with its images and audio clips as placeholders, the media by digest); the request
    itself, and none, when it has none. InvalidRequest naming the part for an image the model (a
    ServedModel: its takes_images(), name, image_limits) or the limits refuse; audio_parts.py's for a clip."""
    from .audio_parts import resolve_audio

    request, clips = resolve_audio(request, model)
    request, images = _resolve_image_parts(request, model)
    return request, {**images, **clips}


def _resolve_image_parts(request: ChatCompletionRequest, model) -> tuple[ChatCompletionRequest, dict[str, Image]]:
    found = image_parts(request)
    if not found:
        return request, {}
    params = [request.image_param(ordinal, f"messages.{n}.content.{m}") for ordinal, (n, m, _) in enumerate(found)]
    # a malformed part is the client's mistake whatever the model: said first, without asking the upstream
    given = [_inline_or_url(part, param) for param, (_, _, part) in zip(params, found, strict=True)]
    if not model.takes_images():
        raise InvalidRequest(
            f"model {model.name!r} does not take images: its llama-server was started without a vision projector (--mmproj)",
            param=params[0],
            code="image_not_supported",
        )
    images = [_checked(data, param, model.image_limits) for param, data in zip(params, given, strict=True)]
    _check_total(images, params, model.image_limits.max_request_bytes)
    placed = {(n, m): image.placeholder for image, (n, m, _) in zip(images, found, strict=True)}
    return request.with_placeholders(placed), {image.digest: image for image in images}


def _checked(data: bytes | str, param: str, limits: ImageLimits) -> Image:
    """The image of inline bytes, or fetched from a URL, checked against the limits."""
    if isinstance(data, str):
        data = fetch_image(data, param + ".image_url.url", limits)
    return checked_image(data, param, limits.max_image_bytes)


def _check_total(images: list[Image], params: list[str], max_bytes: int) -> None:
    total = 0
    for image, param in zip(images, params, strict=True):
        total += len(image.data)
        if total > max_bytes:
            raise InvalidRequest(
                f"the request's images are more than {max_bytes} bytes (--max-request-image-bytes)",
                param=param,
                code="image_too_large",
            )


def _inline_or_url(part: ContentPart, param: str) -> bytes | str:
    """The part's image bytes when given inline (base64), else its http(s) URL, to fetch."""
    url = _part_url(part, param)
    data = inline_image_bytes(url, param + ".image_url.url")
    return url if data is None else data


def _part_url(part: ContentPart, param: str) -> str:
    image_url = (part.model_extra or {}).get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            "an image_url part needs image_url.url: an https:// URL or a base64 data URL",
            param=param + ".image_url",
            code="invalid_image",
        )
    return url


# --- images at URLs ------------------------------------------------------------------------------


def fetch_image(url: str, param: str, limits: ImageLimits) -> bytes:
    """The bytes at `url`, redirects followed (at most 3, each checked as the first); InvalidRequest naming
    `param` when it cannot be fetched in time, is too large, or is at an address the proxy may not reach."""
    deadline = time.monotonic() + limits.fetch_timeout
    for _ in range(MAX_REDIRECTS + 1):
        _check_address(url, param, limits.allow_private_urls)
        response = _get(url, param, deadline)
        with response:
            if response.is_redirect and response.headers.get("location"):
                url = urljoin(url, response.headers["location"])
                continue
            if response.status_code != 200:
                raise InvalidRequest(
                    f"fetching the image answered HTTP {response.status_code}", param=param, code="invalid_image_url"
                )
            return _read_bounded(response, param, limits.max_image_bytes, deadline)
    raise InvalidRequest(f"fetching the image took more than {MAX_REDIRECTS} redirects", param=param, code="invalid_image_url")


def _get(url: str, param: str, deadline: float) -> requests.Response:
    import requests  # here, not at the top: 0.1 s of every start-up, for image URLs only

    remaining = max(deadline - time.monotonic(), 0.1)
    try:
        return requests.get(
            url, stream=True, allow_redirects=False, timeout=(remaining, remaining), headers={"Accept": "image/*"}
        )
    except requests.RequestException as exc:
        raise InvalidRequest(
            f"the image could not be fetched ({type(exc).__name__})", param=param, code="invalid_image_url"
        ) from None


def _read_bounded(response: requests.Response, param: str, max_bytes: int, deadline: float) -> bytes:
    import requests

    body = bytearray()
    try:
        for chunk in response.iter_content(64 * 1024):
            body += chunk
            if len(body) > max_bytes:
                raise InvalidRequest(
                    f"the image is more than {max_bytes} bytes (--max-image-bytes)", param=param, code="image_too_large"
                )
            if time.monotonic() > deadline:
                raise InvalidRequest("fetching the image took too long", param=param, code="invalid_image_url")
    except requests.RequestException as exc:
        raise InvalidRequest(
            f"the image could not be fetched ({type(exc).__name__})", param=param, code="invalid_image_url"
        ) from None
    return bytes(body)


def _check_address(url: str, param: str, allow_private: bool) -> None:
    """InvalidRequest unless `url` is http(s) and (unless allowed) every address its host has is public."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest("an image URL must be http(s)", param=param, code="invalid_image_url")
    if allow_private:
        return
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(parts.hostname, parts.port or 443)}
    except (OSError, UnicodeError):
        raise InvalidRequest(f"the image's host {parts.hostname!r} is not known", param=param, code="invalid_image_url") from None
    if not all(ipaddress.ip_address(address.split("%")[0]).is_global for address in addresses):
        raise InvalidRequest(
            "the image URL is at a private or local address, which this proxy does not fetch (--allow-private-image-urls)",
            param=param,
            code="invalid_image_url",
        )
