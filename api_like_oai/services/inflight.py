"""In-flight bookkeeping: the generations running in this process (so stop-generation and shut-down
can end them), the request around a generation, and the token counts it reports."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..backends.events import GenerationEvent
from ..errors import UpstreamUnavailable
from ..observability import LiveRequests, RequestRecord

if TYPE_CHECKING:
    from ..backends.upstream import Renew

# What stopping one request found (InFlight.stop_one; a word, so that another worker can say it too).
STOPPED, NOT_GENERATING, ABSENT = "stopped", "not generating", "absent"


class StopSwitch:
    """One generation's stop switch (an Event's `set` and `is_set`), and the finish reason the generation
    then ends with: "stop" (stop-generation, a shut-down) unless who stopped it said another ("steered":
    a Responses WebSocket's steering, which the Responses shape writes as incomplete, reason steered)."""

    __slots__ = ("_event", "finish_reason")

    def __init__(self):
        self._event = threading.Event()
        self.finish_reason = "stop"

    def set(self, finish_reason: str = "stop") -> None:
        self.finish_reason = finish_reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class InFlight:
    """The generations running in this process, so /v1/internal/stop-generation can end them; and
    `requests`, every request of this process not yet closed, with its live phase (a dashboard's view)."""

    def __init__(self):
        self.requests = LiveRequests()
        self._stop_events: set[StopSwitch] = set()
        self._lock = threading.Lock()
        self.shutting_down = False
        # SIGTERM: the worker accepts no more connections; what is between requests on a connection of
        # its own (a Responses WebSocket) ends now rather than hold the grace period (worker._drain)
        self.draining = False
        self.on_drain: list[Callable[[], None]] = []  # told once draining begins (the batch runner lets go)
        self.sockets = OpenSockets()  # the Responses WebSockets open here, by key (their per-key bound)

    @contextlib.contextmanager
    def track(self, record: RequestRecord | None = None):
        """A stop switch for one generation, in the set stop_all reaches (and on `record`, to stop it alone)."""
        stop_event = StopSwitch()
        with self._lock:
            self._stop_events.add(stop_event)
        if record is not None:
            record.stop_switch = stop_event
        try:
            yield stop_event
        finally:
            if record is not None:
                record.stop_switch = None
            with self._lock:
                self._stop_events.discard(stop_event)

    def drain(self) -> None:
        """SIGTERM, in either worker (worker.EventWorker, server.py's gthread hook): this process is
        draining; what keeps something of its own (a status stream, a WebSocket, a batch's claim) lets go."""
        self.draining = True
        for let_go in self.on_drain:
            let_go()

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

    def stop_one(self, request_id: str) -> str:
        """End request `request_id`'s generation now: STOPPED, NOT_GENERATING (it has no generation yet)
        or ABSENT (not a request of this process)."""
        record = self.requests.get(request_id)
        if record is None:
            return ABSENT
        return STOPPED if record.stop() else NOT_GENERATING


# wait(timeout): True once the model is ready (held for the request), False if `timeout` seconds passed
# first; raises the refusal's API error (routes.hold_model makes it from the supervisor's pending lease).
Wait = Callable[[float], bool]


class Waiting:
    """One request's model load left pending by admission, for the waiting step to run, and the lease's
    renewal once it is held."""

    def __init__(self):
        self.pending: Wait | None = None
        self.renew: Renew | None = None  # the held lease's renewal, once granted (routes.hold_model)

    def take(self) -> Wait | None:
        pending, self.pending = self.pending, None
        return pending


BARE_EVENTS = "api_like_oai.bare_events"  # a WSGI environ key of a WebSocket's turn: no header can set it


@dataclass
class Context:
    """What a generation needs from the request around it: the stop switch and the access record."""

    inflight: InFlight
    record: RequestRecord | None = None
    log_prompts: bool = False
    session: str | None = None  # the conversation's id from a request header (X-Claude-Code-Session-Id)
    request_bytes: int = 0  # the request body's size: whether its stages let others run (offload.py)
    # model -> its upstream as this request goes through it (services/door.py: the key's limits and
    # priority, the lease's renewal), given by the route; without one, the model's door with neither
    opens_door: Callable = field(default=lambda model: model.door())
    _doors: dict = field(default_factory=dict, repr=False)
    waiting: Waiting | None = None  # a model load admission left pending for the waiting step (waiting.py)
    shows_addresses: bool = True  # whether the caller sees the servers' addresses (routes.sees_everything)
    # a WebSocket's turn (environ[BARE_EVENTS], set by routes/responses_socket.py, never by a client): a
    # stream's events each their JSON alone, which the socket sends as they are, not SSE frames to cut again
    bare_events: bool = False

    def door(self, model):
        """The model's door for this request, opened once: a later round of an MCP loop, run while the
        answer streams (outside the route), goes through the door its first round had."""
        door = self._doors.get(model.name)
        if door is None:
            door = self._doors[model.name] = self.opens_door(model)
        return door

    def shown(self, error):
        """`error` as this caller may read it in a stream that has begun: without the servers'
        addresses unless it sees everything (the error mapping does the same before a stream begins)."""
        return error if self.shows_addresses else error.without_addresses()

    def note_upstream(self, url: str) -> None:
        if self.record is not None:
            self.record.sent_upstream(url)

    def note_route(self, route) -> None:
        if self.record is not None:
            self.record.routed(route.reason, route.hit)


def until_stopped(
    events: Iterable[GenerationEvent], stop_event: StopSwitch, choice_count: int, inflight: InFlight
) -> Iterator[GenerationEvent]:
    """`events`, ended early with the switch's finish reason ("stop" unless its setter said another) for
    every open choice once `stop_event` is set (or with UpstreamUnavailable when the server is shutting down)."""
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
            yield GenerationEvent(finish_reason=stop_event.finish_reason, index=index)


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
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


class OpenSockets:
    """The Responses WebSockets open in this process, counted by key name (a managed key's sockets are
    bounded: routes/responses_socket.py). Counted where they live, as a request's live state is: the
    other workers are asked for theirs (siblings.py) when a socket opens, never written to a store."""

    def __init__(self):
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def of(self, key: str) -> int:
        return self._open.get(key, 0)

    def opened(self, key: str, limit: int, elsewhere: int = 0) -> bool:
        """Count one more socket of `key` unless it has `limit` open here and `elsewhere`; whether it did."""
        with self._lock:
            if self._open.get(key, 0) + elsewhere >= limit:
                return False
            self._open[key] = self._open.get(key, 0) + 1
            return True

    def closed(self, key: str) -> None:
        with self._lock:
            self._open[key] -= 1
            if not self._open[key]:
                del self._open[key]
