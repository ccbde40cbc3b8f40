"""OpenAI's Responses API: POST /v1/responses and /v1/responses/input_tokens, and the stored
responses (GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from ..services.chat import count_prompt_tokens, dialect_answer
from . import generation_context, parse_dialect, respond, state
from .scope import caller_scope, list_query
from .waiting import keeps_alive_while_loading

# The dialect and the store's service are imported by the first request that needs them, not at
# start-up: a worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("responses", __name__)


@bp.post("/v1/responses")
@keeps_alive_while_loading("responses")
def create():
    from ..dialects.responses import ResponsesRequest
    from ..dialects.responses_tools import at_most
    from ..dialects.responses_translation import set_aside_headers
    from ..services import stored_responses
    from ..services.stored_responses import Turn

    seal = state().seal
    turn = Turn(caller_scope(), seal, g.get("record"))
    dialect = parse_dialect(ResponsesRequest, turn.translate)
    request = dialect.request
    # The sampling values are asked for by the first event, when the upstream's defaults are known (the
    # prompt's rendering asked /props) but for a stored stream's in_progress copy, which may ask first.
    shape = turn.shape(dialect.model_name, lambda: dialect.model.sampling_used(dialect.chat))
    limit = at_most(request.max_tool_calls) if request.max_tool_calls else None
    answer, headers = stored_responses.answer(
        turn, shape, lambda: dialect_answer(shape, dialect.chat, dialect.model, generation_context(), limit))
    return respond(answer, headers | set_aside_headers(request, seal))


@bp.post("/v1/responses/input_tokens")
def input_tokens():
    from ..dialects.responses import ResponsesRequest
    from ..services.stored_responses import Turn

    dialect = parse_dialect(ResponsesRequest, Turn(caller_scope(), state().seal).translate)
    return jsonify({"object": "response.input_tokens", "input_tokens": count_prompt_tokens(dialect.chat, dialect.model)})


@bp.get("/v1/responses/<response_id>")
def retrieve(response_id: str):
    from ..services import stored_responses

    return jsonify(stored_responses.retrieve(caller_scope(), response_id))


@bp.delete("/v1/responses/<response_id>")
def delete(response_id: str):
    from ..services import stored_responses

    return jsonify(stored_responses.delete(caller_scope(), response_id))


@bp.get("/v1/responses/<response_id>/input_items")
def input_items(response_id: str):
    from ..services import stored_responses

    query = list_query()
    return jsonify(stored_responses.list_input_items(caller_scope(), response_id, query.after, query.limit,
                                                     query.order))
