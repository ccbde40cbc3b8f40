"""OpenAI's Responses API: POST /v1/responses, /v1/responses/input_tokens and /v1/responses/compact,
its WebSocket mode (GET /v1/responses upgraded: routes/responses_socket.py), and the stored responses
(GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from . import admission, generation_context, parse_dialect, respond, state
from .declare import GENERATES, KEY, OWN, route
from .scope import admitted_scope, caller_scope, list_query

# The dialect and its service are imported by the first request that needs them, not at start-up: a
# worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("responses", __name__)


def _service():
    from ..services import responses

    return responses


@route(
    bp,
    "/v1/responses",
    "/responses",
    summary="OpenAI Responses API (set stream for its named events; store, previous_response_id and conversation "
    "keep and continue turns)",
    access=KEY,
    request="api_like_oai.dialects.responses:ResponsesRequest",
    answer="api_like_oai.dialects.responses_answers:ResponseObject",
    body="json",
    model_in="json",
    metered="tokens",
    stream="text/event-stream",
    refusals=(*GENERATES, "duplicate_item", "invalid_mcp_server_url", "block_not_allowed", "nothing_to_answer"),
)
def create():
    from ..dialects.responses import ResponsesRequest

    request = parse_dialect(ResponsesRequest)
    app_state = state()
    return respond(
        *_service().create(request, admission(), caller_scope(), app_state.seal, generation_context(), app_state.settings.mcp)
    )


@route(
    bp,
    "/v1/responses",
    "/responses",
    methods=("GET",),
    summary="The Responses API's WebSocket mode (an Upgrade: websocket handshake; response.create and "
    "response.steer events in, the stream's events out); without the upgrade, a 400; a managed key "
    "with as many sockets open as it may hold, a 429",
    access=OWN,
    success=101,
    statuses=(400, 429),
    media=(),
)
def socket():
    """The WebSocket mode: the handshake upgraded, then the socket served until it ends."""
    from .responses_socket import upgrade

    return upgrade()


for _path in ("/v1/responses", "/responses"):  # Werkzeug matches an Upgrade: websocket request only to these
    bp.add_url_rule(_path, endpoint="socket", view_func=socket, methods=["GET"], websocket=True)


@route(
    bp,
    "/v1/responses/input_tokens",
    summary="OpenAI Responses API: the prompt's token count",
    access=KEY,
    request="api_like_oai.dialects.responses:ResponsesRequest",
    answer="api_like_oai.dialects.responses_answers:InputTokenCount",
    body="json",
    model_in="json",
    metered="requests",
    refusals=(*GENERATES, "invalid_mcp_server_url", "block_not_allowed", "nothing_to_answer"),
)
def input_tokens():
    from ..dialects.responses import ResponsesRequest

    request = parse_dialect(ResponsesRequest)
    return jsonify(_service().input_tokens(request, admission(), caller_scope(), state().seal, g.get("record")))


@route(
    bp,
    "/v1/responses/compact",
    summary="Compact a conversation: its user messages, then one compaction item (the model's summary, sealed)",
    access=KEY,
    request="api_like_oai.dialects.responses:CompactRequest",
    answer="api_like_oai.dialects.responses_answers:CompactedResponse",
    body="json",
    model_in="json",
    metered="tokens",
    refusals=(*GENERATES, "invalid_mcp_server_url", "block_not_allowed", "nothing_to_answer"),
)
def compact():
    from ..dialects.responses import CompactRequest
    from ..services import compaction

    request = parse_dialect(CompactRequest)
    return respond(compaction.compact(request, admission(), caller_scope(), state().seal, generation_context()))


@route(
    bp,
    "/v1/responses/<response_id>",
    methods=("GET",),
    summary="A stored response, as it was answered",
    access=OWN,
    answer="api_like_oai.dialects.responses_answers:ResponseObject",
    metered="requests",
)
def retrieve(response_id: str):
    return jsonify(_service().retrieve(admitted_scope(), response_id))


@route(
    bp,
    "/v1/responses/<response_id>",
    methods=("DELETE",),
    summary="Delete a stored response",
    access=OWN,
    answer="api_like_oai.dialects.conversations:ResponseDeleted",
    metered="requests",
)
def delete(response_id: str):
    return jsonify(_service().delete(admitted_scope(), response_id))


@route(
    bp,
    "/v1/responses/<response_id>/input_items",
    methods=("GET",),
    summary="A stored response's input items (with the turns it continued)",
    access=OWN,
    answer="api_like_oai.dialects.conversations:ItemList",
    query="api_like_oai.dialects.conversations:ItemListQuery",
    metered="requests",
)
def input_items(response_id: str):
    query = list_query()
    return jsonify(_service().list_input_items(admitted_scope(), response_id, query.after, query.limit, query.order))


# --- at a fleet front ----------------------------------------------------------------------------


def _relayed_create(body: dict, send):
    from ..dialects.responses import ResponsesRequest
    from ..services import fleet_responses

    request = parse_dialect(ResponsesRequest)
    return fleet_responses.create(request, body, caller_scope(), state().seal, g.get("record"), send)


def _relayed_input_tokens(body: dict, send):
    from ..dialects.responses import ResponsesRequest
    from ..services import fleet_responses

    request = parse_dialect(ResponsesRequest)
    return fleet_responses.input_tokens(request, body, caller_scope(), state().seal, g.get("record"), send)


def _relayed_compact(body: dict, send):
    from ..dialects.responses import CompactRequest
    from ..services import fleet_responses

    request = parse_dialect(CompactRequest)
    return fleet_responses.compact(request, body, caller_scope(), state().seal, g.get("record"), send)


# The routes whose requests a fleet front resolves before a box gets them (routes/fleet._relayed), by
# path: (body, send) -> the box's answer, the turns it continues read from the front's store, what it
# stores kept there (services/fleet_responses.py).
RESOLVED_AT_FRONT = {
    "/v1/responses": _relayed_create,
    "/responses": _relayed_create,
    "/v1/responses/input_tokens": _relayed_input_tokens,
    "/v1/responses/compact": _relayed_compact,
}
