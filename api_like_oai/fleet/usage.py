"""The tokens of a relayed request (pure): before it is relayed, the bounds its key's token limits
reserve at the front (`reply_bound`, `prompt_bound`: the front has no tokenizer, so a prompt is bounded
by the UTF-8 length of its text, as a local request's is before llama.cpp's /tokenize is asked); after,
the usage the box wrote in its answer, so that the front's access record, metrics and the caller's key
count them as for an answer of its own and the reservation is settled by them: OpenAI's
`prompt_tokens`, Anthropic's `input_tokens` + `cache_read_input_tokens`, the Responses API's
`input_tokens` (a stream's `response.completed` carries it under `response`), Ollama's `prompt_eval_count`
and `eval_count` (its NDJSON stream's last line), llama.cpp's native `tokens_evaluated` and
`tokens_predicted` (its stream's last event)."""

from __future__ import annotations

import orjson

from ..backends.llamacpp import cached_tokens

Counts = tuple[int, int, int]  # prompt tokens, completion tokens, prompt tokens from the cache
# OpenAI's, Anthropic's, Responses', llama.cpp's native
REPLY_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens", "n_predict")
TOKENS_PER_TURN = 8  # what a chat template adds around each message, at most (role markers, separators)


def reply_bound(body: dict) -> int | None:
    """The most tokens the client lets the reply have (its own bound, as admission reads it); None: none."""
    options = body.get("options")
    for value in [*map(body.get, REPLY_FIELDS), options.get("num_predict") if isinstance(options, dict) else None]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value  # Ollama's options.num_predict last
    return None


def prompt_bound(body: dict) -> int:
    """A bound on the prompt's tokens: every string of the request but the model's name and the
    reply's options (a token is at least one byte of its text), and each message's template turn."""
    fields = {key: value for key, value in body.items() if key not in ("model", "stream", *REPLY_FIELDS)}
    return _text_bytes(fields) + TOKENS_PER_TURN * (_turns(body) + 1)


def _text_bytes(value) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict):
        return sum(_text_bytes(item) for item in value.values())
    if isinstance(value, list):
        return sum(_text_bytes(item) for item in value)
    return len(str(value)) if value is not None else 0


def _turns(body: dict) -> int:
    turns = body.get("messages", body.get("input"))
    return len(turns) if isinstance(turns, list) else 1


def counts_in(document) -> Counts | None:
    """The counts of a whole answer or of one event's data; None when it carries no usage."""
    if not isinstance(document, dict):
        return None
    if "eval_count" in document or "prompt_eval_count" in document:  # Ollama's
        return _int(document.get("prompt_eval_count")), _int(document.get("eval_count")), 0
    if "tokens_predicted" in document:  # llama.cpp's native /completion, /infill
        return _int(document.get("tokens_evaluated")), _int(document["tokens_predicted"]), _int(cached_tokens(document))
    usage = document.get("usage")
    if not isinstance(usage, dict) and isinstance(document.get("response"), dict):
        usage = document["response"].get("usage")
    return counts_of(usage) if isinstance(usage, dict) else None


def counts_of(usage: dict) -> Counts | None:
    if "prompt_tokens" in usage:
        return _int(usage["prompt_tokens"]), _int(usage.get("completion_tokens")), _int(_detail(usage, "prompt_tokens_details"))
    if "cache_read_input_tokens" in usage:  # Anthropic's input_tokens leave out what came from the cache
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


USAGE_MARKS = (b'"usage"', b'"eval_count"', b'"tokens_predicted"')  # what an event carrying usage holds


class StreamUsage:
    """The counts of the last event of a relayed stream that carried usage (a box writes a frame per
    HTTP chunk, so each piece is read on its own)."""

    def __init__(self):
        self.counts: Counts | None = None

    def feed(self, piece: bytes) -> None:
        if not any(mark in piece for mark in USAGE_MARKS):
            return
        for line in piece.split(b"\n"):
            document = line[6:] if line.startswith(b"data: ") else line if line.startswith(b"{") else None  # SSE, NDJSON
            if document is not None and any(mark in document for mark in USAGE_MARKS):
                try:
                    self.counts = counts_in(orjson.loads(document)) or self.counts
                except orjson.JSONDecodeError:
                    continue
