"""Compact single-line JSON as UTF-8 bytes: what SSE frames carry (sse.py) and the bodies sent to
llama.cpp (backends/llamacpp.py). One encoder for both, so a frame and a body are written alike."""

from __future__ import annotations

import json

import orjson

_json_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_bytes(payload) -> bytes:
    """`payload` as compact JSON. orjson writes what json would (byte for byte but for the exponent of
    small floats) about ten times faster: a Responses stream repeats the request's tools, tens of
    kilobytes, in three of its events, and an agent's request body upstream is as large; json is left
    for what orjson cannot write (integers past 64 bits)."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return _json_text(payload).encode()
