"""Thin Flask views: parse and validate, call a service, wrap its answer."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Response, current_app, g, jsonify, request
from pydantic import BaseModel, ValidationError

from ..errors import InvalidRequest
from ..protocol import ChatCompletionRequest
from ..services.completions import prompts_of
from ..services.generation import Context
from ..services.models import ServedModel

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def state():
    """The app's immutable settings and model registry (see app.create_app)."""
    return current_app.extensions["api_like_oai"]


def parse_body(model: type[BaseModel]):
    """The request body validated as `model`; InvalidRequest naming the first bad field."""
    try:
        return model.model_validate_json(request.get_data(cache=False) or b"")
    except ValidationError as exc:
        raise invalid_request(exc) from None


def invalid_request(exc: ValidationError) -> InvalidRequest:
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


def respond(answer, headers: dict | None = None) -> Response:
    """A service's answer as HTTP: a dict becomes JSON, an iterator of bytes an event stream."""
    if isinstance(answer, dict):
        response = jsonify(answer)
        response.headers.update(headers or {})
        return response
    # direct_passthrough: the server iterates our generator itself, without Werkzeug's two wrappers
    # (ClosingIterator, iter_encoded) around every frame; the frames are bytes already.
    return Response(answer, mimetype="text/event-stream", headers={**SSE_HEADERS, **(headers or {})},
                    direct_passthrough=True)


def lookup_model(requested: str | None):
    """(model, name to answer with) for the request's `model`, noted on the access record."""
    model, model_name = state().registry.lookup(requested)
    record = g.get("record")
    if record is not None:
        record.model = model.name
    return model, model_name


def generation_context() -> Context:
    settings = state().settings
    return Context(state().inflight, g.get("record"), settings.log_prompts,
                   session=request.headers.get("X-Claude-Code-Session-Id"))


@dataclass
class DialectRequest:
    """A request of another API than OpenAI's chat, ready to generate: its own validated request,
    the chat request it becomes, and the model that serves it (with the name to answer with)."""

    request: BaseModel
    chat: ChatCompletionRequest
    model: ServedModel
    model_name: str


def parse_dialect(request_model: type[BaseModel], translate, api: str) -> DialectRequest:
    """The body validated as `request_model`, translated into the chat request, checked against the
    limits (its max_tokens an upper bound, lowered to --max-tokens-limit), its model looked up."""
    api_request = parse_body(request_model)
    chat_request = bounded_by_limits(translated(translate, api_request))
    check_limits(chat_request)
    model, model_name = llama_model(api_request.model, api)
    return DialectRequest(api_request, chat_request, model, model_name)


def translated(translate, dialect_request):
    """`translate(dialect_request)`: the chat request another API's request becomes."""
    try:
        return translate(dialect_request)
    except ValidationError as exc:  # a translation the chat schema refuses: still the client's request
        raise invalid_request(exc) from None


def llama_model(requested: str | None, api: str):
    """lookup_model, for APIs that only llama.cpp upstreams serve (they are generated, not passed on)."""
    model, model_name = lookup_model(requested)
    if model.settings.kind == "openai":
        raise InvalidRequest(f"model {requested!r} is served by an OpenAI-compatible upstream, which this proxy "
                             f"passes chat requests to unchanged; {api} needs a llama.cpp upstream", param="model")
    return model, model_name


def bounded_by_limits(chat_request):
    """The request with `max_tokens` lowered to --max-tokens-limit: for APIs whose max_tokens is an
    upper bound (Anthropic's; agents ask for 32000 whatever the model), not a demand to refuse."""
    limit = state().settings.limits.max_tokens
    if limit is None or chat_request.max_tokens is None or chat_request.max_tokens <= limit:
        return chat_request
    return chat_request.model_copy(update={"max_tokens": limit})


def check_limits(api_request) -> None:
    """400 for requests over the configured limits (number of messages, n, max_tokens)."""
    limits = state().settings.limits
    messages = getattr(api_request, "messages", None)
    if messages is not None and len(messages) > limits.max_messages:
        raise InvalidRequest(f"too many messages: {len(messages)} (limit {limits.max_messages})", param="messages")
    if api_request.n is not None and api_request.n > limits.max_n:
        raise InvalidRequest(f"n is {api_request.n}; the limit is {limits.max_n}", param="n")
    if hasattr(api_request, "prompt"):  # each prompt of a list is generated n times
        choices = len(prompts_of(api_request)) * (api_request.n or 1)
        if choices > limits.max_n:
            raise InvalidRequest(f"{choices} choices asked for (prompts x n); the limit is {limits.max_n}",
                                 param="prompt")
    token_limit = api_request.token_limit()
    if limits.max_tokens is not None and token_limit is not None and token_limit > limits.max_tokens:
        raise InvalidRequest(f"max_tokens is {token_limit}; the limit is {limits.max_tokens}", param="max_tokens")
