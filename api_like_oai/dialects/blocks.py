"""One choice's output as ordered blocks: runs of thought, text and tool calls, as they arrived.

OpenAI's chat answer keeps the text and the calls apart; Anthropic's `content` and the Responses
API's `output` keep them in order, one block (or item) per run of text and per call. `Blocks` is
that segmentation, fed the same events by `generation.fold` and by the streaming shapes, so a
streamed answer and a folded one are cut into the same blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..backends.events import GenerationEvent

TEXT, TOOL_CALL, REASONING, ITEM = "text", "tool_call", "reasoning", "item"
# What Blocks.add reports: a block starts, grows by a piece (text, or a call's arguments), stops.
START, DELTA, STOP = "start", "delta", "stop"


@dataclass
class Block:
    kind: str  # TEXT, TOOL_CALL, REASONING (the model's thought) or ITEM
    index: int  # its position among the choice's blocks
    pieces: list[str] = field(default_factory=list)  # the text, or the call's arguments, as they came
    call_id: str | None = None
    name: str | None = None
    completion_tokens: int | None = None  # a thought's: the answer's token count at its last piece
    item: dict | None = None  # an ITEM's: the output item the proxy made, as it stands

    @property
    def content(self) -> str:
        return "".join(self.pieces)

    def as_tool_call(self) -> dict:
        """OpenAI's tool call: {"id", "type", "function": {"name", "arguments"}}."""
        return {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": self.content}}


class Blocks:
    """The blocks of one choice, built event by event; `add` says what changed, for streams."""

    def __init__(self, prefix: str = ""):
        self.blocks: list[Block] = []
        self.open: Block | None = None
        self._calls: dict[int, Block] = {}  # ToolCallDelta.index -> its block
        if prefix:
            self._add_text(prefix)

    def add(self, event: GenerationEvent) -> list[tuple[str, Block, str]]:
        """(START | DELTA | STOP, block, piece) for what `event` changed, in order."""
        changes = self._add_run(REASONING, event.reasoning) if event.reasoning else []
        if event.reasoning and event.completion_tokens is not None:
            self.open.completion_tokens = event.completion_tokens  # so far: the reasoning tokens
        if event.text:
            changes += self._add_run(TEXT, event.text)
        for delta in event.tool_calls or ():
            changes += self._add_call_delta(delta)
        if event.item is not None:
            changes += self._add_item(event.item)
        return changes

    def extend_open_text(self, event: GenerationEvent) -> bool:
        """Whether `event` is only more text of the open text block (no thought, no tool call, no
        finish), added to it if so: most events, which a stream's shapes and a fold then take without
        `add` and its list of changes (the one test of it for all of them)."""
        if event.finish_reason or event.tool_calls or event.reasoning or not event.text:
            return False
        block = self.open
        if block is None or block.kind != TEXT:
            return False
        block.pieces.append(event.text)
        return True

    def close(self) -> list[tuple[str, Block, str]]:
        """Stop the open block, if any."""
        if self.open is None:
            return []
        closed, self.open = self.open, None
        return [(STOP, closed, "")]

    def text(self) -> str:
        return "".join(block.content for block in self.blocks if block.kind == TEXT)

    def tool_calls(self) -> list[dict]:
        return [block.as_tool_call() for block in self.blocks if block.kind == TOOL_CALL]

    def reasoning(self) -> str:
        return "".join(block.content for block in self.blocks if block.kind == REASONING)

    def _add_text(self, text: str) -> list[tuple[str, Block, str]]:
        return self._add_run(TEXT, text)

    def _add_run(self, kind: str, piece: str) -> list[tuple[str, Block, str]]:
        """`piece` added to the open block of `kind`, or to a new one that closes the open block."""
        if self.open is not None and self.open.kind == kind:
            self.open.pieces.append(piece)
            return [(DELTA, self.open, piece)]
        changes = self._start(Block(kind, len(self.blocks)))
        self.open.pieces.append(piece)
        return [*changes, (DELTA, self.open, piece)]

    def _add_call_delta(self, delta) -> list[tuple[str, Block, str]]:
        block = self._calls.get(delta.index)
        changes = []
        if block is None:
            block = self._calls[delta.index] = Block(TOOL_CALL, len(self.blocks), call_id=delta.id, name=delta.name)
            changes = self._start(block)
        if delta.arguments:
            block.pieces.append(delta.arguments)
            changes.append((DELTA, block, delta.arguments))
        return changes

    def _add_item(self, step) -> list[tuple[str, Block, str]]:
        """An item of the proxy's own (events.ItemStep): started when added, stopped when done."""
        if not step.done:
            return self._start(Block(ITEM, len(self.blocks), item=step.item))
        block = next(block for block in reversed(self.blocks) if block.item and block.item["id"] == step.item["id"])
        block.item = step.item
        if self.open is block:
            return self.close()
        return [(STOP, block, "")]

    def _start(self, block: Block) -> list[tuple[str, Block, str]]:
        changes = self.close()
        self.blocks.append(block)
        self.open = block
        return [*changes, (START, block, "")]


def arguments_object(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's `input` and the Responses API's typed calls carry:
    `{}` for none, for a call cut short by max_tokens, or for arguments that are not an object."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def reasoning_tokens(blocks: list[Block], completion_tokens: int) -> int:
    """The answer's tokens spent thinking: its token count when its last thought ended, at most all of
    them; 0 without a thought."""
    ended = max((block.completion_tokens or 0 for block in blocks if block.kind == REASONING), default=0)
    return min(ended, completion_tokens)
