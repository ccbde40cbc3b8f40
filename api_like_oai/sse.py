"""Server-sent event framing: one `data:` line per event (after an `event:` line for APIs that name
their events), a blank line after it."""

from __future__ import annotations

import json

DONE = b"data: [DONE]\n\n"

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def frame(payload: dict) -> bytes:
    """One event carrying `payload` as single-line JSON (json.dumps never emits raw newlines)."""
    return b"data: " + _dumps(payload).encode() + b"\n\n"


def named_frame(event_name: str, payload: dict) -> bytes:
    """One event named `event_name` (Anthropic's and the Responses API's streams name every event)."""
    return b"event: " + event_name.encode() + b"\ndata: " + _dumps(payload).encode() + b"\n\n"


def encode_string(text: str) -> bytes:
    """`text` as a JSON string literal, as frame() would write it."""
    return _dumps(text).encode()
