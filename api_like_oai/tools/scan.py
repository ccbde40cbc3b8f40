"""Incremental scanning of what a model writes: marker sequences and one JSON object at a time.

Both are fed text as it arrives and keep their state between feeds, so the parser costs a
constant amount per character however long the call grows (re-parsing the whole output at every
token would cost the square of its length).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

WS = None  # a piece of a marker sequence: any amount of whitespace, including none

MATCH, PARTIAL, FAIL = "match", "partial", "fail"


def match_sequence(pieces: tuple, text: str, start: int) -> tuple[str, int]:
    """Match `pieces` (literal strings and WS) at `text[start:]`: (MATCH, end), (PARTIAL, start)
    while the text ends before the sequence could be decided, or (FAIL, start)."""
    position = start
    for index, piece in enumerate(pieces):
        if piece is WS:
            while position < len(text) and text[position].isspace():
                position += 1
            if position == len(text) and index < len(pieces) - 1:
                return PARTIAL, start
            continue
        available = text[position : position + len(piece)]
        if available != piece:
            return (PARTIAL, start) if piece.startswith(available) and position + len(available) == len(text) else (FAIL, start)
        position += len(piece)
    return MATCH, position


def partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """The start of the longest suffix of `text` that is a proper prefix of one of `markers`
    (text that may still become a marker), or len(text) if there is none."""
    longest = max((len(marker) for marker in markers), default=1) - 1
    for start in range(max(0, len(text) - longest), len(text)):
        tail = text[start:]
        if any(marker.startswith(tail) for marker in markers):
            return start
    return len(text)


_STRING_RUN = re.compile(r'[^"\\]+')
_NESTED_RUN = re.compile(r"[\s0-9.+\-:,eEtrufalsn]+")  # inside a value: nothing to track but strings and brackets
_VALUE_CHARS = frozenset('{}[]"0123456789-+.eEtrufalsn:, \t\r\n')


@dataclass
class ObjectScan:
    """One JSON object followed as its text arrives, from its opening brace.

    It knows the spans of its top-level keys' values, so a caller can read a tool's name as soon
    as it is complete and stream its arguments while they are written. `broken` is set as soon as
    the text cannot be the start of a JSON object; `end` once the object is closed.
    """

    text: str = ""
    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    broken: bool = False
    end: int | None = None  # position just after the closing brace
    key_start: int | None = None  # a top-level key being read
    current_key: str | None = None  # the top-level key whose value is being read
    value_start: int | None = None
    values: dict | None = None  # top-level key -> (start, end) of its raw value text

    def __post_init__(self):
        self.values = {}
        self.position = 0

    def feed(self, text: str) -> None:
        self._take(text)
        while self.position < len(self.text) and self.end is None and not self.broken:
            self._step()

    def string_run(self, text: str) -> None:
        """As feed(text), for text inside a string (in_string, no escape open) holding no quote and
        no backslash: nothing in it to follow, so it is only taken in (a streamed call's common token)."""
        self._take(text)
        self.position += len(text)

    def _take(self, text: str) -> None:
        """Append `text` to the scanned text in amortised O(len(text)): with the attribute cleared the
        local holds the only reference, so CPython grows the string in place instead of copying it
        (`self.text += text` copies the whole call per token: quadratic in an agent's 32,000-token file)."""
        whole, self.text = self.text, ""
        whole += text
        self.text = whole

    def _step(self) -> None:
        text, position = self.text, self.position
        if self.in_string:
            run = None if self.escaped else _STRING_RUN.match(text, position)
            if run:
                self.position = run.end()
                return
            self._string_char(text[position])
        else:
            run = _NESTED_RUN.match(text, position) if self.depth > 1 else None
            if run:
                self.position = run.end()
                return
            self._structure_char(text[position])
        self.position += 1

    def _string_char(self, char: str) -> None:
        if self.escaped:
            self.escaped = False
        elif char == "\\":
            self.escaped = True
        elif char == '"':
            self.in_string = False
            if self.depth == 1 and self.key_start is not None and self.current_key is None:
                self._key_done()
            elif self.depth == 1 and self.value_start is not None:
                self._value_done(self.position + 1)

    def _structure_char(self, char: str) -> None:
        position = self.position
        if self.depth == 0:
            if char == "{":
                self.depth = 1
            elif not char.isspace():
                self.broken = True
            return
        if (
            char not in _VALUE_CHARS
            and not char.isspace()
            or self.depth == 1
            and self.current_key is None
            and char not in '"},'
            and not char.isspace()
        ):
            self.broken = True  # not JSON, or not a key where a key belongs
        elif char == '"':
            self.in_string = True
            if self.depth == 1 and self.current_key is None:
                self.key_start = position
            elif self.depth == 1 and self.value_start is None:
                self.value_start = position
        elif char in "{[":
            if self.depth == 1 and self.value_start is None:
                self.value_start = position
            self.depth += 1
        elif char in "}]":
            self._close(char, position)
        elif char == ",":
            if self.depth == 1 and self.value_start is not None:
                self._value_done(position)
        elif self.depth == 1 and self.current_key is not None and self.value_start is None and not char.isspace() and char != ":":
            self.value_start = position  # a number, true, false or null

    def _close(self, char: str, position: int) -> None:
        self.depth -= 1
        if self.depth == 1 and self.value_start is not None:
            self._value_done(position + 1)
        elif self.depth == 0:
            if char != "}":
                self.broken = True
                return
            if self.value_start is not None:
                self._value_done(position)
            self.end = position + 1

    def _key_done(self) -> None:
        try:
            self.current_key = json.loads(self.text[self.key_start : self.position + 1])
        except ValueError:
            self.broken = True
        self.key_start = None

    def _value_done(self, end: int) -> None:
        raw = self.text[self.value_start : end].rstrip()
        self.values[self.current_key] = (self.value_start, self.value_start + len(raw))
        self.current_key = None
        self.value_start = None

    def value_text(self, key: str) -> str | None:
        """The raw text of a top-level key's finished value, or None."""
        span = self.values.get(key)
        return None if span is None else self.text[span[0] : span[1]]

    def open_value(self, key: str) -> str | None:
        """The text so far of `key`'s value while it is still being written, else None."""
        if self.current_key != key or self.value_start is None:
            return None
        return self.text[self.value_start : self.position]

    def parsed(self):
        """The finished object, or None if its text is not valid JSON."""
        if self.end is None:
            return None
        try:
            value = json.loads(self.text[: self.end])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
