"""Several generations as one event iterator: each choice of `n` > 1 (or each prompt of a list) runs
in its own thread (a greenlet under gevent), all started together, their events interleaved as they
arrive.

A generation is only ever advanced and closed by the thread that runs it (a generator cannot be
closed from another while it waits for its next token: "generator already executing"); the reader
asks the threads to stop, and each closes its own upstream connection at its next event.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator

from ..backends.events import PROMPT_READING, GenerationEvent
from ..backends.upstream import UpstreamRequest
from ..errors import ProxyError
from .inflight import Context

log = logging.getLogger("api_like_oai")

_STARTED, _FINISHED = object(), object()  # a choice's first event arrived; a choice ended


def start(generate, requests: list[UpstreamRequest], context: Context, *, folded: bool = False) -> Iterator[GenerationEvent]:
    """The merged events of one generation per request, choice `index` in list order; `generate` is an
    upstream's (backends.upstream.Upstream.generate, through the request's door). `folded`: the events go
    to a fold (a non-streamed answer), so the tokens the upstream sent together may come as one event
    (its `batched`)."""
    return merged(
        [
            functools.partial(generate, upstream_request, index=index, on_chosen=context.note_upstream, batched=folded)
            for index, upstream_request in enumerate(requests)
        ]
    )


def merged(start_generations: list[Callable[[], Iterator[GenerationEvent]]]) -> Iterator[GenerationEvent]:
    """Events of several generations run concurrently, interleaved as they arrive.

    Each callable starts one generation (sending its request) and returns its events. Every request
    is sent and every choice's first event received before this returns, so an upstream that fails
    before any token still gets a plain HTTP error, with its status, not a broken stream.
    """
    if len(start_generations) == 1:
        return Primed(start_generations[0]())
    return Primed(interleave(start_generations))


class Primed:
    """An event iterator whose first event was already received; close() reaches the upstream."""

    def __init__(self, events: Iterator[GenerationEvent]):
        self.events = events
        try:
            self.first: GenerationEvent | None = next(events)
        except StopIteration:
            self.first = None
        except BaseException:
            close(events)
            raise

    def __iter__(self):
        # The events themselves after the first, not this object's __next__: one call less per token.
        first, self.first = self.first, None
        return self.events if first is None else itertools.chain((first,), self.events)

    def __next__(self) -> GenerationEvent:
        if self.first is not None:
            first, self.first = self.first, None
            return first
        return next(self.events)

    def close(self) -> None:
        close(self.events)


def close(events) -> None:
    """Release the upstream at once (the client went away, or we are done)."""
    close_events = getattr(events, "close", None)
    if close_events:
        close_events()


def interleave(start_generations: list[Callable[[], Iterator[GenerationEvent]]]) -> Iterator[GenerationEvent]:
    """The events of every generation, each started and read by a thread of its own. Events are held
    back until every choice has started; the first error of any choice is raised (ending them all)."""
    arrivals: queue.Queue = queue.Queue()
    stopped = threading.Event()
    for start_generation in start_generations:  # in the request's context: its key's priority (access/priority.py)
        threading.Thread(
            target=contextvars.copy_context().run, args=(_pump, start_generation, arrivals, stopped), daemon=True
        ).start()
    try:
        yield from _received(arrivals, len(start_generations))
    finally:
        stopped.set()  # each thread closes its own generation: see the module's docstring


def _received(arrivals: queue.Queue, choice_count: int) -> Iterator[GenerationEvent]:
    unstarted = running = choice_count
    held: list[GenerationEvent] = []
    while running:
        item = arrivals.get()
        if item is _STARTED:
            unstarted -= 1
        elif item is _FINISHED:
            running -= 1
        elif isinstance(item, ProxyError):
            raise item
        elif unstarted:
            held.append(item)
        else:
            yield item
        if held and not unstarted:
            yield from held
            held.clear()
    yield from held


def _pump(start_generation, arrivals: queue.Queue, stopped: threading.Event) -> None:
    """Start one generation and pass its events on until it ends or the reader stopped; any error
    goes to the reader, so that a choice never ends without a finish reason or an error."""
    events = None
    try:
        events = start_generation()
        arrivals.put(_STARTED)
        for event in events:
            if stopped.is_set():
                break
            if not isinstance(event, PROMPT_READING):  # interleaved choices start together, at their first tokens
                arrivals.put(event)
    except ProxyError as exc:
        arrivals.put(exc)
    except Exception:
        log.exception("a generation failed")
        arrivals.put(ProxyError("internal error in the proxy; see its log"))
    finally:
        if events is not None:
            close(events)
        arrivals.put(_FINISHED)
