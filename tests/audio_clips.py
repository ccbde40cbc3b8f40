"""Audio made at test time, for the tests that send clips (no recording is shipped)."""

from __future__ import annotations

import io
import wave


def wav_of(seconds: float, rate: int = 16000) -> bytes:
    """A mono 16-bit wav of `seconds` of a near-silent tone."""
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(b"\x01\x00" * int(seconds * rate))
    return out.getvalue()
