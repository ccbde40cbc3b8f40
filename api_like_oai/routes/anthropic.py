"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted).
Errors on these paths are written in Anthropic's shape (app.py asks `speaks_anthropic`)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..dialects.anthropic import CountTokensRequest, MessagesRequest, to_chat_request
from ..dialects.anthropic_shape import MessagesShape
from ..services.dialects import count_prompt_tokens, dialect_answer
from . import bounded_by_limits, check_limits, generation_context, llama_model, parse_body, respond, translated

bp = Blueprint("anthropic", __name__)

PATH_PREFIX = "/v1/messages"


def speaks_anthropic(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


@bp.post("/v1/messages")
def create():
    messages_request = parse_body(MessagesRequest)
    chat_request = bounded_by_limits(translated(to_chat_request, messages_request))
    check_limits(chat_request)
    model, model_name = llama_model(messages_request.model, "the Messages API")
    shape = MessagesShape(model_name, messages_request.stop_sequences)
    return respond(*dialect_answer(shape, chat_request, model, generation_context()))


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    count_request = parse_body(CountTokensRequest)
    chat_request = translated(to_chat_request, count_request)
    check_limits(chat_request)
    model, _ = llama_model(count_request.model, "the Messages API")
    return jsonify({"input_tokens": count_prompt_tokens(chat_request, model)})
