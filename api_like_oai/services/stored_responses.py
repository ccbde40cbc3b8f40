"""Stored responses, as OpenAI's Responses API keeps them: `store` (default true) keeps a response
with its input items; `previous_response_id` continues one; `conversation` continues a conversation
and adds the turn to it; GET, DELETE and the input item list read them back.

A response is stored as an object (store.base) whose document is the response JSON as answered and
whose items are its whole input: the earlier turns' items and output, then its own input, as
OpenAI's input_items lists them. Continuing it is one read, and deleting or losing an earlier
response never breaks a later one. A plain answer is written once, before it is returned; a stream
twice: "in_progress" before generating (a failing store is a 503 before the stream starts), then as
answered before the last event goes out (or, dropped by the client, "incomplete" with what was
generated).

A `Turn` is loaded whole (`Turn.load`: every read, then the items it is made of) before anything is
generated, and never changes; its writes go through one `TurnWriter`, which the Responses shape hands
its answer to (the shape's Keeper) and which alone tracks what was kept.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from ..dialects.responses import InputItem, ResponsesRequest
from ..dialects.responses_shape import ResponsesShape
from ..dialects.responses_translation import Translation, translate
from ..errors import InvalidRequest, ProxyError
from ..observability import stage
from ..sealing import Seal
from .scope import Scope, conversation_not_found, refusals, response_not_found
from .stored_items import input_items, stored_item

log = logging.getLogger("api_like_oai")
INPUT_ITEMS = TypeAdapter(list[InputItem])


def conversation_id(request: ResponsesRequest) -> str | None:
    conversation = request.conversation
    return conversation if isinstance(conversation, str) or conversation is None else conversation.id


@dataclass(frozen=True)
class Turn:
    """One /v1/responses request and what it continues, read from the store at once (`load`)."""

    scope: Scope
    request: ResponsesRequest
    seal: Seal | None = None  # opens the thoughts handed out as encrypted_content
    record: object | None = None  # the request's RequestRecord: store reads and writes are traced
    conversation: str | None = None
    history: list[dict] = field(default_factory=list)  # the stored items this turn continues
    input: list[dict] = field(default_factory=list)  # its own input, as stored items (a stateful turn's)
    made: list[dict] = field(default_factory=list)  # output items made before the model is asked (MCP's)

    @classmethod
    def load(
        cls,
        request: ResponsesRequest,
        scope: Scope,
        seal: Seal | None = None,
        record=None,
        prelude: Callable[[list[dict]], list[dict]] | None = None,
    ) -> Turn:
        """The turn: the earlier turns' items, the request's own input, then the items `prelude` makes of
        that conversation before the model is asked (the MCP tools' listings and approved calls: the
        answer's first output items)."""
        conversation = conversation_id(request)
        with stage(record, "store"):
            history = _history(scope, request, conversation)
        turn = cls(scope, request, seal, record, conversation, history)
        if not turn.stateful and prelude is None:
            return turn
        if turn.stores or conversation is not None:  # it will write: within the key's storage quota
            scope.check_room()
        own_input = input_items(request.input)
        made = prelude(history + own_input) if prelude is not None else []
        return dataclasses.replace(turn, input=own_input, made=made)

    def translation(self) -> Translation:
        """The chat request: the earlier turns' items, the request's own input (whose items come from
        len(self.history) on, for what Translation.headers names), then the items made before."""
        if not self.history and not self.made:
            return translate(self.request, self.seal)
        items = self.history + self.input + [stored_item(item) for item in self.made]
        return translate(self.request.model_copy(update={"input": INPUT_ITEMS.validate_python(items)}), self.seal)

    @property
    def stores(self) -> bool:
        return self.request.store is not False and self.scope.store is not None

    @property
    def stateful(self) -> bool:
        return self.stores or self.request.previous_response_id is not None or self.conversation is not None

    def shape(
        self, model_name: str, sampling: Callable[[], dict[str, float]] | None = None
    ) -> tuple[ResponsesShape, TurnWriter | None]:
        """The answer's shape, and the writer a stateful turn's answer goes to (its Keeper)."""
        writer = TurnWriter(self) if self.stateful else None
        return ResponsesShape(model_name, self.request, self.seal, sampling, writer), writer


def _history(scope: Scope, request: ResponsesRequest, conversation: str | None) -> list[dict]:
    previous = request.previous_response_id
    if previous is not None and conversation is not None:
        raise InvalidRequest(
            "previous_response_id and conversation cannot both be given", param="conversation", code="conflicting_fields"
        )
    if previous is not None:
        store = scope.need("previous_response_id")
        response = store.get(previous, scope.owner)
        page = store.page(previous, scope.owner) if response is not None else None
        if page is None:
            raise response_not_found(previous, "previous_response_id")
        return page.items + [stored_item(item) for item in response["output"]]
    if conversation is not None:
        page = scope.need("conversation").page(conversation, scope.owner)
        if page is None:
            raise conversation_not_found(conversation, "conversation")
        return page.items
    return []


class TurnWriter:
    """Every write of one stored or continued turn: in_progress before a stream, the answer as answered
    (and the turn added to its conversation), a failure, a dropped stream's incomplete answer, or the
    in_progress copy removed when nothing started. What was kept is known here alone."""

    def __init__(self, turn: Turn):
        self.turn = turn
        self.response_id: str | None = None  # once stored as in_progress
        self.kept = False
        fields = {"previous_response_id": turn.request.previous_response_id, "store": turn.stores}
        self.fields = fields | ({"conversation": {"id": turn.conversation}} if turn.conversation else {})

    def begin(self, in_progress: dict) -> None:
        """Keep a stored stream's response as in_progress (the shape's, or a box's response.created one at
        a fleet front) with its input items, before generating (a failing store is a 503 before the
        stream starts)."""
        turn = self.turn
        if not turn.request.stream or not turn.stores:
            return
        with refusals(self._history_param()), stage(turn.record, "store"):
            turn.scope.store.put(in_progress["id"], turn.scope.owner, in_progress, turn.history + turn.input)
        self.response_id = in_progress["id"]

    def keep(self, response: dict) -> None:
        """Keep the response as answered, and add the turn to its conversation."""
        with stage(self.turn.record, "store"):
            self._keep(response)
        self.kept = True

    def _keep(self, response: dict) -> None:
        turn, scope = self.turn, self.turn.scope
        if turn.conversation is not None:
            added = turn.input + [stored_item(item) for item in response["output"]]
            with refusals("conversation"):
                if not scope.store.append(turn.conversation, scope.owner, added):
                    raise conversation_not_found(turn.conversation, "conversation")
        if not turn.stores:
            return
        with refusals(self._history_param()):
            if self.response_id is None:  # not streamed: one write
                scope.store.put(response["id"], scope.owner, response, turn.history + turn.input)
            else:
                scope.store.update(self.response_id, scope.owner, response)

    def _history_param(self) -> str:
        if self.turn.request.previous_response_id is not None:
            return "previous_response_id"
        return "conversation" if self.turn.conversation is not None else "input"

    def keep_failure(self, response: dict) -> None:
        """Best effort, for a generation that failed after it started: the failed response is kept."""
        if self.kept:
            return
        self.kept = True
        if self.response_id is not None:
            scope = self.turn.scope
            _best_effort(lambda: scope.store.update(self.response_id, scope.owner, response))

    def abandoned(self, so_far: Callable[[dict], dict]) -> None:
        """The client went away mid-stream: keep what was generated, as incomplete (`so_far(usage)`, the
        shape's so_far or a fleet front's of the events relayed)."""
        if self.kept:
            return
        usage = getattr(self.turn.record, "usage", None)
        response = so_far(usage.to_dict() if usage is not None else _NO_USAGE)
        _best_effort(lambda: self.keep(response))

    def discard(self) -> None:
        """The request failed before it started: its in_progress response goes."""
        if self.response_id is not None:
            scope = self.turn.scope
            _best_effort(lambda: scope.store.delete(self.response_id, scope.owner))


_NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": 0}}


def _best_effort(write: Callable[[], object]) -> None:
    try:
        write()
    except ProxyError as exc:
        log.warning("could not update a stored response: %s", exc.message)


def kept(answer, shape: ResponsesShape, writer: TurnWriter | None):
    """The answer (dialect_answer's), a stored stream wrapped so that, dropped by the client, what was
    generated is kept as incomplete (a folded answer is kept by its writer, before it is returned)."""
    if isinstance(answer, dict) or writer is None:
        return answer
    return _kept_stream(answer, shape, writer)


def _kept_stream(frames: Iterator[bytes], shape: ResponsesShape, writer: TurnWriter) -> Iterator[bytes]:
    finished = False
    try:
        yield from frames
        finished = True
    finally:
        if not finished:
            writer.abandoned(shape.so_far)
