"""Admission: what a validated request must pass before it is generated: the configured limits, a
model that can serve it, its max_tokens decided (fitting.effective_max_tokens), its key's limits.
Another API's request comes translated into the chat request by its service (messages.py,
responses.py). No Flask: routes/ hands in the app's limits, its registry and the request's access
record."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from ..access.gate import Ticket
from ..access.priority import asked
from ..errors import InvalidRequest
from ..observability import RequestRecord
from ..protocol import ChatCompletionRequest
from ..settings import Limits
from .audio_parts import audio_seconds
from .completions import prompts_of
from .fitting import effective_max_tokens, schema_fields, with_max_tokens
from .models import ModelRegistry, ServedModel


@dataclass
class DialectRequest:
    """A request of another API than OpenAI's chat, ready to generate: its own validated request,
    the chat request it becomes, and the model that serves it (with the name to answer with)."""

    request: BaseModel
    chat: ChatCompletionRequest
    model: ServedModel
    model_name: str


@dataclass(frozen=True)
class Admission:
    """The checks for one request: the app's limits and models, the request's access record, and its
    caller's ticket (None when the proxy asks for no key): the key's models and limits."""

    limits: Limits
    registry: ModelRegistry
    record: RequestRecord | None = None
    ticket: Ticket | None = None
    # Keeps a model the proxy starts loaded for the request: hold(model, later) waits for its load, or
    # with `later` leaves the wait to the service's waiting step (services/waiting.py).
    hold: Callable[[ServedModel, bool], None] | None = None
    # On a box, a front's tenant's grants of named MCP servers, sent with its fleet call (a box has no keys
    # of its own to read them from); None: the ticket's caller's (mcp_loop.grants_of).
    fleet_grants: tuple[str, ...] | None = None

    @property
    def caller(self):
        """Who asked (access.keys.Caller), None when the proxy asks for no key."""
        return self.ticket.caller if self.ticket is not None else None

    def dialect(
        self, api_request: BaseModel, chat_request: ChatCompletionRequest, *, waits_later: bool = False
    ) -> DialectRequest:
        """`api_request` and the chat request it was translated into, admitted (`admit`) with its
        max_tokens an upper bound (lowered to --max-tokens-limit, not refused): a llama.cpp model, or an
        OpenAI-compatible upstream the chat request is sent to (services/chat.start_chat)."""
        self.ask_priority(api_request)
        chat_request, model, model_name = self.admit(chat_request, bound=True, waits_later=waits_later)
        return DialectRequest(api_request, chat_request, model, model_name)

    def admit(self, api_request, *, bound: bool = False, waits_later: bool = False) -> tuple[BaseModel, ServedModel, str]:
        """(request, model, name to answer with) for a request that generates: checked against the
        limits (400), its model looked up (404), its max_tokens decided (fitting.effective_max_tokens:
        `bound` as there) and written into the request, then counted against its key's limits with
        them (429). `waits_later`: the caller runs the waiting step (services/waiting.py), so a streamed
        request's model load is left pending for it rather than waited for here."""
        self.check_limits(api_request)
        self.ask_priority(api_request)
        model, model_name = self._lookup(api_request.model)
        if model.reranks():
            raise capability_mismatch(model, model_name, "generate text")
        max_tokens = effective_max_tokens(api_request, model.settings, self.limits, bound=bound)
        # a chat's input_audio parts, read now so that its key counts their seconds (an upstream that renders prompts
        # reads them itself: what the proxy cannot read there is not its 400)
        chat = has_field(api_request, "messages")
        seconds = audio_seconds(api_request, strict=not model.upstream.capabilities.renders_prompts) if chat else 0.0
        later = waits_later and bool(field_of(api_request, "stream"))
        return with_max_tokens(api_request, max_tokens), *self._admitted(model, model_name, max_tokens, seconds, later)

    def ask_priority(self, api_request) -> None:
        """The priority the request's `service_tier` asks for (`flex` low, `priority` high), noted on its
        record for its door, where its key's priority caps it; a header's stays if it names no tier."""
        wanted = asked(field_of(api_request, "service_tier"))
        if wanted is not None and self.record is not None:
            self.record.priority = wanted

    def lookup_model(self, requested: str | None) -> tuple[ServedModel, str]:
        """(model, name to answer with) for a request that asks the model something other than to
        generate (tokens, embeddings, its prompt, llama.cpp's own API): looked up and admitted as
        `admit` does, with no tokens to find left."""
        return self._admitted(*self._lookup(requested), None)

    def find(self, requested: str | None) -> tuple[ServedModel, str]:
        """(model, name to answer with), not yet admitted: for a request that reads its audio's length
        (a 400 for a bad file) before it is counted against its key's limits with it (`admit_audio`)."""
        return self._lookup(requested)

    def admit_audio(self, model: ServedModel, model_name: str, seconds: float | None) -> None:
        """The request `find` looked up, admitted as `lookup_model` does, with the `seconds` of audio it sends."""
        self._admitted(model, model_name, None, seconds)

    def _lookup(self, requested: str | None) -> tuple[ServedModel, str]:
        """(model, name to answer with) for the request's `model`, noted on the access record: a 404 as
        for an unknown model if the caller's key may not use it."""
        allows = self.ticket.caller.allows if self.ticket is not None else None
        model, model_name = self.registry.lookup(requested, allows)
        if allows is not None and not allows(model.name, model_name):
            raise self.registry.not_found(model_name, allows)
        if self.record is not None:
            self.record.model, self.record.requested_model = model.name, requested
        return model, model_name

    def _admitted(
        self, model: ServedModel, model_name: str, max_tokens: int | None, audio: float | None = 0.0, later: bool = False
    ) -> tuple[ServedModel, str]:
        """The request counted against its key's limits (429 over one), `max_tokens` the tokens it must
        find left, `audio` the seconds of audio it sends (None: not known); a model the proxy starts
        held for it (its load waited for unless `later`). No upstream work happens before this."""
        if self.ticket is not None:
            self.ticket.admit(max_tokens, audio)
        if self.record is not None:  # a request refused above sent no audio: its usage counts none
            self.record.audio_seconds = audio or 0.0
        if model.settings.launch is not None and self.hold is not None:
            self.hold(model, later)
        return model, model_name

    def check_limits(self, api_request) -> None:
        """400 for requests over the configured limits (number of messages, n, prompts x n); max_tokens
        is effective_max_tokens'."""
        limits = self.limits
        messages = field_of(api_request, "messages")
        if messages is not None and len(messages) > limits.max_messages:
            raise InvalidRequest(f"too many messages: {len(messages)} (limit {limits.max_messages})", param="messages")
        if api_request.n is not None and api_request.n > limits.max_n:
            raise InvalidRequest(f"n is {api_request.n}; the limit is {limits.max_n}", param="n", code="over_limit")
        if has_field(api_request, "prompt"):  # each prompt of a list is generated n times
            choices = len(prompts_of(api_request)) * (api_request.n or 1)
            if choices > limits.max_n:
                raise InvalidRequest(
                    f"{choices} choices asked for (prompts x n); the limit is {limits.max_n}", param="prompt", code="over_limit"
                )


def capability_mismatch(model: ServedModel, model_name: str, what: str) -> InvalidRequest:
    """The 400 of a request the model cannot serve (a chat request to a reranker, a rerank to a chat
    model), naming what it can."""
    return InvalidRequest(
        f"model {model_name!r} cannot {what}: its capabilities are {', '.join(model.capabilities())}",
        param="model",
        code="model_not_supported",
    )


@contextlib.contextmanager
def client_request():
    """Around a translation into the chat request: what the chat schema refuses there (pydantic's
    ValidationError) is still the client's request, a 400 naming the field."""
    try:
        yield
    except ValidationError as exc:
        raise invalid_request(exc) from None


def invalid_request(exc: ValidationError) -> InvalidRequest:
    """A pydantic validation error as the client's 400, naming the field."""
    # Of a union's failed branches, the one that got furthest names the real problem
    # ("messages.1.content.0.id: field required", not "messages.1.content: not a string").
    error = max(exc.errors(include_url=False), key=lambda e: len(e["loc"]))
    if error["type"] == "json_invalid":
        return InvalidRequest("the request body is not valid JSON")
    if error["type"] == "model_type" and not error["loc"]:
        return InvalidRequest("the request body must be a JSON object")
    param = ".".join(str(part) for part in error["loc"] if not _is_union_branch(part))
    if error["type"] == "extra_forbidden":
        return InvalidRequest(f"unsupported field {param!r}: this proxy cannot honour it", param=param)
    if error["type"] == "missing":
        return InvalidRequest(f"missing required field {param!r}", param=param)
    return InvalidRequest(f"invalid value for {param!r}: {error['msg']}", param=param)


def _is_union_branch(part) -> bool:
    """pydantic names the union member it tried ("str", "list[int]", "function-after[...]") in locations."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "dict", "list", "none") or "[" in part)


def has_field(api_request: BaseModel, name: str) -> bool:
    """Whether the request's schema has the field `name`. Asked of the schema, not the object: pydantic
    answers a missing attribute by raising AttributeError, a few microseconds each on a request's way
    to its first token (issue 54)."""
    return name in schema_fields(api_request)


def field_of(api_request: BaseModel, name: str):
    """The request's field `name`, None when its schema has none (has_field)."""
    return getattr(api_request, name) if name in schema_fields(api_request) else None
