"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted).
Errors on these paths are written in Anthropic's shape (app.py asks `speaks_anthropic`)."""

from __future__ import annotations

from flask import Blueprint, jsonify
from pydantic import ValidationError

from ..dialects.anthropic import CountTokensRequest, MessagesRequest, to_chat_request
from ..errors import InvalidRequest
from ..services.dialects import count_message_tokens, create_message
from . import bounded_by_limits, check_limits, generation_context, invalid_request, lookup_model, parse_body, respond

bp = Blueprint("anthropic", __name__)

PATH_PREFIX = "/v1/messages"


def speaks_anthropic(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


@bp.post("/v1/messages")
def create():
    messages_request = parse_body(MessagesRequest)
    chat_request = bounded_by_limits(translated(messages_request))
    check_limits(chat_request)
    model, model_name = llama_model(messages_request.model)
    return respond(*create_message(messages_request, chat_request, model, model_name, generation_context()))


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    count_request = parse_body(CountTokensRequest)
    chat_request = translated(count_request)
    check_limits(chat_request)
    model, _ = llama_model(count_request.model)
    return jsonify(count_message_tokens(chat_request, model))


def translated(request: CountTokensRequest):
    try:
        return to_chat_request(request)
    except ValidationError as exc:  # a translation the chat schema refuses: still the client's request
        raise invalid_request(exc) from None


def llama_model(requested: str):
    model, model_name = lookup_model(requested)
    if model.settings.kind == "openai":
        raise InvalidRequest(f"model {requested!r} is served by an OpenAI-compatible upstream, which this proxy "
                             "passes chat requests to unchanged; the Messages API needs a llama.cpp upstream",
                             param="model")
    return model, model_name
