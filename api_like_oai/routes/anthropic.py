"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens (`?beta=true` accepted; no
header, `anthropic-beta` values included, is refused). Errors on these paths are written in
Anthropic's shape (app.py asks `speaks_anthropic`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from flask import Blueprint, jsonify

from ..dialects.common import set_aside_header
from ..services.chat import count_prompt_tokens, dialect_answer
from . import generation_context, parse_dialect, respond, state
from .waiting import keeps_alive_while_loading

if TYPE_CHECKING:
    from ..dialects.anthropic import CountTokensRequest
    from ..dialects.anthropic_edits import ContextEdits

# The dialect's models and shape are imported by the first request that needs them, not at start-up:
# a worker that never serves this API does not hold them (idle memory, benchmarks/PROFILE.md).

bp = Blueprint("anthropic", __name__)

PATH_PREFIX = "/v1/messages"


def speaks_anthropic(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


@bp.post("/v1/messages")
@keeps_alive_while_loading("anthropic")
def create():
    from ..dialects.anthropic import MessagesRequest
    from ..dialects.anthropic_shape import MessagesShape

    dialect = parse_dialect(MessagesRequest, _translation())
    request = dialect.request
    edits = _context_edits(request)
    shape = MessagesShape(dialect.model_name, request.stop_sequences, state().seal, request.thinking_display(), edits)
    answer, headers = dialect_answer(shape, dialect.chat, dialect.model, generation_context(),
                                     edit_messages=edits.apply if edits else None)
    return respond(answer, headers | set_aside_header(request.set_aside_tools()))


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    from ..dialects.anthropic import CountTokensRequest

    dialect = parse_dialect(CountTokensRequest, _translation())
    edits = _context_edits(dialect.request)
    count = {"input_tokens": count_prompt_tokens(dialect.chat, dialect.model, edits.apply if edits else None)}
    if edits:
        count["context_management"] = {"original_input_tokens": count_prompt_tokens(dialect.chat, dialect.model)}
    response = jsonify(count)
    response.headers.update(set_aside_header(dialect.request.set_aside_tools()))
    return response


def _translation():
    """The request's translation, checking thinking blocks with the installation's seal."""
    from ..dialects.anthropic_translation import to_chat_request

    return functools.partial(to_chat_request, seal=state().seal)


def _context_edits(request: CountTokensRequest) -> ContextEdits | None:
    from ..dialects.anthropic_edits import ContextEdits

    management = request.context_management
    return ContextEdits(management.edits) if management is not None and management.edits else None
