"""Generation events as Anthropic's message, and as its stream of named events: message_start, per
content block content_block_start / content_block_delta / content_block_stop, message_delta (the stop
reason and usage), message_stop; an `error` event if the generation fails after the start.

The same protocol as services/shapes.py, so generation.stream and generation.fold drive it. One
choice only (the Messages API has no `n`); blocks are cut by services/blocks.Blocks, as in the fold.
"""

from __future__ import annotations

import json
import uuid

from .. import sse
from ..backends.events import GenerationEvent
from ..errors import ProxyError
from ..services.blocks import DELTA, START, STOP, TEXT, Block, Blocks

_BLOCK = sse.NUMBER_HOLES[0]   # the block index's stand-in in a sample frame


class MessagesShape:
    end = b""   # the stream ends with message_stop, no [DONE]
    usage_at_start = True   # message_start says how much of the prompt was cached: the first event must know

    def __init__(self, model: str, stop_sequences: list[str] | None = None):
        self.id = f"msg_{uuid.uuid4().hex}"
        self.model = model
        self.stop_sequences = stop_sequences or []
        self.blocks = Blocks()
        self.started = False
        self.finish_reason: str | None = None
        self.stop_word: str | None = None
        self._text_pattern: sse.FramePattern | None = None

    @staticmethod
    def frame(chunk: dict) -> bytes:
        return sse.named_frame(chunk["type"], chunk)

    @staticmethod
    def error_chunk(exc: ProxyError) -> dict:
        return exc.to_anthropic()

    def openings(self, index: int) -> list[dict]:
        return []   # message_start waits for the first event: it carries the prompt's token count

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The frame of a text delta to the open text block, assembled around pre-encoded parts."""
        if not self.started or event.finish_reason or event.tool_calls or not event.text \
                or not self.blocks.extend_text(event.text):
            return None
        if self._text_pattern is None:
            sample = self.frame(_block_event(DELTA, Block(TEXT, _BLOCK), sse.TEXT_HOLE))
            self._text_pattern = sse.FramePattern(sample, _BLOCK, sse.TEXT_HOLE)
        return self._text_pattern.fill(str(self.blocks.open.index).encode(), sse.encode_string(event.text))

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = [] if self.started else [self._message_start(event.prompt_tokens or 0, event.cached_tokens or 0)]
        chunks += [_block_event(*change) for change in self.blocks.add(event)]
        if event.finish_reason:
            self.finish_reason, self.stop_word = event.finish_reason, event.stop_word
        return chunks

    def closings(self, usage: dict) -> list[dict]:
        chunks = [] if self.started else \
            [self._message_start(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"])]
        chunks += [_block_event(*change) for change in self.blocks.close()]
        stop_reason, stop_sequence = self._stop_reason(self.finish_reason, self.stop_word)
        return [*chunks,
                {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                 "usage": _usage(usage)},
                {"type": "message_stop"}]

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The message from the folded choice."""
        choice = choices[0]
        stop_reason, stop_sequence = self._stop_reason(choice["finish_reason"], choice["stop_word"])
        return {**self._message([_content(block) for block in choice["blocks"]]),
                "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": _usage(usage)}

    def _message(self, content: list) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content}

    def _message_start(self, prompt_tokens: int, cached_tokens: int) -> dict:
        self.started = True
        return {"type": "message_start",
                "message": {**self._message([]), "stop_reason": None, "stop_sequence": None,
                            "usage": _anthropic_usage(prompt_tokens, cached_tokens, 0)}}

    def _stop_reason(self, finish_reason: str | None, stop_word: str | None) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence): a stop string of the request's is a stop_sequence; the
        template's own (end of turn) and the end-of-sequence token are end_turn."""
        if finish_reason == "tool_calls":
            return "tool_use", None
        if finish_reason == "length":
            return "max_tokens", None
        if stop_word is not None and stop_word in self.stop_sequences:
            return "stop_sequence", stop_word
        return "end_turn", None


def _block_event(change: str, block: Block, piece: str) -> dict:
    if change == START:
        return {"type": "content_block_start", "index": block.index, "content_block":
                {"type": "text", "text": ""} if block.kind == TEXT else
                {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}}
    if change == STOP:
        return {"type": "content_block_stop", "index": block.index}
    delta = {"type": "text_delta", "text": piece} if block.kind == TEXT else \
        {"type": "input_json_delta", "partial_json": piece}
    return {"type": "content_block_delta", "index": block.index, "delta": delta}


def _content(block: Block) -> dict:
    if block.kind == TEXT:
        return {"type": "text", "text": block.content}
    return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": _arguments(block.content)}


def _arguments(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's `input` is; `{}` for a call cut short by max_tokens."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _usage(usage: dict) -> dict:
    return _anthropic_usage(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"],
                            usage["completion_tokens"])


def _anthropic_usage(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict:
    # Anthropic counts the prompt in three parts: read from the cache, written to it, and the rest.
    # llama.cpp caches every prompt by itself, so nothing is reported as written (a write costs extra
    # on Anthropic's bill, and here nothing was asked for).
    return {"input_tokens": prompt_tokens - cached_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached_tokens, "output_tokens": output_tokens}
