"""Reasoning split from the answer: a model's `<think>...</think>` becomes `reasoning_content`.

Pure: `ReasoningSplitter` is fed the model's text as it arrives and gives out ("reasoning", text)
and ("content", text) pieces, holding back text that may still be the start or end marker. A
thought counts only at the start of the output (or when the prompt already opened it, as Qwen3's
and DeepSeek-R1's templates do); a marker later in the answer is plain text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from .backends.events import GenerationEvent
from .tools.scan import partial_suffix

REASONING, CONTENT = "reasoning", "content"


@dataclass(frozen=True)
class ReasoningMarkers:
    start: str = "<think>"
    end: str = "</think>"


THINK = ReasoningMarkers()


def detect(template_source: str | None) -> ReasoningMarkers | None:
    """The reasoning markers a chat template's text implies, or None for a model without them."""
    source = template_source or ""
    return THINK if THINK.end in source else None


def prompt_opens_thought(prompt_text: str, markers: ReasoningMarkers) -> bool:
    """Whether the prompt ends inside an open thought (`...<think>\\n`), so the output starts in it."""
    tail = prompt_text.rstrip()
    return tail.endswith(markers.start)


class ReasoningSplitter:
    def __init__(self, markers: ReasoningMarkers = THINK, *, opened: bool = False):
        self.markers = markers
        self.stage = REASONING if opened else "start"
        self.buffer = ""
        self.after_thought = False  # the whitespace after </think> is not part of the answer
        self.thought_began = False  # nor is the whitespace around the thought itself

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self.stage == CONTENT and not self.buffer and not self.after_thought:
            return [(CONTENT, text)] if text else []
        self.buffer += text
        return self._advance(final=False)

    def finish(self) -> list[tuple[str, str]]:
        return self._advance(final=True)

    def _advance(self, final: bool) -> list[tuple[str, str]]:
        pieces: list[tuple[str, str]] = []
        while True:
            before = (self.stage, len(self.buffer))
            getattr(self, "_" + self.stage)(pieces, final)
            if (self.stage, len(self.buffer)) == before:
                return [piece for piece in pieces if piece[1]]

    def _start(self, pieces: list, final: bool) -> None:
        stripped = self.buffer.lstrip()
        if stripped.startswith(self.markers.start):
            self.buffer = stripped[len(self.markers.start) :]
            self.stage = REASONING
        elif final or (stripped and not self.markers.start.startswith(stripped)):
            self.stage = CONTENT

    def _reasoning(self, pieces: list, final: bool) -> None:
        if not self.thought_began:
            self.buffer = self.buffer.lstrip()
            self.thought_began = bool(self.buffer)
        position = self.buffer.find(self.markers.end)
        if position >= 0:
            pieces.append((REASONING, self.buffer[:position].rstrip()))
            self.buffer = self.buffer[position + len(self.markers.end) :]
            self.stage, self.after_thought = CONTENT, True
            return
        keep_from = len(self.buffer) if final else len(self.buffer[: partial_suffix(self.buffer, (self.markers.end,))].rstrip())
        pieces.append((REASONING, self.buffer[:keep_from]))
        self.buffer = self.buffer[keep_from:]

    def _content(self, pieces: list, final: bool) -> None:
        if self.after_thought:
            stripped = self.buffer.lstrip()
            if not stripped and not final:
                return
            self.buffer, self.after_thought = stripped, False
        pieces.append((CONTENT, self.buffer))
        self.buffer = ""


def split_reasoning(markers: ReasoningMarkers, opened: bool):
    """The event transformation: each choice's text through its own ReasoningSplitter; reasoning
    comes out as events with `reasoning`, the answer as events with `text`."""

    def transform(events: Iterator[GenerationEvent]) -> Iterator[GenerationEvent]:
        splitters: dict[int, ReasoningSplitter] = {}
        for event in events:
            splitter = splitters.get(event.index)
            if splitter is None:
                splitter = splitters[event.index] = ReasoningSplitter(markers, opened=opened)
            pieces = splitter.feed(event.text) if event.text else []
            if not event.finish_reason and len(pieces) == 1 and pieces[0] == (CONTENT, event.text):
                yield event  # answer text, as it came
                continue
            if event.finish_reason:
                pieces += splitter.finish()
            yield from _as_events(event, pieces)

    return transform


def _as_events(event: GenerationEvent, pieces: list[tuple[str, str]]) -> list[GenerationEvent]:
    """One upstream event's pieces as events; the first keeps its logprobs, the last its counts and
    finish and stop word (an event of its own when there is no piece to carry them)."""
    events = [
        GenerationEvent(index=event.index, **({"reasoning": text} if kind == REASONING else {"text": text}))
        for kind, text in pieces
    ]
    if not events:
        return [replace(event, text="")]
    events[0] = replace(events[0], logprobs=event.logprobs)
    events[-1] = replace(
        events[-1],
        finish_reason=event.finish_reason,
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        stop_word=event.stop_word,
        cached_tokens=event.cached_tokens,
    )
    return events
