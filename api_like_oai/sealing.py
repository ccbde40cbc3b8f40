"""Tokens the proxy signs and checks itself: a thought handed out with the answer and accepted back on
a later turn (Anthropic's thinking `signature`, the Responses API's `encrypted_content`), without any
server state. HMAC-SHA256 under the installation's key (installation.secret), compared in constant
time; each use has its own purpose string, so a token of one kind is never taken for another."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
from collections.abc import Callable


class Seal:
    """Signs and checks texts under a key that is loaded on first use (`key_source`)."""

    def __init__(self, key_source: Callable[[], bytes]):
        self._key_source = key_source

    @functools.cached_property
    def key(self) -> bytes:
        return self._key_source()

    def sign(self, purpose: str, text: str) -> str:
        """The signature of `text` for `purpose` (URL-safe base64, no padding)."""
        mac = hmac.new(self.key, purpose.encode() + b"\0" + text.encode(), hashlib.sha256).digest()
        return _b64(mac)

    def verify(self, purpose: str, text: str, signature: str | None) -> bool:
        """Whether `signature` is this installation's signature of `text` for `purpose`."""
        # As bytes: compare_digest refuses str with non-ASCII characters, which a client may send.
        return signature is not None and hmac.compare_digest(self.sign(purpose, text).encode(), signature.encode())

    def wrap(self, purpose: str, text: str) -> str:
        """An opaque token that carries `text` and its signature."""
        return f"{_b64(text.encode())}.{self.sign(purpose, text)}"

    def unwrap(self, purpose: str, token: str | None) -> str | None:
        """The text a token of `wrap` carries, or None for a token this installation did not make."""
        body, _, signature = (token or "").partition(".")
        try:
            text = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        return text if self.verify(purpose, text, signature) else None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
