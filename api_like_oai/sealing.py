"""Tokens the proxy signs and checks itself: a thought handed out with the answer and accepted back on
a later turn (Anthropic's thinking `signature`, the Responses API's `encrypted_content`), without any
server state. HMAC-SHA256 under the installation's key (installation.seal_key_sources), compared in
constant time; each use has its own purpose string, so a token of one kind is never taken for another."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable

RETRY_SECONDS = 30.0  # a key source that could not give its key is asked again after this long


class Seal:
    """Signs and checks texts under keys loaded on first use. `key_sources` are in order of
    preference: a source may answer None while its key cannot be had (a shared store that is down),
    and is asked again a while later; the last one always gives a key. A text is signed under the
    first key at hand, and a signature under any key this seal has loaded is accepted, so a thought
    signed while the shared key was out of reach still verifies here afterwards."""

    def __init__(self, *key_sources: Callable[[], bytes | None]):
        self._sources = key_sources
        self._loaded: list[bytes | None] = [None] * len(key_sources)
        self._retry_at = [0.0] * len(key_sources)

    def _keys(self) -> list[bytes]:
        """The keys at hand, the preferred first (loading those not loaded yet, unless one failed lately)."""
        for index, source in enumerate(self._sources):
            if self._loaded[index] is None and time.monotonic() >= self._retry_at[index]:
                self._loaded[index] = source()
                if self._loaded[index] is None:
                    self._retry_at[index] = time.monotonic() + RETRY_SECONDS
        return [key for key in self._loaded if key is not None]

    @property
    def key(self) -> bytes:
        """The key texts are signed under now."""
        return self._keys()[0]

    def sign(self, purpose: str, text: str) -> str:
        """The signature of `text` for `purpose` (URL-safe base64, no padding)."""
        return _signature(self.key, purpose, text)

    def verify(self, purpose: str, text: str, signature: str | None) -> bool:
        """Whether `signature` is this installation's signature of `text` for `purpose`."""
        if signature is None:
            return False
        # As bytes: compare_digest refuses str with non-ASCII characters, which a client may send.
        offered = signature.encode()
        return any(hmac.compare_digest(_signature(key, purpose, text).encode(), offered) for key in self._keys())

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


def _signature(key: bytes, purpose: str, text: str) -> str:
    return _b64(hmac.new(key, purpose.encode() + b"\0" + text.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
