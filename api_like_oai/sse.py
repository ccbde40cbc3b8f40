"""Server-sent event framing: one `data:` line per event (after an `event:` line for APIs that name
their events), a blank line after it, with the compact JSON (compact_json.py) the frames carry."""

from __future__ import annotations

from .compact_json import json_bytes

DONE = b"data: [DONE]\n\n"

# What a stream sends while the client waits (a model loading, a long prompt being read), so that
# clients with a read timeout do not give up: a comment for OpenAI's APIs, which their SDKs skip, and
# the `ping` event Anthropic's API sends while it waits (Claude Code expects it).
KEEPALIVE_COMMENT = b": keep-alive\n\n"
KEEPALIVE_PING = b'event: ping\ndata: {"type": "ping"}\n\n'
KEEPALIVE_SECONDS = 5.0  # the longest silence before one is sent


def frame(chunk: dict) -> bytes:
    """One event carrying `chunk` as single-line JSON (control characters are always escaped)."""
    return b"data: " + json_bytes(chunk) + b"\n\n"


def named_frame(event_name: str, payload: dict) -> bytes:
    """One event named `event_name` (Anthropic's and the Responses API's streams name every event)."""
    return b"event: " + event_name.encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"


def encode_string(text: str) -> bytes:
    """`text` as a JSON string literal, as frame() would write it."""
    return json_bytes(text)


# Stand-ins for the variable parts of a sample frame. A NUL in a string is escaped to \u0000, which no
# id or model name holds; a number is found as a JSON value (after its colon), never inside an id.
TEXT_HOLE = "\x00text\x00"
NUMBER_HOLES = (987654321, 987654322, 987654323)


class FramePattern:
    """A frame cut at its holes, so the per-token frame is joined from pre-encoded pieces.

    Built once per stream from a sample frame whose variable parts are TEXT_HOLE (a string) or one of
    NUMBER_HOLES; `fill` then writes exactly the bytes framing the real payload would (a unit test
    holds them equal) without encoding the envelope again for every token."""

    __slots__ = ("pieces",)

    def __init__(self, sample: bytes, *holes: str | int):
        pieces, rest = [], sample
        for hole in holes:
            if isinstance(hole, str):
                before, rest = rest.split(encode_string(hole), 1)
            else:
                before, rest = rest.split(b":" + str(hole).encode(), 1)
                before += b":"
            pieces.append(before)
        self.pieces = (*pieces, rest)

    def fill(self, *values: bytes) -> bytes:
        """The frame with each hole's encoded value (encode_string for text, digits for numbers)."""
        parts = [b""] * (2 * len(values) + 1)
        parts[::2] = self.pieces  # interleaved by slice assignment (a ValueError if a value is missing or
        parts[1::2] = values  # extra), a third cheaper than a loop: this runs for every streamed token
        return b"".join(parts)
