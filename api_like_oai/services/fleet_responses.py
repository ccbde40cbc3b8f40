"""The Responses API at a fleet front: its stored state read and written here, in the front's store (the
shared `--store redis://`), and a box sent only a self-contained request. No Flask: routes/fleet.py hands
over the parsed request, the body, the caller's scope and `send` (the relay of a body to a box of the
model, services/fleet_relay.py), and writes the Relayed answer as HTTP.

The front runs the turn of one proxy (stored_responses.Turn: the turns it continues read from the
store, the key's storage quota checked; its TurnWriter: a stream's in_progress copy, the answer, the
turn added to its conversation, a failure, a dropped stream's incomplete answer). Only the generation
differs: instead of a model of its own, the box gets the request made self-contained (`self_contained`:
the earlier turns' items before its own input, without previous_response_id and conversation, with
store false), and its answer, a JSON response or its event stream, is passed on with what the response
says of itself here (TurnWriter.fields: store, previous_response_id, conversation) and kept. So a box
keeps nothing of a front's turns (it needs no store), and any front continues any turn.

A stream is passed on frame by frame as the box writes it; only its lifecycle events (response.created,
.in_progress, .completed, .incomplete, .failed) are read and rewritten, and output_item.done read (what
a dropped stream keeps as incomplete). The in_progress copy is kept when the box's response.created
passes, before it reaches the client: when it is the box's first frame (no keep-alive before it) a
failing store is an HTTP 503, else a response.failed event, as a failing write at the end is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import orjson

from .. import sse
from ..compact_json import json_bytes
from ..dialects.responses import CompactRequest, ResponsesRequest
from ..errors import ProxyError, UpstreamError
from .fleet_relay import Relayed
from .scope import Scope
from .stored_items import input_items
from .stored_responses import Turn, TurnWriter

RESOLVED_HERE = ("previous_response_id", "conversation", "store")  # never sent to a box
ENDED = (b"event: response.completed\n", b"event: response.incomplete\n")
FAILED = b"event: response.failed\n"
CREATED = b"event: response.created\n"
REWRITTEN = (CREATED, b"event: response.in_progress\n", *ENDED, FAILED)  # the events that carry `response`
ITEM_DONE = b"event: response.output_item.done\n"
MARKERS = (*REWRITTEN, ITEM_DONE)

Send = Callable[[dict], Relayed]  # a body relayed to a box of the model: its answer


def self_contained(body: dict, turn: Turn, *, store_field: bool = True) -> dict:
    """The body a box is sent for `turn`: the turns it continues before its own input, and nothing that
    asks a store (previous_response_id, conversation; store false when the API has the field)."""
    sent = {key: value for key, value in body.items() if key not in RESOLVED_HERE}
    if turn.history:
        sent["input"] = turn.history + (turn.input or input_items(turn.request.input))
    if store_field:
        sent["store"] = False
    return sent


def create(request: ResponsesRequest, body: dict, scope: Scope, seal, record, send: Send) -> Relayed:
    """POST /v1/responses for a model of the fleet: the turn loaded here, the box's answer kept here."""
    turn = Turn.load(request, scope, seal, record)
    relayed = send(self_contained(body, turn))
    if not turn.stateful or relayed.status != 200:
        return relayed  # a box's error is the client's, as it is; nothing was kept
    writer = TurnWriter(turn)
    try:
        if isinstance(relayed.body, bytes):
            return dataclasses.replace(relayed, body=_kept_answer(relayed.body, writer))
        return dataclasses.replace(relayed, body=_first_frame_kept(relayed.body, _Relaying(writer)))
    except BaseException:
        relayed.close()
        raise


def input_tokens(request: ResponsesRequest, body: dict, scope: Scope, seal, record, send: Send) -> Relayed:
    """POST /v1/responses/input_tokens: counted by a box, over the turns it continues read here."""
    return send(self_contained(body, Turn.load(request, scope, seal, record)))


def compact(request: CompactRequest, body: dict, scope: Scope, seal, record, send: Send) -> Relayed:
    """POST /v1/responses/compact: compacted by a box, over the turns it continues read here."""
    conversation = ResponsesRequest.model_construct(
        model=request.model,
        input=request.input if request.input is not None else [],
        previous_response_id=request.previous_response_id,
        store=False,
    )
    return send(self_contained(body, Turn.load(conversation, scope, seal, record), store_field=False))


def _kept_answer(raw: bytes, writer: TurnWriter) -> bytes:
    try:
        response = orjson.loads(raw)
    except orjson.JSONDecodeError:
        response = None
    if not isinstance(response, dict) or not isinstance(response.get("id"), str):
        raise UpstreamError("a box answered a response without one: not the Responses API's answer")
    response |= writer.fields
    writer.keep(response)  # a failing store is the client's error, as on one proxy
    return json_bytes(response) + b"\n"


def _first_frame_kept(pieces: Iterator[bytes], relaying: _Relaying) -> Iterator[bytes]:
    """The stream, its first piece read now: a response.created there is kept before the answer starts
    (a failing store raises here, an HTTP error); any later one as it passes (relaying.stream)."""
    pieces = iter(pieces)
    first = next(pieces, b"")
    head = relaying.rewritten(first) if first.startswith(CREATED) and first.endswith(b"\n\n") else None
    if head is None:
        return relaying.stream(_chain(first, pieces))
    return relaying.stream(pieces, head)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


class _Relaying:
    """One relayed stream's lifecycle: its events made the stored response's, each end kept by the writer."""

    def __init__(self, writer: TurnWriter):
        self.writer = writer
        self.response: dict | None = None  # the last response an event carried, as rewritten
        self.done_items: list[dict] = []  # output items finished so far
        self.ended = False  # a completed, incomplete or failed event passed
        self.refused = False  # the store refused the in_progress copy: the stream ends there
        self.refusals_raise = True  # until the answer starts: a store's refusal is then an HTTP error

    def stream(self, pieces: Iterator[bytes], head: bytes = b"") -> Iterator[bytes]:
        """`head` (frames rewritten already), then the pieces' whole frames, rewritten where they carry
        the response; the writer told of a dropped client or a box gone before the end."""
        finished, self.refusals_raise = False, False
        try:
            if head:
                yield head
            for frames in _whole_frames(pieces):
                yield self.rewritten(frames)
                if self.refused:
                    break
            finished = True
        finally:
            if not finished:
                self.writer.abandoned(self._so_far)
            elif not self.ended:  # the box went away before its answer ended (its error event passed)
                self.writer.keep_failure(self._failure("the box serving the request went away"))
            getattr(pieces, "close", lambda: None)()  # the relay's own ending (its usage counted, its record closed)

    def rewritten(self, frames: bytes) -> bytes:
        """Whole frames as the client gets them; those carrying the response rewritten (and kept)."""
        if not any(marker in frames for marker in MARKERS):
            return frames
        return b"".join(self._frame(frame + b"\n\n") for frame in frames.split(b"\n\n") if frame)

    def _frame(self, frame: bytes) -> bytes:
        if frame.startswith(ITEM_DONE):
            self.done_items.append(_data(frame)["item"])
            return frame
        if not frame.startswith(REWRITTEN):
            return frame
        event = _data(frame)
        event["response"] = self.response = event["response"] | self.writer.fields
        if frame.startswith(CREATED):
            try:
                self.writer.begin(self.response)
            except ProxyError as exc:
                if self.refusals_raise:  # the stream's first frame: the answer has not started
                    raise
                self.refused = True  # the in_progress copy refused mid-stream: the stream ends failed
                return self._failed_frame(exc, event.get("sequence_number"))
        elif frame.startswith(ENDED):
            self.ended = True
            try:
                self.writer.keep(self.response)
            except ProxyError as exc:  # as on one proxy: the stream ends failed instead
                return self._failed_frame(exc, event.get("sequence_number"))
        elif frame.startswith(FAILED):
            self.ended = True
            self.writer.keep_failure(self.response)
        return sse.named_frame(event["type"], event)

    def _failure(self, message: str) -> dict:
        return (self.response or {}) | {"status": "failed", "output": [], "error": {"code": "server_error", "message": message}}

    def _failed_frame(self, exc: ProxyError, sequence_number: int | None = None) -> bytes:
        self.ended = True
        response = self._failure(exc.message)
        self.writer.keep_failure(response)
        event = {"type": "response.failed", "sequence_number": sequence_number, "response": response}
        return sse.named_frame("response.failed", event)

    def _so_far(self, usage: dict) -> dict:
        """What the client got before it went away, as incomplete."""
        output = [item | {"status": "incomplete"} for item in self.done_items]
        return (self.response or {}) | {"status": "incomplete", "completed_at": None, "output": output, "usage": usage}


def _whole_frames(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The pieces cut at frame ends (a box writes one frame per piece; this holds if it does not)."""
    pending = b""
    for piece in pieces:
        if pending:
            piece, pending = pending + piece, b""
        end = piece.rfind(b"\n\n") + 2
        if end == 1:
            pending = piece
            continue
        if end < len(piece):
            piece, pending = piece[:end], piece[end:]
        yield piece
    if pending:
        yield pending


def _data(frame: bytes) -> dict:
    return orjson.loads(frame.split(b"\ndata: ", 1)[1])
