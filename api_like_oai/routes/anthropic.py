"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted; no
header, `anthropic-beta` values included, is refused). Errors on these paths are written in
Anthropic's shape (its descriptor, routes/apis.py, says so)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify

from . import admission, generation_context, parse_dialect, respond, state

# The dialect and its service are imported by the first request that needs them, not at start-up:
# a worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("anthropic", __name__)


@bp.post("/v1/messages")
def create():
    from ..dialects.anthropic import MessagesRequest
    from ..services import messages

    app_state = state()
    return respond(
        *messages.create(
            parse_dialect(MessagesRequest), admission(), app_state.seal, generation_context(), app_state.settings.mcp
        )
    )


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    from ..dialects.anthropic import CountTokensRequest
    from ..services import messages

    count, headers = messages.count_tokens(parse_dialect(CountTokensRequest), admission(), state().seal, g.get("record"))
    response = jsonify(count)
    response.headers.update(headers)
    return response
