"""The one event path: upstream events, either streamed as SSE chunks or folded into one answer.

Both read the events through one loop (`_delivered`: stop-generation, the event transformation,
usage and the access record); in-flight bookkeeping is in inflight.py, the merging of several
generations in merge.py."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from .. import sse
from ..backends.events import Accepted, GenerationEvent, PromptProgress, UpstreamWait
from ..dialects.blocks import Blocks
from ..errors import ProxyError
from ..observability import LOADING_MODEL
from .inflight import Context, InFlight, UsageCounter, until_stopped
from .merge import close, start

if TYPE_CHECKING:
    from ..dialects.shape import Shape

__all__ = ["ChoiceFold", "Context", "InFlight", "answer", "fold", "start", "stream"]  # start, Context: services' entry points

log = logging.getLogger("api_like_oai")


def stream(
    events: Iterator[GenerationEvent],
    shape: Shape,
    choice_count: int,
    context: Context,
    prefixes: dict[int, str] | None = None,
    transform=None,
) -> Iterator[bytes]:
    """SSE bytes: the shape's openings, its chunks per event, its closings and end ([DONE] for
    OpenAI's chat and completions); the shape's error event on failure. `transform` (events ->
    events), if given, rewrites the events first (tool-call parsing)."""
    usage = UsageCounter()
    record = context.record
    if record:
        record.metrics.streams_in_flight.inc()
    try:
        try:
            with context.inflight.track(record) as stop_event:
                yield from _openings(shape, choice_count, prefixes)
                shape.prepare_text()  # while the upstream reads the prompt
                stoppable = until_stopped(events, stop_event, choice_count, context.inflight)
                first = yield from _prompt_read(stoppable, context, shape.keepalive)
                for event in _delivered(_resumed(first, stoppable), context, transform, usage):
                    frame = shape.content_frame(event)
                    if frame is not None:
                        yield frame
                        continue
                    yield from map(shape.frame, shape.chunks(event))
        except Exception as exc:  # noqa: BLE001 - every failure ends the stream with the API's error event
            error = _as_proxy_error(exc)
            if record:
                record.fail(error.status, error.code)
            yield shape.frame(shape.error_chunk(context.shown(error)))
            return
        finally:
            _settle(events, context, usage, stream=True)
        yield from map(shape.frame, shape.closings(usage.to_dict()))
        if shape.end:
            yield shape.end
    finally:
        if record:
            record.close()  # after the closing events: what the shape does for them (a store write) is traced


def _openings(shape: Shape, choice_count: int, prefixes: dict[int, str] | None) -> Iterator[bytes]:
    for index in range(choice_count):
        yield from map(shape.frame, shape.openings(index))
        if prefixes and prefixes.get(index):
            yield from map(shape.frame, shape.chunks(GenerationEvent(text=prefixes[index], index=index)))


def _prompt_read(events: Iterator, context: Context, keepalive: bytes | None) -> Generator[bytes, None, object]:
    """Reads what comes before the answer off the front of `events` into the request's record: the
    pool's UpstreamWait (a crashed model being restarted: services/waiting.py) and llama.cpp's progress
    events, yielding `keepalive` for each wait and after each progress event that ends a silence of
    sse.KEEPALIVE_SECONDS (a client waiting on a restart or a long prompt does not time out); returns
    the answer's first event, None if there is none. Nothing of either reaches the answer. A stream
    (`keepalive` given) yields an empty piece for the upstream's Accepted: the server writes the answer's
    head then (the worker holds it for the first chunk, worker.send_flags), while the prompt is read."""
    record = context.record
    last_sent = time.monotonic()
    for event in events:
        kind = type(event)
        if kind is Accepted:
            if keepalive is not None:
                yield b""
            continue
        if kind is UpstreamWait:
            if record:
                record.phase = LOADING_MODEL
            if keepalive is not None:
                last_sent = time.monotonic()
                yield keepalive
            continue
        if kind is not PromptProgress:
            if record:
                record.prompt_read()
            return event
        if record:
            record.prompt_progress(event)
        if keepalive is not None and time.monotonic() - last_sent >= sse.KEEPALIVE_SECONDS:
            last_sent = time.monotonic()
            yield keepalive
    return None


def _resumed(first, events: Iterator) -> Iterator:
    return events if first is None else itertools.chain((first,), events)


def _returned(generator: Generator):
    """What `generator` returns, run to its end (what it yields is dropped)."""
    try:
        while True:
            next(generator)
    except StopIteration as stop:
        return stop.value


def _delivered(events: Iterator[GenerationEvent], context: Context, transform, usage: UsageCounter) -> Iterator[GenerationEvent]:
    """The events as the client gets them, streamed or folded (already ended early by stop-generation:
    until_stopped): transformed (reasoning, tool calls), counted into `usage` and the access record."""
    record = context.record
    if record:
        record.usage = usage  # the live view reads the counts from there
    for event in transform(events) if transform is not None else events:
        usage.add(event)
        if record and record.first_token is None and event.text:
            record.token_arrived()
        yield event


def _as_proxy_error(exc: Exception) -> ProxyError:
    if isinstance(exc, ProxyError):
        return exc
    log.error("a stream failed", exc_info=exc)
    return ProxyError("internal error in the proxy; see its log")


def _settle(events, context: Context, usage: UsageCounter, *, stream: bool) -> None:
    """Release the upstream, then count the request, whatever happened on the way."""
    record = context.record
    try:
        close(events)
    finally:
        if record:
            record.count(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
            if stream:
                record.metrics.streams_in_flight.dec()


class ChoiceFold:
    """The events of every choice accumulated into what a non-streamed answer is made of."""

    def __init__(self, choice_count: int, prefixes: dict[int, str] | None = None):
        self.blocks = {index: Blocks((prefixes or {}).get(index, "")) for index in range(choice_count)}
        self.finish_reasons: dict[int, str | None] = dict.fromkeys(range(choice_count))
        self.stop_words: dict[int, str | None] = dict.fromkeys(range(choice_count))
        self.logprobs: dict[int, list] = {index: [] for index in range(choice_count)}
        self.reasoning: dict[int, list[str]] = {index: [] for index in range(choice_count)}

    def add(self, event: GenerationEvent) -> None:
        blocks = self.blocks[event.index]
        if not blocks.extend_open_text(event):
            blocks.add(event)
        if event.logprobs:
            self.logprobs[event.index].extend(event.logprobs)
        if event.reasoning:
            self.reasoning[event.index].append(event.reasoning)
        if event.finish_reason:
            self.finish_reasons[event.index] = event.finish_reason
            self.stop_words[event.index] = event.stop_word

    def choices(self) -> list[dict]:
        """Per choice: "index", "text", "tool_calls" (OpenAI's), "blocks" (in order), "finish_reason",
        "stop_word", "logprobs", "reasoning" (the thought split from the text)."""
        return [
            {
                "index": index,
                "text": blocks.text(),
                "tool_calls": blocks.tool_calls(),
                "blocks": blocks.blocks,
                "finish_reason": self.finish_reasons[index],
                "stop_word": self.stop_words[index],
                "logprobs": self.logprobs[index],
                "reasoning": "".join(self.reasoning[index]),
            }
            for index, blocks in self.blocks.items()
        ]


def fold(
    events: Iterator[GenerationEvent],
    shape: Shape,
    choice_count: int,
    context: Context,
    prefixes: dict[int, str] | None = None,
    transform=None,
) -> dict:
    """The non-streamed answer: the same events, accumulated per choice."""
    folded = ChoiceFold(choice_count, prefixes)
    usage = UsageCounter()
    try:
        with context.inflight.track(context.record) as stop_event:
            stoppable = until_stopped(events, stop_event, choice_count, context.inflight)
            first = _returned(_prompt_read(stoppable, context, None))
            for event in _delivered(_resumed(first, stoppable), context, transform, usage):
                folded.add(event)
    finally:
        _settle(events, context, usage, stream=False)
    return shape.response(folded.choices(), usage.to_dict())


def answer(
    api_request,
    events: Iterator[GenerationEvent],
    shape: Shape,
    choice_count: int,
    context: Context,
    prefixes: dict[int, str] | None = None,
    transform=None,
):
    """The events streamed when the request asks for a stream, else folded into one answer;
    `transform` (events -> events) rewrites them first, the same way for both."""
    if api_request.stream:
        return stream(events, shape, choice_count, context, prefixes, transform)
    return fold(events, shape, choice_count, context, prefixes, transform)
