"""The tokens of a relayed answer, read from the usage the box wrote in it (pure), so that the front's
access record, metrics and the caller's key count them as for an answer of its own: OpenAI's
`prompt_tokens`, Anthropic's `input_tokens` + `cache_read_input_tokens`, the Responses API's
`input_tokens` (a stream's `response.completed` carries it under `response`)."""

from __future__ import annotations

import orjson

Counts = tuple[int, int, int]     # prompt tokens, completion tokens, prompt tokens from the cache


def counts_in(document) -> Counts | None:
    """The counts of a whole answer or of one event's data; None when it carries no usage."""
    if not isinstance(document, dict):
        return None
    usage = document.get("usage")
    if not isinstance(usage, dict) and isinstance(document.get("response"), dict):
        usage = document["response"].get("usage")
    return counts_of(usage) if isinstance(usage, dict) else None


def counts_of(usage: dict) -> Counts | None:
    if "prompt_tokens" in usage:
        return _int(usage["prompt_tokens"]), _int(usage.get("completion_tokens")), \
            _int(_detail(usage, "prompt_tokens_details"))
    if "cache_read_input_tokens" in usage:   # Anthropic's input_tokens leave out what came from the cache
        cached = _int(usage["cache_read_input_tokens"])
        return _int(usage.get("input_tokens")) + cached, _int(usage.get("output_tokens")), cached
    if "input_tokens" in usage:
        return _int(usage["input_tokens"]), _int(usage.get("output_tokens")), _int(_detail(usage, "input_tokens_details"))
    return None


def _detail(usage: dict, name: str):
    details = usage.get(name)
    return details.get("cached_tokens") if isinstance(details, dict) else 0


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class StreamUsage:
    """The counts of the last event of a relayed stream that carried usage (a box writes a frame per
    HTTP chunk, so each piece is read on its own)."""

    def __init__(self):
        self.counts: Counts | None = None

    def feed(self, piece: bytes) -> None:
        if b'"usage"' not in piece:
            return
        for line in piece.split(b"\n"):
            if line.startswith(b"data: ") and b'"usage"' in line:
                try:
                    self.counts = counts_in(orjson.loads(line[6:])) or self.counts
                except orjson.JSONDecodeError:
                    continue
