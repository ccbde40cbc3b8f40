"""Digests of JSON values, and small bounded caches keyed by them.

Agents resend the same tools (tens of kilobytes of JSON schemas) and the same system prompt on
every turn. What the proxy derives from them (the schema checks, the grammar, the tool prompt,
the tools as a template writes them) is a pure function of that JSON, so it is computed once per
worker and found again by the digest of the JSON text (benchmarks/PROFILE.md: an agent's turn
went from 5-6 ms of CPU to under 2 ms).

A digest is SHA-256 of orjson's text (about 100 times faster than `json.dumps`). Two different
values that orjson writes alike would share a digest; that only happens for NaN and infinity,
which orjson writes as `null`: a value whose text has a `null` literal gets no digest, and is
then derived afresh every time, as are values orjson cannot write (integers past 64 bits).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

# `null` as a JSON literal (orjson writes no spaces); inside a string it is only a false alarm.
# Plain searches, the common case (no "null" at all) one: a regular expression took longer than the digest.
_NULL_LITERALS = (b":null", b"[null", b",null")


def json_text(value: Any) -> bytes | None:
    """orjson's text of `value`, or None when the text would not tell it apart (NaN, infinity:
    see the module's docstring) or orjson cannot write it."""
    try:
        text = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: big integers, lone surrogates, other types
        return None
    if b"null" in text and (text.startswith(b"null") or any(literal in text for literal in _NULL_LITERALS)):
        return None
    return text


def digest(*values: Any) -> bytes | None:
    """A digest of `values` as JSON, or None when one of them has none (see json_text)."""
    text = json_text(values)
    return None if text is None else hashlib.sha256(text).digest()


class DigestCache:
    """A bounded least-recently-used map from digests to what was derived from their values.
    Safe to share between threads (and greenlets); a value is derived outside the lock, so two
    requests that miss together both derive it, and agree."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable | None, derive: Callable[[], T]) -> T:
        """The value cached under `key`, else `derive()`, kept under `key` unless it is None.
        Whatever `derive()` raises is raised and nothing is kept."""
        if key is None:
            return derive()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = derive()
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
