"""The Responses API over a WebSocket (`GET /v1/responses` upgraded): one socket is one session.

The client sends `response.create` events (the body of `POST /v1/responses` without `stream` and
`background`) and `response.steer` events; the session answers each `response.create` with the very
events the SSE stream of `POST /v1/responses` has, one JSON text message each. A turn *is* that POST:
the route runs it through the app (`RunTurn`), so the key's limits, usage, the access record, leases,
waiting, MCP tools and the store act per response exactly as over HTTP, and nothing here renders or
generates. What the session adds:

- **state of earlier turns**: the input and output items of the responses it answered are held on the
  socket (`Held`: at most MAX_HELD_RESPONSES, a chain of at most MAX_HELD_BYTES), so a turn with
  `store: false` continues one with `previous_response_id`: its held items go before the turn's input
  and the turn is sent as one self-contained request (the box of a fleet needs nothing else); the
  events say the `previous_response_id` the client sent. An id the socket does not hold is left to the
  store, as over HTTP; a response that failed is not held.
- **one response in flight**: a `response.create` while one streams is an `error` event, and the socket
  goes on (so does it after any bad event);
- **warm-ups**: `response.create` with `generate: false` holds its input as a response with no output
  (`warm_up`), which a later turn continues;
- **steering** (`response.steer`): accepted, the generation stopped at the next event (or, in a tool
  call, once the call is whole), the response ended `incomplete` with reason `steered`, and a successor
  created with the queued input and the same settings (see `_Streaming`);
- **an idle socket is closed** after `idle_seconds` without a message, and a socket whose client went
  away ends its generation at the next event, as an HTTP stream does.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import orjson
from pydantic import ValidationError

from ..compact_json import json_bytes
from ..dialects.responses import ResponsesRequest
from ..dialects.responses_shape import ResponsesShape
from ..errors import InvalidRequest, ProxyError
from .admission import invalid_request
from .stored_items import stored_item

MAX_HELD_RESPONSES = 16  # responses a socket holds for previous_response_id (the oldest go first)
MAX_HELD_BYTES = 16 * 1024 * 1024  # a held response's chain of items, as JSON (the route: --max-body-bytes)
# A managed key's open sockets, unless its max_parallel says (sockets_allowed); each socket costs its
# worker a connection, a greenlet and up to MAX_HELD_BYTES held, idle or not.
SOCKETS_PER_KEY = 16
IDLE_SECONDS = 900.0  # a socket without a message this long is closed
POLL_SECONDS = 1.0  # how often an idle socket looks whether the worker is shutting down
# A steered response's successor waits this long after the stop: llama-server frees the slot of a
# generation whose client went away only when it next tries to send it a token, and a successor sent
# before would be given another slot, reading its whole prompt again instead of from the KV cache.
STEER_SETTLE_SECONDS = 0.2
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
RESPONSE_EVENTS = frozenset({"response.created", "response.in_progress"}) | TERMINAL
GOING_AWAY, NORMAL = 1001, 1000  # WebSocket close codes
NOTHING_GENERATED = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": 0}}


def sockets_allowed(record) -> int | None:
    """How many Responses WebSockets a managed key (`record`, a KeyRecord) may hold open at once on one
    instance: its max_parallel when it has one (a socket runs one response at a time, so no more sockets
    than responses it may run together), else SOCKETS_PER_KEY. None: unbounded (no managed key: the
    operator's keys of the flags, a proxy without keys)."""
    if record is None:
        return None
    return record.max_parallel or SOCKETS_PER_KEY


class SocketClosed(Exception):
    """The client closed the socket, or it broke."""


class Socket(Protocol):
    """A server-side WebSocket (the route adapts its library's to this)."""

    def receive(self, timeout: float | None) -> str | bytes | None:
        """The next message, or None after `timeout` seconds without one; SocketClosed once closed."""

    def send(self, text: str | bytes) -> None:
        """One text message; SocketClosed once closed."""

    def close(self, code: int, reason: str) -> None: ...


class TurnAnswer(Protocol):
    """One turn run as `POST /v1/responses` with `stream: true` (routes/responses_socket.py)."""

    status: int  # the HTTP status: 200 for a stream, else `chunks` are the error's JSON

    def chunks(self) -> Iterator[bytes]:
        """The answer's bytes as the server would write them (SSE frames for a stream)."""

    def stop(self, finish_reason: str) -> bool:
        """Stop the generation now (as stop-generation does), ending it with `finish_reason`: whether it
        was generating."""

    def close(self) -> None:
        """Release the turn (its lease, its record): a generation not finished is cancelled upstream."""


RunTurn = Callable[[bytes], TurnAnswer]


@dataclass
class Limits:
    idle_seconds: float = IDLE_SECONDS
    held_responses: int = MAX_HELD_RESPONSES
    held_bytes: int = MAX_HELD_BYTES
    steer_settle_seconds: float = STEER_SETTLE_SECONDS


def serve(socket: Socket, run_turn: RunTurn, shutting_down: Callable[[], bool], limits: Limits | None = None) -> None:
    """Answer the socket's events until it closes, idles past the limit, or the worker shuts down."""
    Session(socket, run_turn, limits or Limits()).serve(shutting_down)


class Held:
    """The responses a socket answered, by id: each one's whole chain of items (the earlier turns' items,
    its input, its output). Bounded: a chain of at most `held_bytes` (JSON), at most `held_responses`
    chains, and all of them together at most twice `held_bytes` counted as if they shared nothing (they
    share their items, lists of the same dicts: a bound on the memory even when a client forks every
    turn). The oldest go first; the newest is always kept."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._chains: OrderedDict[str, list[dict]] = OrderedDict()
        self._bytes: dict[str, int] = {}

    def chain(self, response_id: str | None) -> list[dict] | None:
        return self._chains.get(response_id) if response_id is not None else None

    def hold(self, response_id: str, previous_id: str | None, added: list[dict]) -> None:
        """Hold `response_id` as `previous_id`'s chain (held; None: none) followed by `added`."""
        size = self._bytes.get(previous_id, 0) + len(json_bytes(added))
        if size > self.limits.held_bytes:
            return  # too long to keep: a continuation of it needs the store (or the whole input again)
        self._chains[response_id] = (self.chain(previous_id) or []) + added
        self._bytes[response_id] = size
        while len(self._chains) > 1 and (
            len(self._chains) > self.limits.held_responses or sum(self._bytes.values()) > 2 * self.limits.held_bytes
        ):
            oldest, _ = self._chains.popitem(last=False)
            self._bytes.pop(oldest, None)


@dataclass
class Turn:
    """One response.create as it is sent: its body, whether it continues a chain the socket holds, the
    previous_response_id the client sent, the lane it named, and its own input as items."""

    body: dict
    continues_held: bool = False
    previous_response_id: str | None = None
    stream_id: str | None = None
    own_input: list[dict] = field(default_factory=list)


class Session:
    def __init__(self, socket: Socket, run_turn: RunTurn, limits: Limits):
        self.socket, self.run_turn, self.limits = socket, run_turn, limits
        self.held = Held(limits)
        self.pending: dict[str, list[dict]] = {}  # steering input queued for a response awaiting tool output

    def serve(self, shutting_down: Callable[[], bool]) -> None:
        idle = 0.0
        try:
            while idle < self.limits.idle_seconds:
                if shutting_down():
                    self.socket.close(GOING_AWAY, "the server is shutting down")
                    return
                message = self.socket.receive(min(POLL_SECONDS, self.limits.idle_seconds - idle))
                if message is None:
                    idle += POLL_SECONDS
                    continue
                idle = 0.0
                self.handle(message)
            self.socket.close(NORMAL, f"idle for {self.limits.idle_seconds:g} seconds")
        except SocketClosed:
            return

    def handle(self, message: str | bytes) -> None:
        """One client event with no response in flight."""
        try:
            event = client_event(message)
            if event["type"] == "response.create" and event.get("generate") is False:
                self.warm_up(self.turn(event))
            elif event["type"] == "response.create":
                turn = self.turn(event)
                while turn is not None:
                    turn = self.run(turn)
            elif event["type"] == "response.steer":
                self.send(steer_failed(event, "response_not_active", "no response is in flight on this socket"))
            else:
                raise InvalidRequest(f"unknown event type {event['type']!r}", param="type", code="unknown_event_type")
        except ProxyError as exc:
            self.send(error_event(exc.status, exc.to_dict()))

    def turn(self, event: dict) -> Turn:
        """The request a response.create event is: its held chain (and steering input queued for the
        response it continues) put in front of its input."""
        body = {name: value for name, value in event.items() if name not in ("type", "stream_id", "generate", "stream")}
        if body.get("background"):
            raise InvalidRequest("background responses are not supported over a WebSocket", param="background")
        previous = body.get("previous_response_id")
        previous = previous if isinstance(previous, str) else None
        queued = self.pending.pop(previous, []) if previous is not None else []
        own_input = queued + _as_items(body.get("input"), "input")
        chain = self.held.chain(previous)
        if chain is not None:
            if body.get("conversation") is not None:
                raise InvalidRequest(
                    "previous_response_id and conversation cannot both be given", param="conversation", code="conflicting_fields"
                )
            del body["previous_response_id"]
        # Always as items, the first turn's too: every turn of the socket then opens with the same item (the
        # same dict, id included), which a fleet's front places the conversation by (fleet/affinity.py).
        body["input"] = (chain or []) + own_input
        body["stream"] = True
        return Turn(body, chain is not None, previous, event.get("stream_id"), own_input)

    def warm_up(self, turn: Turn) -> None:
        """`generate: false`: the turn's input held as a response with no output, for a later turn to
        continue, answered by response.created, .in_progress and .completed; the model is not asked (nor
        the key's limits: nothing is generated)."""
        # The request only shapes the response's echo of its settings; a warm-up may bring no input yet.
        try:
            request = ResponsesRequest.model_validate(turn.body | {"input": turn.body.get("input") or "-"})
        except ValidationError as exc:
            raise invalid_request(exc) from None
        shape = ResponsesShape(request.model or "", request)
        events = [*shape.openings(0), *shape.closings(NOTHING_GENERATED)]
        for event in events:
            if turn.continues_held:
                event["response"]["previous_response_id"] = turn.previous_response_id
            self.send(event, turn.stream_id)
        self.finished(turn, events[-1]["response"])

    def run(self, turn: Turn) -> Turn | None:
        """Stream one turn's events; the successor turn a steering asks for, if any."""
        answer = self.run_turn(json_bytes(turn.body))
        try:
            if answer.status != 200:
                self.send(error_event(answer.status, _json(b"".join(answer.chunks()))), turn.stream_id)
                return None
            return _Streaming(self, answer, turn).stream()
        finally:
            answer.close()

    def finished(self, turn: Turn, response: dict) -> None:
        """Hold what a response that did not fail answered, for a later previous_response_id."""
        if response.get("status") == "failed" or (turn.previous_response_id is not None and not turn.continues_held):
            return  # failed; or it continued a stored response: the store has its chain, the socket does not
        output = [stored_item(item) for item in response.get("output", ())]
        previous = turn.previous_response_id if turn.continues_held else None
        self.held.hold(response["id"], previous, turn.own_input + output)

    def successor(self, turn: Turn, response_id: str, queued: list[dict]) -> Turn | None:
        """The turn after `response_id` with the steering input `queued`: its settings, that chain."""
        chain = self.held.chain(response_id)
        if chain is None:
            return None
        body = {**turn.body, "input": chain + queued}
        body.pop("previous_response_id", None)
        return Turn(body, True, response_id, turn.stream_id, queued)

    def send(self, event: dict | bytes, stream_id: str | None = None) -> None:
        if stream_id is not None:
            event = (orjson.loads(event) if isinstance(event, bytes) else event) | {"stream_id": stream_id}
        self.socket.send(event if isinstance(event, bytes) else json_bytes(event))


class _Streaming:
    """One turn streaming: its events sent on as they come, the client's events read between them.

    A response.steer for it is accepted at once and applied at the next event, unless the response has
    begun a function call: the generation is stopped, the response ends `incomplete` with reason
    `steered`, and the successor (the queued input after it, the same settings) is the next turn. A
    response that ends waiting for its calls' output keeps the input queued (`response.steer.pending`)
    for the client's next response.create continuing it; one that completed first is followed by the
    successor all the same."""

    def __init__(self, session: Session, answer: TurnAnswer, turn: Turn):
        self.session, self.answer, self.turn = session, answer, turn
        self.response: dict | None = None  # as its latest response event said
        self.queued: list[tuple[str, list[dict], dict]] = []  # (steer id, its items, the event as sent)
        self.stopped = False
        self.calls = 0  # function calls begun

    def stream(self) -> Turn | None:
        ended = False
        for name, data in turn_events(self.answer.chunks()):
            if name in RESPONSE_EVENTS:
                data = self._response_event(name, data)
                ended = name in TERMINAL
            elif name == "response.output_item.added" and b'"type":"function_call"' in data:
                self.calls += 1
            self.session.send(data, self.turn.stream_id)
            if ended:  # what the client sends once it has the last event is the next turn's (the socket's
                continue  # reader may have it already, under a threaded worker): not a create while in flight
            self._read_client()
            if self.queued and not self.stopped and self.calls == 0:
                self.stopped = self.answer.stop("steered")  # the shape ends it incomplete, reason steered
        return self._after() if self.queued else None

    def _response_event(self, name: str, data: bytes) -> bytes:
        """A response event (its response read: its id, at the end its output), as it is sent on."""
        event = orjson.loads(data)
        response = self.response = event["response"]
        if name in TERMINAL:
            self.session.finished(self.turn, response)
        if not self.turn.continues_held:
            return data
        response["previous_response_id"] = self.turn.previous_response_id  # sent self-contained: as the client named it
        return json_bytes(event)

    def _read_client(self) -> None:
        while (message := self.session.socket.receive(0)) is not None:
            try:
                event = client_event(message)
                if event["type"] == "response.steer":
                    self._steer(event)
                elif event["type"] == "response.create":
                    raise InvalidRequest(
                        "a response is in flight on this socket: send response.create once it has ended",
                        code="response_in_progress",
                    )
                else:
                    raise InvalidRequest(f"unknown event type {event['type']!r}", param="type", code="unknown_event_type")
            except ProxyError as exc:
                self.session.send(error_event(exc.status, exc.to_dict()))

    def _steer(self, event: dict) -> None:
        target = event.get("previous_response_id")
        if self.response is None or target != self.response["id"]:
            self.session.send(steer_failed(event, "response_not_found", "that response is not in flight on this socket"))
            return
        if self.turn.body.get("conversation") is not None:  # its successor would repeat the conversation's turn
            self.session.send(steer_failed(event, "steering_not_supported", "a response of a conversation cannot be steered"))
            return
        try:
            items = steering_items(event.get("input"))
        except InvalidRequest as exc:
            self.session.send(steer_failed(event, "invalid_input", exc.message))
            return
        steer_id = "steer_" + secrets.token_hex(12)
        self.queued.append((steer_id, items, event))
        accepted = {"type": "response.steer.accepted", "steer": {"id": steer_id, "previous_response_id": target}}
        self.session.send(_numbered(accepted), self.turn.stream_id)

    def _after(self) -> Turn | None:
        """What the queued steering input becomes once the response ended: its successor, or pending."""
        response = self.response or {}
        items = [item for _, queued, _ in self.queued for item in queued]
        calls = [item for item in response.get("output", ()) if item.get("type") == "function_call"]
        if calls and not self.stopped and response.get("status") == "completed":
            return self._pending(response["id"], calls, items)
        failed = response.get("status") == "failed"
        successor = None if failed else self.session.successor(self.turn, response.get("id", ""), items)
        if successor is not None and self.stopped:
            time.sleep(self.session.limits.steer_settle_seconds)
        if successor is None:
            for steer_id, _, event in self.queued:
                failed = steer_failed(event, "successor_creation_failed", "the steered response cannot be continued", steer_id)
                self.session.send(failed, self.turn.stream_id)
        return successor

    def _pending(self, response_id: str, calls: list[dict], items: list[dict]) -> None:
        required = [{"type": "function_call_output", "call_id": call["call_id"], "name": call["name"]} for call in calls]
        for steer_id, _, _ in self.queued:
            pending = {
                "type": "response.steer.pending",
                "reason": "waiting_for_required_input",
                "required_input": required,
                "steer": {"id": steer_id, "previous_response_id": response_id},
            }
            self.session.send(_numbered(pending), self.turn.stream_id)
        self.session.pending[response_id] = items


def client_event(message: str | bytes) -> dict:
    """A client's message as an event object with a string `type` (InvalidRequest otherwise)."""
    try:
        event = orjson.loads(message)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the message is not JSON", code="invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise InvalidRequest("an event is a JSON object with a string type", param="type", code="invalid_event")
    return event


def _as_items(value, param: str) -> list[dict]:
    """A request's input as items (a string is one user message), each with an id, as the store keeps them."""
    if isinstance(value, str):
        return [stored_item({"type": "message", "role": "user", "content": value})]
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return [stored_item(item) for item in value]
    raise InvalidRequest("input is a string or a list of items", param=param)


def steering_items(value) -> list[dict]:
    """A steer's input: a string, or user messages (InvalidRequest otherwise, as upstream)."""
    if isinstance(value, list) and value and all(_user_message(item) for item in value):
        return _as_items(value, "input")
    if isinstance(value, str) and value:
        return _as_items(value, "input")
    raise InvalidRequest("steering input is a string or a non-empty list of user messages", param="input")


def _user_message(item) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message"


def steer_failed(event: dict, code: str, message: str, steer_id: str | None = None) -> dict:
    steer = {"input": event.get("input"), "previous_response_id": event.get("previous_response_id") or ""}
    if steer_id is not None:
        steer["id"] = steer_id
    failed = {"type": "response.steer.failed", "error": {"type": "invalid_request_error", "code": code, "message": message}}
    return _numbered(failed | {"steer": steer})


def _numbered(event: dict) -> dict:
    return event | {"sequence_number": 0}


def error_event(status: int, body: dict) -> dict:
    """The `error` event of a refused event or turn: its HTTP status and its error object."""
    error = body.get("error") if isinstance(body.get("error"), dict) else {"message": str(body), "type": "server_error"}
    return {"type": "error", "status": status, "error": error}


def _json(raw: bytes) -> dict:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"error": {"message": raw.decode(errors="replace"), "type": "server_error"}}


def turn_events(chunks: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
    """(event name, data) of each event of a turn's answer: a chunk that is JSON is one event as it is
    (the route asks for bare events: inflight.BARE_EVENTS), anything else is an SSE stream (a fleet's
    front relays its box's), cut by sse_events."""
    sse: list[bytes] = []
    for chunk in chunks:
        if chunk[:9] == b'{"type":"' and not sse:  # the shape writes every event's type first
            yield chunk[9 : chunk.index(b'"', 9)].decode(), chunk
        elif chunk[:1] == b"{" and not sse:
            yield str(orjson.loads(chunk).get("type", "")), chunk
        elif chunk:
            sse.append(chunk)
            if chunk.endswith(b"\n\n"):  # whole frames so far (a keep-alive comment, a relayed event)
                yield from sse_events(iter(sse))
                sse.clear()


def sse_events(chunks: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
    """(event name, data) of each event in an SSE byte stream; comments (keep-alives) are left out."""
    pending = b""
    for chunk in chunks:
        if not pending and chunk.startswith(b"event: ") and chunk.find(b"\n\n") == len(chunk) - 2:
            name_end = chunk.find(b"\n")  # a chunk that is one named event, as the Responses stream's are
            if chunk.startswith(b"\ndata: ", name_end):
                yield chunk[7:name_end].decode(), chunk[name_end + 7 : -2]
                continue
        pending += chunk
        while True:
            end = pending.find(b"\n\n")
            if end < 0:
                break
            frame, pending = pending[:end], pending[end + 2 :]
            name, data = "", b""
            for line in frame.split(b"\n"):
                if line.startswith(b"event: "):
                    name = line[7:].decode()
                elif line.startswith(b"data: "):
                    data = line[6:]
            if data:
                yield name or orjson.loads(data).get("type", ""), data
