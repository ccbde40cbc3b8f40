"""OpenAI's Responses API, stateless: POST /v1/responses and /v1/responses/input_tokens; a stored
response (GET or DELETE /v1/responses/{id}) is a 404, since none is kept."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..dialects.responses import ResponsesRequest, to_chat_request
from ..dialects.responses_shape import ResponsesShape
from ..errors import NotFound
from ..services.dialects import count_prompt_tokens, dialect_answer
from . import generation_context, parse_dialect, respond

bp = Blueprint("responses", __name__)


@bp.post("/v1/responses")
def create():
    dialect = parse_dialect(ResponsesRequest, to_chat_request)
    shape = ResponsesShape(dialect.model_name, dialect.request)
    return respond(*dialect_answer(shape, dialect.chat, dialect.model, generation_context()))


@bp.post("/v1/responses/input_tokens")
def input_tokens():
    dialect = parse_dialect(ResponsesRequest, to_chat_request)
    return jsonify({"object": "response.input_tokens", "input_tokens": count_prompt_tokens(dialect.chat, dialect.model)})


@bp.get("/v1/responses/<response_id>")
@bp.delete("/v1/responses/<response_id>")
def stored(response_id: str):
    raise NotFound(f"response {response_id!r} is not stored: this proxy keeps no responses (store is "
                   "always false); send the whole conversation in input instead of previous_response_id")
