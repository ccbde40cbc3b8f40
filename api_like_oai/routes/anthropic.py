"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted).
Errors on these paths are written in Anthropic's shape (app.py asks `speaks_anthropic`)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..dialects.anthropic import CountTokensRequest, MessagesRequest, to_chat_request
from ..dialects.anthropic_shape import MessagesShape
from ..services.chat import count_prompt_tokens, dialect_answer
from . import generation_context, parse_dialect, respond

bp = Blueprint("anthropic", __name__)

PATH_PREFIX = "/v1/messages"


def speaks_anthropic(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


@bp.post("/v1/messages")
def create():
    dialect = parse_dialect(MessagesRequest, to_chat_request)
    shape = MessagesShape(dialect.model_name, dialect.request.stop_sequences)
    return respond(*dialect_answer(shape, dialect.chat, dialect.model, generation_context()))


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    dialect = parse_dialect(CountTokensRequest, to_chat_request)
    return jsonify({"input_tokens": count_prompt_tokens(dialect.chat, dialect.model)})
