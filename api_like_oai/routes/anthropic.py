"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted; no
header, `anthropic-beta` values included, is refused). Errors on these paths are written in
Anthropic's shape (its descriptor, routes/apis.py, says so)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from . import admission, generation_context, parse_dialect, respond, state
from .declare import GENERATES, KEY, route

# The dialect and its service are imported by the first request that needs them, not at start-up:
# a worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("anthropic", __name__)


@route(
    bp,
    "/v1/messages",
    summary="Anthropic Messages API (set stream for its named events; ?beta=true accepted)",
    access=KEY,
    request="api_like_oai.dialects.anthropic:MessagesRequest",
    answer="api_like_oai.dialects.anthropic_answers:MessageResponse",
    body="json",
    model_in="json",
    metered="tokens",
    stream="text/event-stream",
    refusals=(*GENERATES, "block_not_allowed", "invalid_mcp_server_url"),
)
def create():
    from ..dialects.anthropic import MessagesRequest
    from ..services import messages

    app_state = state()
    return respond(
        *messages.create(
            parse_dialect(MessagesRequest), admission(), app_state.seal, generation_context(), app_state.settings.mcp
        )
    )


@route(
    bp,
    "/v1/messages/count_tokens",
    summary="Anthropic Messages API: the prompt's token count",
    access=KEY,
    request="api_like_oai.dialects.anthropic:CountTokensRequest",
    answer="api_like_oai.dialects.anthropic_answers:TokenCount",
    body="json",
    model_in="json",
    metered="requests",
    refusals=(*GENERATES, "block_not_allowed", "invalid_mcp_server_url"),
)
def count_tokens():
    from ..dialects.anthropic import CountTokensRequest
    from ..services import messages

    count, headers = messages.count_tokens(parse_dialect(CountTokensRequest), admission(), state().seal, g.get("record"))
    response = jsonify(count)
    response.headers.update(headers)
    return response


# Anthropic's Message Batches are this blueprint's views too (their paths are under its prefix), in a
# module of their own: imported here, after `bp`, so that they are added before the blueprint is registered.
from . import message_batches  # noqa: E402, F401
