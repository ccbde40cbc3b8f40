"""Generation events as Anthropic's message, and as its stream of named events: message_start, per
content block content_block_start / content_block_delta / content_block_stop, message_delta (the stop
reason and usage), message_stop; an `error` event if the generation fails after the start.

The model's thought comes first, as a `thinking` block signed with the installation's seal (its
`signature_delta` just before the block stops, as Anthropic streams it), so that it reaches the
template again when the client sends it back; with display "omitted" the block's text is empty and
the signature carries the thought; with thinking disabled there is no thinking block.

The shape Protocol (shape.py), so generation.stream and generation.fold drive it. One
choice only (the Messages API has no `n`); blocks are cut by dialects/blocks.Blocks, as in the fold.
"""

from __future__ import annotations

import os
from dataclasses import replace

from .. import sse
from ..backends.events import GenerationEvent, ItemStep
from ..errors import ProxyError
from ..sealing import Seal
from .anthropic import THINKING
from .anthropic_edits import ContextEdits
from .anthropic_mcp import blocks_of, content_of
from .blocks import DELTA, ITEM, REASONING, START, STOP, TEXT, TOOL_CALL, Block, Blocks, arguments_object, reasoning_tokens

_BLOCK = sse.NUMBER_HOLES[0]  # the block index's stand-in in a sample frame
# Fields of Anthropic's message (and of message_delta's delta) that never apply here, present as null as
# the SDK's types declare them: `container` is the code-execution tool's (no server tool runs here),
# `stop_details` explains a refusal (a local model's refusal is plain text, stop reason end_turn).
_NOT_APPLICABLE = {"stop_details": None, "container": None}


class MessagesShape:
    end = b""  # the stream ends with message_stop, no [DONE]
    keepalive = sse.KEEPALIVE_PING  # sent while the prompt is read (generation.py)
    usage_at_start = True  # message_start says how much of the prompt was cached: the first event must know

    def __init__(
        self,
        model: str,
        stop_sequences: list[str] | None = None,
        seal: Seal | None = None,
        thinking_display: str | None = "summarized",
        context_edits: ContextEdits | None = None,
    ):
        """`thinking_display`: "summarized", "omitted" or None (see MessagesRequest.thinking_display);
        `context_edits`: the request's context_management, whose applied edits the answer reports."""
        self.id = f"msg_{os.urandom(16).hex()}"  # uuid4().hex's randomness, without its object
        self.model = model
        self.stop_sequences = stop_sequences or []
        self.seal = seal
        self.thinking_display = thinking_display if seal is not None else None
        self.context_edits = context_edits
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
        return []  # message_start waits for the first event: it carries the prompt's token count

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The frame of a text delta to the open text block, assembled around pre-encoded parts."""
        if not self.started or not self.blocks.extend_open_text(event):
            return None
        if self._text_pattern is None:
            self.prepare_text()
        return self._text_pattern.fill(str(self.blocks.open.index).encode(), sse.encode_string(event.text))

    def prepare_text(self) -> None:
        (sample,) = self._block_events(DELTA, Block(TEXT, _BLOCK), sse.TEXT_HOLE)
        self._text_pattern = sse.FramePattern(self.frame(sample), _BLOCK, sse.TEXT_HOLE)

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = [] if self.started else [self._message_start(event.prompt_tokens or 0, event.cached_tokens or 0)]
        if event.reasoning and self.thinking_display is None:
            event = replace(event, reasoning="")  # thinking disabled: no thinking block
        for change in self.blocks.add(event) if event.item is None else self._item_changes(event.item):
            chunks += self._block_events(*change)
        if event.finish_reason:
            self.finish_reason, self.stop_word = event.finish_reason, event.stop_word
        return chunks

    def _item_changes(self, step) -> list:
        """An item of the proxy's MCP loop as the blocks a stream gives out whole (started and stopped)."""
        changes = []
        for block in blocks_of(step.item, step.done):
            item = {"id": f"{block['type']}_{step.item['id']}", "block": block}
            changes += self.blocks.add(GenerationEvent(item=ItemStep(item, done=False)))
            changes += self.blocks.add(GenerationEvent(item=ItemStep(item, done=True)))
        return changes

    def closings(self, usage: dict) -> list[dict]:
        chunks = (
            [] if self.started else [self._message_start(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"])]
        )
        for change in self.blocks.close():
            chunks += self._block_events(*change)
        stop_reason, stop_sequence = self._stop_reason(self.finish_reason, self.stop_word)
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence, **_NOT_APPLICABLE}
        return [
            *chunks,
            {
                "type": "message_delta",
                "delta": delta,
                "usage": _token_counts(usage, self.blocks.blocks),
                **self._context_management(),
            },
            {"type": "message_stop"},
        ]

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The message from the folded choice."""
        choice = choices[0]
        stop_reason, stop_sequence = self._stop_reason(choice["finish_reason"], choice["stop_word"])
        shown = [block for block in choice["blocks"] if block.kind != REASONING or self.thinking_display is not None]
        content = [content for block in shown for content in self._contents(block)]
        return {**self._message(content, stop_reason, stop_sequence, _usage(usage, shown)), **self._context_management()}

    def _message(self, content: list, stop_reason: str | None, stop_sequence: str | None, usage: dict) -> dict:
        """Every field of Anthropic's Message (the SDK's type); `diagnostics` (why Anthropic's prompt cache
        missed) is null: llama.cpp reuses what it can of its cache without saying why the rest missed."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            **_NOT_APPLICABLE,
            "diagnostics": None,
            "usage": usage,
        }

    def _message_start(self, prompt_tokens: int, cached_tokens: int) -> dict:
        self.started = True
        usage = _message_usage(_counts(prompt_tokens, cached_tokens, 0, 0))
        return {"type": "message_start", "message": self._message([], None, None, usage)}

    def _context_management(self) -> dict:
        """What the request's context edits cleared (Anthropic reports it with the stop reason)."""
        return {} if self.context_edits is None else {"context_management": self.context_edits.report()}

    def _stop_reason(self, finish_reason: str | None, stop_word: str | None) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence): a stop string of the request's is a stop_sequence; the
        template's own (end of turn) and the end-of-sequence token are end_turn."""
        if finish_reason == "tool_calls":
            return "tool_use", None
        if finish_reason == "tool_rounds":  # the proxy's MCP rounds reached their bound, as Anthropic's server tools
            return "pause_turn", None
        if finish_reason == "length":
            return "max_tokens", None
        if stop_word is not None and stop_word in self.stop_sequences:
            return "stop_sequence", stop_word
        return "end_turn", None

    def _block_events(self, change: str, block: Block, piece: str) -> list[dict]:
        """The stream events of one change to a block: a thinking block's signature comes in a
        signature_delta just before it stops; with display "omitted" its text is not streamed."""
        if change == START:
            opened = block.item["block"] if block.kind == ITEM else _opened(block)
            return [{"type": "content_block_start", "index": block.index, "content_block": opened}]
        stop = {"type": "content_block_stop", "index": block.index}
        if block.kind != REASONING:
            return (
                [stop]
                if change == STOP
                else [{"type": "content_block_delta", "index": block.index, "delta": _delta(block, piece)}]
            )
        if change == STOP:
            signature = {"type": "signature_delta", "signature": self._signature(block.content)}
            return [{"type": "content_block_delta", "index": block.index, "delta": signature}, stop]
        if self.thinking_display == "omitted":
            return []
        return [{"type": "content_block_delta", "index": block.index, "delta": {"type": "thinking_delta", "thinking": piece}}]

    def _contents(self, block: Block) -> list[dict]:
        """A block of the fold as the message's content blocks: an MCP call of the proxy's is two."""
        return content_of(block.item) if block.kind == ITEM else [self._content(block)]

    def _content(self, block: Block) -> dict:
        if block.kind == TEXT:
            return _text_block(block.content)
        if block.kind == REASONING:
            return {
                "type": "thinking",
                "thinking": "" if self.thinking_display == "omitted" else block.content,
                "signature": self._signature(block.content),
            }
        return _tool_use_block(block, arguments_object(block.content))

    def _signature(self, thought: str) -> str:
        """The seal's signature of the thought; with display "omitted", a token carrying the thought."""
        if self.thinking_display == "omitted":
            return self.seal.wrap(THINKING, thought)
        return self.seal.sign(THINKING, thought)


def _opened(block: Block) -> dict:
    if block.kind == TEXT:
        return _text_block("")
    if block.kind == REASONING:
        return {"type": "thinking", "thinking": "", "signature": ""}
    return _tool_use_block(block, {})


def _text_block(text: str) -> dict:
    return {"type": "text", "text": text, "citations": None}  # citations: only of documents, none here


def _tool_use_block(block: Block, arguments: dict) -> dict:
    """A call the model wrote itself (`caller` direct, as opposed to one from Anthropic's code execution),
    of no toolset (Anthropic's MCP toolsets)."""
    return {
        "type": "tool_use",
        "id": block.call_id,
        "name": block.name,
        "input": arguments,
        "caller": {"type": "direct"},
        "toolset_name": None,
    }


def _delta(block: Block, piece: str) -> dict:
    if block.kind == TOOL_CALL:
        return {"type": "input_json_delta", "partial_json": piece}
    return {"type": "text_delta", "text": piece}


def _usage(usage: dict, blocks: list[Block]) -> dict:
    """The message's usage at the end of the answer whose blocks are `blocks`."""
    return _message_usage(_token_counts(usage, blocks))


def _token_counts(usage: dict, blocks: list[Block]) -> dict:
    """message_delta's usage (MessageDeltaUsage) at the end of the answer whose blocks are `blocks`."""
    return _counts(
        usage["prompt_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"],
        usage["completion_tokens"],
        reasoning_tokens(blocks, usage["completion_tokens"]),
    )


def _counts(prompt_tokens: int, cached_tokens: int, output_tokens: int, thinking_tokens: int) -> dict:
    """The counts both usages carry. Anthropic counts the prompt in three parts: read from the cache,
    written to it, and the rest. llama.cpp caches every prompt by itself, so nothing is reported as
    written (a write costs extra on Anthropic's bill, and here nothing was asked for); no server tool runs."""
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
        "output_tokens": output_tokens,
        "output_tokens_details": {"thinking_tokens": thinking_tokens},
        "server_tool_use": None,
    }


def _message_usage(counts: dict) -> dict:
    """The message's usage (Usage): the counts, the cache writes by lifetime (none), the standard tier
    and speed; `inference_geo`, where Anthropic ran it, is null (on this machine)."""
    return {
        **counts,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "speed": "standard",
        "inference_geo": None,
    }
