"""OpenAI's Responses API, stateless: POST /v1/responses and /v1/responses/input_tokens; a stored
response (GET or DELETE /v1/responses/{id}) is a 404, since none is kept."""

from __future__ import annotations

import functools

from flask import Blueprint, jsonify

from ..dialects.responses import ResponsesRequest, set_aside_headers, to_chat_request
from ..dialects.responses_shape import ResponsesShape
from ..dialects.responses_tools import at_most
from ..errors import NotFound
from ..services.chat import count_prompt_tokens, dialect_answer
from . import generation_context, parse_dialect, respond, state

bp = Blueprint("responses", __name__)


@bp.post("/v1/responses")
def create():
    seal = state().seal
    dialect = parse_dialect(ResponsesRequest, functools.partial(to_chat_request, seal=seal))
    request = dialect.request
    shape = ResponsesShape(dialect.model_name, request, seal)
    limit = at_most(request.max_tool_calls) if request.max_tool_calls else None
    answer, headers = dialect_answer(shape, dialect.chat, dialect.model, generation_context(), limit)
    return respond(answer, headers | set_aside_headers(request, seal))


@bp.post("/v1/responses/input_tokens")
def input_tokens():
    translate = functools.partial(to_chat_request, seal=state().seal)
    dialect = parse_dialect(ResponsesRequest, translate)
    return jsonify({"object": "response.input_tokens", "input_tokens": count_prompt_tokens(dialect.chat, dialect.model)})


@bp.get("/v1/responses/<response_id>")
@bp.delete("/v1/responses/<response_id>")
def stored(response_id: str):
    raise NotFound(f"response {response_id!r} is not stored: this proxy keeps no responses (store is "
                   "always false); send the whole conversation in input instead of previous_response_id")
