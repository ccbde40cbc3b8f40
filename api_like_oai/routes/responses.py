"""OpenAI's Responses API: POST /v1/responses, /v1/responses/input_tokens and /v1/responses/compact,
its WebSocket mode (GET /v1/responses upgraded: routes/responses_socket.py), and the stored responses
(GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from . import admission, generation_context, parse_dialect, respond, state
from .scope import admitted_scope, caller_scope, list_query

# The dialect and its service are imported by the first request that needs them, not at start-up: a
# worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("responses", __name__)


def _service():
    from ..services import responses

    return responses


@bp.post("/v1/responses")
def create():
    from ..dialects.responses import ResponsesRequest

    request = parse_dialect(ResponsesRequest)
    app_state = state()
    return respond(
        *_service().create(request, admission(), caller_scope(), app_state.seal, generation_context(), app_state.settings.mcp)
    )


@bp.get("/v1/responses")
@bp.get("/responses")
@bp.get("/v1/responses", websocket=True)  # Werkzeug matches an Upgrade: websocket request only to these
@bp.get("/responses", websocket=True)
def socket():
    """The WebSocket mode: the handshake upgraded, then the socket served until it ends."""
    from .responses_socket import upgrade

    return upgrade()


@bp.post("/v1/responses/input_tokens")
def input_tokens():
    from ..dialects.responses import ResponsesRequest

    request = parse_dialect(ResponsesRequest)
    return jsonify(_service().input_tokens(request, admission(), caller_scope(), state().seal, g.get("record")))


@bp.post("/v1/responses/compact")
def compact():
    from ..dialects.responses import CompactRequest
    from ..services import compaction

    request = parse_dialect(CompactRequest)
    return respond(compaction.compact(request, admission(), caller_scope(), state().seal, generation_context()))


@bp.get("/v1/responses/<response_id>")
def retrieve(response_id: str):
    return jsonify(_service().retrieve(admitted_scope(), response_id))


@bp.delete("/v1/responses/<response_id>")
def delete(response_id: str):
    return jsonify(_service().delete(admitted_scope(), response_id))


@bp.get("/v1/responses/<response_id>/input_items")
def input_items(response_id: str):
    query = list_query()
    return jsonify(_service().list_input_items(admitted_scope(), response_id, query.after, query.limit, query.order))
