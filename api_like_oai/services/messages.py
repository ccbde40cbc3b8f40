"""Anthropic's Messages API: POST /v1/messages (`create`) and /v1/messages/count_tokens. The route parses
the body and wraps the answer; everything between is here.

A request is translated into the chat request (dialects/anthropic_translation.py), admitted
(admission.py), and generated as every chat is (chat.dialect_answer), its events written by the
Messages shape; its context_management edits the translated messages before they are fitted."""

from __future__ import annotations

from ..dialects.anthropic import CountTokensRequest, MessagesRequest
from ..dialects.anthropic_edits import ContextEdits
from ..dialects.anthropic_shape import MessagesShape
from ..dialects.anthropic_translation import to_chat_request
from ..dialects.common import set_aside_header
from ..mcp.policy import Bounds
from ..observability import stage
from ..sealing import Seal
from . import mcp_connector, mcp_loop
from .admission import Admission, DialectRequest, client_request
from .chat import count_prompt_tokens, dialect_answer
from .inflight import Context


def create(request: MessagesRequest, admission: Admission, seal: Seal, context: Context, mcp_bounds: Bounds | None = None):
    """(answer, headers): the message as one dict, or its event stream's bytes when `request.stream`.
    With mcp_servers, the proxy lists and calls them within `mcp_bounds` (services/mcp_loop.py)."""
    grants = mcp_loop.grants_of(admission.caller, admission.fleet_grants)
    connector = mcp_connector.listed(request, mcp_bounds or Bounds(), context.record, grants) if request.mcp_servers else None
    dialect = _admitted(request, admission, seal, context.record, connector, waits_later=True)
    edits = _context_edits(request)
    edit_messages = edits.apply if edits else None
    shape = MessagesShape(dialect.model_name, request.stop_sequences, seal, request.thinking_display(), edits)
    loop = connector.loop(dialect, context, edit_messages) if connector else None
    answer, headers = dialect_answer(shape, dialect.chat, dialect.model, context, loop, edit_messages=edit_messages)
    return answer, headers | set_aside_header(request.set_aside_tools())


def count_tokens(request: CountTokensRequest, admission: Admission, seal: Seal, record=None) -> tuple[dict, dict]:
    """(count, headers): the token count of the prompt the request renders to, after its context edits
    (and, with edits, the count before them)."""
    dialect = _admitted(request, admission, seal, record)
    edits = _context_edits(request)
    count = {"input_tokens": count_prompt_tokens(dialect.chat, dialect.model, edits.apply if edits else None)}
    if edits:
        count["context_management"] = {"original_input_tokens": count_prompt_tokens(dialect.chat, dialect.model)}
    return count, set_aside_header(request.set_aside_tools())


def _admitted(
    request: CountTokensRequest, admission: Admission, seal: Seal, record, connector=None, *, waits_later: bool = False
) -> DialectRequest:
    with stage(record, "admission"):
        with client_request():  # thinking blocks are checked with the installation's seal
            chat = to_chat_request(request, seal, connector.tools() if connector is not None else ())
        return admission.dialect(request, chat, waits_later=waits_later)


def _context_edits(request: CountTokensRequest) -> ContextEdits | None:
    management = request.context_management
    return ContextEdits(management.edits) if management is not None and management.edits else None
