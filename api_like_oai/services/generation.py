"""The one event path: upstream events, either streamed as SSE chunks or folded into one answer."""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..backends.events import GenerationEvent
from ..errors import ProxyError, UpstreamUnavailable
from ..observability import RequestRecord
from .blocks import Blocks


def merged(start_generations: list[Callable[[], Iterator[GenerationEvent]]]) -> Iterator[GenerationEvent]:
    """Events of several generations run concurrently, interleaved as they arrive.

    Each callable starts one generation (sending its request) and returns its events. The
    requests are sent and the first event received before this returns, so an upstream that
    fails before any token still gets a plain HTTP error, with its status, not a broken stream.
    """
    if len(start_generations) == 1:
        return Primed(start_generations[0]())
    return Primed(_interleave([start() for start in start_generations]))


def start(generate, requests: list[tuple[str, dict]], context: Context) -> Iterator[GenerationEvent]:
    """The merged events of one generation per (path, payload), choice `index` in list order;
    `generate` is a model's UpstreamPool.generate."""
    return merged([functools.partial(generate, path, payload, index=index, on_chosen=context.note_upstream)
                   for index, (path, payload) in enumerate(requests)])


class Primed:
    """An event iterator whose first event was already received; close() reaches the upstream."""

    def __init__(self, events: Iterator[GenerationEvent]):
        self.events = events
        try:
            self.first: GenerationEvent | None = next(events)
        except StopIteration:
            self.first = None
        except BaseException:
            _close(events)
            raise

    def __iter__(self):
        return self

    def __next__(self) -> GenerationEvent:
        if self.first is not None:
            first, self.first = self.first, None
            return first
        return next(self.events)

    def close(self) -> None:
        _close(self.events)


def _interleave(generations: list[Iterator[GenerationEvent]]) -> Iterator[GenerationEvent]:
    arrivals: queue.Queue = queue.Queue()
    finished = object()

    def pump(events):
        try:
            for event in events:
                arrivals.put(event)
        except ProxyError as exc:
            arrivals.put(exc)
        finally:
            arrivals.put(finished)

    for events in generations:
        threading.Thread(target=pump, args=(events,), daemon=True).start()
    remaining = len(generations)
    try:
        while remaining:
            item = arrivals.get()
            if item is finished:
                remaining -= 1
            elif isinstance(item, ProxyError):
                raise item
            else:
                yield item
    finally:
        for events in generations:
            close = getattr(events, "close", None)
            if close:
                close()


class UsageCounter:
    """The token counts of every choice: the latest each choice's events told (llama.cpp counts on
    every event, so a generation ended early is still counted), summed over the choices."""

    def __init__(self):
        self.prompt_by_choice: dict[int, int] = {}
        self.completion_by_choice: dict[int, int] = {}
        self.cached_by_choice: dict[int, int] = {}

    def add(self, event: GenerationEvent) -> None:
        if event.completion_tokens is not None:
            self.completion_by_choice[event.index] = event.completion_tokens
        if event.prompt_tokens is not None:
            self.prompt_by_choice[event.index] = event.prompt_tokens
        if event.cached_tokens is not None:
            self.cached_by_choice[event.index] = event.cached_tokens

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt_by_choice.values())

    @property
    def completion_tokens(self) -> int:
        return sum(self.completion_by_choice.values())

    @property
    def cached_tokens(self) -> int:
        """Of the prompt tokens, those llama.cpp took from its cache (0 where it does not say)."""
        return sum(self.cached_by_choice.values())

    def to_dict(self) -> dict:
        """OpenAI's usage object; the other APIs' shapes write theirs from it."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}


class InFlight:
    """The generations running in this process, so /v1/internal/stop-generation can end them."""

    def __init__(self):
        self._stop_events: set[threading.Event] = set()
        self._lock = threading.Lock()
        self.shutting_down = False

    @contextlib.contextmanager
    def track(self):
        stop_event = threading.Event()
        with self._lock:
            self._stop_events.add(stop_event)
        try:
            yield stop_event
        finally:
            with self._lock:
                self._stop_events.discard(stop_event)

    def shut_down(self) -> int:
        """End every running generation with an error: the server is going away."""
        self.shutting_down = True
        return self.stop_all()

    def stop_all(self) -> int:
        """Ask every running generation to finish now; how many there were."""
        with self._lock:
            for stop_event in self._stop_events:
                stop_event.set()
            return len(self._stop_events)


def _until_stopped(events: Iterable[GenerationEvent], stop_event: threading.Event,
                   choice_count: int, inflight: InFlight) -> Iterator[GenerationEvent]:
    """`events`, ended early with finish_reason "stop" for every open choice once `stop_event` is set
    (or with UpstreamUnavailable when the server is shutting down)."""
    open_choices = set(range(choice_count))
    for event in events:
        if event.finish_reason:
            open_choices.discard(event.index)
        yield event
        if stop_event.is_set():
            break
    if stop_event.is_set() and inflight.shutting_down:
        raise UpstreamUnavailable("the proxy is shutting down; generation ended before it finished")
    if stop_event.is_set():
        for index in sorted(open_choices):
            yield GenerationEvent(finish_reason="stop", index=index)


def _close(events) -> None:
    close = getattr(events, "close", None)
    if close:
        close()  # the client went away or we are done: release the upstream at once


@dataclass
class Context:
    """What a generation needs from the request around it: the stop switch and the access record."""

    inflight: InFlight
    record: RequestRecord | None = None
    log_prompts: bool = False
    session: str | None = None        # the conversation's id from a request header (X-Claude-Code-Session-Id)

    def note_upstream(self, url: str) -> None:
        if self.record is not None:
            self.record.upstream = url

    def note_route(self, route) -> None:
        if self.record is not None:
            self.record.routed(route.reason, route.hit)


def stream(events: Iterator[GenerationEvent], shape, choice_count: int, context: Context,
           prefixes: dict[int, str] | None = None, transform=None) -> Iterator[bytes]:
    """SSE bytes: the shape's openings, its chunks per event, its closings and end ([DONE] for
    OpenAI's chat and completions); the shape's error event on failure. `transform` (events ->
    events), if given, rewrites the events first (tool-call parsing)."""
    usage = UsageCounter()
    record = context.record
    if record:
        record.metrics.streams_in_flight.inc()
    try:
        with context.inflight.track() as stop_event:
            for index in range(choice_count):
                yield from map(shape.frame, shape.openings(index))
                if prefixes and prefixes.get(index):
                    yield from map(shape.frame, shape.chunks(GenerationEvent(text=prefixes[index], index=index)))
            for event in _transformed(_until_stopped(events, stop_event, choice_count, context.inflight),
                                      transform):
                usage.add(event)
                if record and event.text:
                    record.token_arrived()
                frame = shape.content_frame(event)
                if frame is not None:
                    yield frame
                    continue
                yield from map(shape.frame, shape.chunks(event))
    except ProxyError as exc:
        if record:
            record.fail(exc.status, exc.code)
        yield shape.frame(shape.error_chunk(exc))
        return
    finally:
        _close(events)
        if record:
            record.count(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
            record.metrics.streams_in_flight.dec()
            record.close()
    yield from map(shape.frame, shape.closings(usage.to_dict()))
    if shape.end:
        yield shape.end


class ChoiceFold:
    """The events of every choice accumulated into what a non-streamed answer is made of."""

    def __init__(self, choice_count: int, prefixes: dict[int, str] | None = None):
        self.blocks = {index: Blocks((prefixes or {}).get(index, "")) for index in range(choice_count)}
        self.finish_reasons: dict[int, str | None] = dict.fromkeys(range(choice_count))
        self.stop_words: dict[int, str | None] = dict.fromkeys(range(choice_count))
        self.logprobs: dict[int, list] = {index: [] for index in range(choice_count)}
        self.reasoning: dict[int, list[str]] = {index: [] for index in range(choice_count)}

    def add(self, event: GenerationEvent) -> None:
        self.blocks[event.index].add(event)
        self.logprobs[event.index].extend(event.logprobs or ())
        if event.reasoning:
            self.reasoning[event.index].append(event.reasoning)
        if event.finish_reason:
            self.finish_reasons[event.index] = event.finish_reason
            self.stop_words[event.index] = event.stop_word

    def choices(self) -> list[dict]:
        """Per choice: "index", "text", "tool_calls" (OpenAI's), "blocks" (in order), "finish_reason",
        "stop_word", "logprobs", "reasoning" (the thought split from the text)."""
        return [{"index": index, "text": blocks.text(), "tool_calls": blocks.tool_calls(),
                 "blocks": blocks.blocks, "finish_reason": self.finish_reasons[index],
                 "stop_word": self.stop_words[index], "logprobs": self.logprobs[index],
                 "reasoning": "".join(self.reasoning[index])}
                for index, blocks in self.blocks.items()]


def fold(events: Iterator[GenerationEvent], shape, choice_count: int, context: Context,
         prefixes: dict[int, str] | None = None, transform=None) -> dict:
    """The non-streamed answer: the same events, accumulated per choice."""
    folded = ChoiceFold(choice_count, prefixes)
    usage = UsageCounter()
    try:
        with context.inflight.track() as stop_event:
            for event in _transformed(_until_stopped(events, stop_event, choice_count, context.inflight),
                                      transform):
                usage.add(event)
                if context.record and event.text:
                    context.record.token_arrived()
                folded.add(event)
    finally:
        _close(events)
        if context.record:
            context.record.count(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    return shape.response(folded.choices(), usage.to_dict())


def _transformed(events: Iterator[GenerationEvent], transform) -> Iterator[GenerationEvent]:
    return transform(events) if transform is not None else events


def answer(api_request, events: Iterator[GenerationEvent], shape, choice_count: int, context: Context,
           prefixes: dict[int, str] | None = None, transform=None):
    """The events streamed when the request asks for a stream, else folded into one answer;
    `transform` (events -> events) rewrites them first, the same way for both."""
    if api_request.stream:
        return stream(events, shape, choice_count, context, prefixes, transform)
    return fold(events, shape, choice_count, context, prefixes, transform)
