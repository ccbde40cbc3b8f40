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
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator

from pydantic import TypeAdapter

from ..dialects.responses import InputItem, ResponsesRequest
from ..dialects.responses_shape import ResponsesShape
from ..dialects.responses_translation import Translation, translate
from ..errors import InvalidRequest, ProxyError
from ..observability import stage
from ..sealing import Seal
from .generation import UsageCounter
from .scope import Scope, conversation_not_found, refusals, response_not_found
from .stored_items import input_items, stored_item

log = logging.getLogger("api_like_oai")
INPUT_ITEMS = TypeAdapter(list[InputItem])


def conversation_id(request: ResponsesRequest) -> str | None:
    conversation = request.conversation
    return conversation if isinstance(conversation, str) or conversation is None else conversation.id


class Turn:
    """One /v1/responses request and the store around it: what it continues, what it keeps."""

    def __init__(self, scope: Scope, seal: Seal | None = None, record=None):
        self.scope = scope
        self.record = record                 # the request's RequestRecord: store reads and writes are traced
        self.seal = seal                     # opens the thoughts handed out as encrypted_content
        self.request: ResponsesRequest | None = None
        self.history: list[dict] = []        # the stored items this turn continues
        self.input: list[dict] = []          # its own input, as stored items
        self.conversation: str | None = None
        self.response_id: str | None = None  # once stored as in_progress
        self.made: list[dict] = []           # output items made before the model is asked (MCP's)

    def translate(self, request: ResponsesRequest, prelude: Callable[[list[dict]], list[dict]] | None = None) -> Translation:
        """The chat request: the earlier turns' items, then the request's own input (whose items come
        from len(self.history) on, for what Translation.headers names), then the items `prelude` makes
        of that conversation before the model is asked (the MCP tools' listings and approved calls: the
        answer's first output items, kept in `self.made`)."""
        self.request, self.conversation = request, conversation_id(request)
        with stage(self.record, "store"):
            self.history = self._history(request)
        if not self.stateful and prelude is None:
            return translate(request, self.seal)
        if self.stores or self.conversation is not None:   # it will write: within the key's storage quota
            self.scope.check_room()
        self.input = input_items(request.input)
        self.made = prelude(self.history + self.input) if prelude is not None else []
        if not self.history and not self.made:
            return translate(request, self.seal)
        items = self.history + self.input + [stored_item(item) for item in self.made]
        return translate(request.model_copy(update={"input": INPUT_ITEMS.validate_python(items)}), self.seal)

    @property
    def stores(self) -> bool:
        return self.request.store is not False and self.scope.store is not None

    @property
    def stateful(self) -> bool:
        return self.stores or self.request.previous_response_id is not None or self.conversation is not None

    def _history(self, request: ResponsesRequest) -> list[dict]:
        previous = request.previous_response_id
        if previous is not None and self.conversation is not None:
            raise InvalidRequest("previous_response_id and conversation cannot both be given", param="conversation")
        if previous is not None:
            return self._response_history(previous)
        if self.conversation is not None:
            return self._conversation_history(self.conversation)
        return []

    def _response_history(self, response_id: str) -> list[dict]:
        store = self.scope.need("previous_response_id")
        response = store.get(response_id, self.scope.owner)
        page = store.page(response_id, self.scope.owner) if response is not None else None
        if page is None:
            raise response_not_found(response_id, "previous_response_id")
        return page.items + [stored_item(item) for item in response["output"]]

    def _conversation_history(self, conversation: str) -> list[dict]:
        page = self.scope.need("conversation").page(conversation, self.scope.owner)
        if page is None:
            raise conversation_not_found(conversation, "conversation")
        return page.items

    def shape(self, model_name: str, sampling: Callable[[], dict[str, float]] | None = None) -> ResponsesShape:
        """The answer's shape; `sampling`: see ResponsesShape."""
        if not self.stateful:
            return ResponsesShape(model_name, self.request, self.seal, sampling)
        return StoredResponsesShape(model_name, self.request, self, sampling)

    def response_fields(self) -> dict:
        """What a stored or continued response says of itself, over the stateless shape's answer."""
        fields = {"previous_response_id": self.request.previous_response_id, "store": self.stores}
        return fields | ({"conversation": {"id": self.conversation}} if self.conversation else {})

    # --- writes ----------------------------------------------------------------------------------

    def begin(self, shape: ResponsesShape) -> None:
        """Keep a stored stream's response as in_progress with its input items, before generating (a
        failing store is a 503 before the stream starts)."""
        if not isinstance(shape, StoredResponsesShape) or not self.request.stream or not self.stores:
            return
        in_progress = shape.in_progress()
        with refusals(self._history_param()), stage(self.record, "store"):
            self.scope.store.put(in_progress["id"], self.scope.owner, in_progress, self.history + self.input)
        self.response_id = in_progress["id"]

    def _history_param(self) -> str:
        if self.request.previous_response_id is not None:
            return "previous_response_id"
        return "conversation" if self.conversation is not None else "input"

    def end(self, response: dict) -> None:
        """Keep the response as answered, and add the turn to its conversation."""
        with stage(self.record, "store"):
            self._keep(response)

    def _keep(self, response: dict) -> None:
        if self.conversation is not None:
            added = self.input + [stored_item(item) for item in response["output"]]
            with refusals("conversation"):
                if not self.scope.store.append(self.conversation, self.scope.owner, added):
                    raise conversation_not_found(self.conversation, "conversation")
        if not self.stores:
            return
        with refusals(self._history_param()):
            if self.response_id is None:   # not streamed: one write
                self.scope.store.put(response["id"], self.scope.owner, response, self.history + self.input)
            else:
                self.scope.store.update(self.response_id, self.scope.owner, response)

    def keep_failure(self, response: dict) -> None:
        """Best effort, for a generation that failed after it started: the failed response is kept."""
        if self.response_id is not None:
            _best_effort(lambda: self.scope.store.update(self.response_id, self.scope.owner, response))

    def discard(self) -> None:
        """The request failed before it started: its in_progress response goes."""
        if self.response_id is not None:
            _best_effort(lambda: self.scope.store.delete(self.response_id, self.scope.owner))


def _best_effort(write: Callable[[], object]) -> None:
    try:
        write()
    except ProxyError as exc:
        log.warning("could not update a stored response: %s", exc.message)


class StoredResponsesShape(ResponsesShape):
    """ResponsesShape for a turn that is stored or continues one: the answer says so (`store`,
    `previous_response_id`, `conversation`), its id has 128 random bits, and the response is kept
    before its last event or returned answer; a stream the client drops is kept as incomplete."""

    def __init__(self, model: str, request: ResponsesRequest, turn: Turn,
                 sampling: Callable[[], dict[str, float]] | None = None):
        super().__init__(model, request, turn.seal, sampling)
        self.hex = secrets.token_hex(16)
        self.id = f"resp_{self.hex}"
        self.turn = turn
        self.usage = UsageCounter()   # for a stream that ends early: the counts so far
        self.kept = False

    def _response(self, status: str, output: list, usage: dict | None) -> dict:
        return super()._response(status, output, usage) | self.turn.response_fields()

    def in_progress(self) -> dict:
        return self._response("in_progress", [], None)

    def content_frame(self, event):
        self.usage.add(event)
        return super().content_frame(event)

    def closings(self, usage: dict) -> list[dict]:
        chunks = super().closings(usage)
        try:
            self._keep(chunks[-1]["response"])
        except ProxyError as exc:
            return [*chunks[:-1], self.error_chunk(exc)]
        return chunks

    def response(self, choices: list[dict], usage: dict) -> dict:
        answer = super().response(choices, usage)
        self._keep(answer)
        return answer

    def error_chunk(self, exc: ProxyError) -> dict:
        chunk = super().error_chunk(exc)
        if not self.kept:
            self.kept = True
            self.turn.keep_failure(chunk["response"])
        return chunk

    def abandoned(self) -> None:
        """The client went away mid-stream: keep what was generated, as incomplete."""
        if self.kept:
            return
        self.blocks.close()
        response = self._finished(self.blocks.blocks, None, self.usage.to_dict())
        response["status"], response["completed_at"] = "incomplete", None
        for item in response["output"]:
            item["status"] = "incomplete"
        _best_effort(lambda: self._keep(response))

    def _keep(self, response: dict) -> None:
        self.turn.end(response)
        self.kept = True


def kept(answer, shape: ResponsesShape):
    """The answer (dialect_answer's), a stored stream wrapped so that, dropped by the client, what was
    generated is kept as incomplete (a folded answer is kept by its shape, before it is returned)."""
    if isinstance(answer, dict) or not isinstance(shape, StoredResponsesShape):
        return answer
    return _kept_stream(answer, shape)


def _kept_stream(frames: Iterator[bytes], shape: StoredResponsesShape) -> Iterator[bytes]:
    finished = False
    try:
        yield from frames
        finished = True
    finally:
        if not finished:
            shape.abandoned()
