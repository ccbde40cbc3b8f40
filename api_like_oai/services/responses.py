"""OpenAI's Responses API: POST /v1/responses (`create`) and /v1/responses/input_tokens, and the stored
responses read back (GET and DELETE /v1/responses/{id}, its input_items). The route parses the body and
wraps the answer; everything between is here.

A request is translated into the chat request with the turns it continues (stored_responses.Turn),
admitted (admission.py), and generated as every chat is (chat.dialect_answer), its events written by
the Responses shape; a stored turn is kept around the generation (stored_responses.py)."""

from __future__ import annotations

import functools

from ..compact_json import json_bytes
from ..dialects.responses import ResponsesRequest
from ..dialects.responses_tools import at_most
from ..dialects.responses_translation import Translation
from ..mcp.policy import Bounds
from ..observability import stage
from ..sealing import Seal
from . import compaction, mcp_loop
from .admission import Admission, DialectRequest, client_request
from .chat import chained, count_prompt_tokens, dialect_answer
from .fitting import with_max_tokens
from .inflight import Context
from .scope import Scope, fetched, listed, removed, response_not_found
from .stored_responses import Turn, kept


def create(
    request: ResponsesRequest, admission: Admission, scope: Scope, seal: Seal, context: Context, mcp_bounds: Bounds | None = None
):
    """(answer, headers): the response as one dict, or its event stream's bytes when `request.stream`.
    With mcp tools, the proxy lists and calls their servers within `mcp_bounds` (services/mcp_loop.py)."""
    mcp_bounds = mcp_bounds or Bounds()
    servers = _mcp_servers(request, mcp_bounds, mcp_loop.grants_of(admission.caller, admission.fleet_grants))
    if servers:  # the mcp tools as their servers took them: a key's grant of some tools narrows allowed_tools
        request = request.model_copy(update={"tools": mcp_loop.with_servers_tools(request.tools, servers)})
    dialect, translation, turn = _admitted(request, scope, seal, admission, context.record, servers, mcp_bounds, waits_later=True)
    compacted = compaction.auto(request, dialect, turn, seal, context, admission.limits)
    if compacted is not None:  # context_management: the conversation compacted before the model is asked
        turn, translation = compacted, compacted.translation()
        dialect.chat = with_max_tokens(translation.chat, dialect.chat.max_tokens)
    if mcp_loop.answered_before(turn.made):  # approved calls ran first: a forced tool_choice has had its call
        dialect.chat = mcp_loop.choice_satisfied(dialect.chat)
    # The sampling values are asked for by the first event, when the upstream's defaults are known (the
    # prompt's rendering asked /props) but for a stored stream's in_progress copy, which may ask first.
    shape, writer = turn.shape(dialect.model_name, functools.partial(dialect.model.sampling_used, dialect.chat))
    if context.bare_events:
        shape.frame = json_bytes  # a WebSocket's turn: each event's JSON is the message it sends
    if writer is not None:
        writer.begin(shape.in_progress())
    transform = at_most(request.max_tool_calls) if request.max_tool_calls else None
    if compacted is not None and not servers:  # the MCP loop writes the items made first itself
        transform = chained([step for step in (compaction.made_first(turn.made), transform) if step is not None])
    if servers:
        loop = mcp_loop.tool_loop(
            dialect, translation.toolbox, servers, mcp_bounds, turn.made, context, transform, request.max_tool_calls
        )
        transform = chained([step for step in (transform, loop) if step is not None])
    try:
        answer, headers = dialect_answer(shape, dialect.chat, dialect.model, context, transform)
    except BaseException:
        if writer is not None:
            writer.discard()  # a stream kept as in_progress that never started
        raise
    return kept(answer, shape, writer), headers | translation.headers(len(turn.history))


def input_tokens(request: ResponsesRequest, admission: Admission, scope: Scope, seal: Seal, record=None) -> dict:
    """The token count of the prompt the request (with the turns it continues) renders to."""
    dialect, _, _ = _admitted(request, scope, seal, admission, record)
    return {"object": "response.input_tokens", "input_tokens": count_prompt_tokens(dialect.chat, dialect.model)}


def _admitted(
    request: ResponsesRequest,
    scope: Scope,
    seal: Seal,
    admission: Admission,
    record,
    servers=None,
    mcp_bounds: Bounds | None = None,
    *,
    waits_later: bool = False,
) -> tuple[DialectRequest, Translation, Turn]:
    prelude = functools.partial(mcp_loop.prelude, servers, bounds=mcp_bounds, record=record) if servers else None
    with stage(record, "admission"):
        with client_request():
            turn = Turn.load(request, scope, seal, record, prelude)
            translation = turn.translation()
        return admission.dialect(request, translation.chat, waits_later=waits_later), translation, turn


def _mcp_servers(request: ResponsesRequest, bounds: Bounds, grants: tuple[str, ...] | None) -> dict:
    """The request's MCP servers, their URLs checked and the caller's `grants` of named ones (a 400 or a
    403 before anything is generated)."""
    tools = [(f"tools.{n}.server_url", tool) for n, tool in enumerate(request.tools or ()) if tool.type == "mcp"]
    return mcp_loop.servers_of(tools, bounds, grants) if tools else {}


# --- reading back ------------------------------------------------------------------------------


def retrieve(scope: Scope, response_id: str) -> dict:
    return fetched(scope, response_id, functools.partial(response_not_found, response_id))


def delete(scope: Scope, response_id: str) -> dict:
    removed(scope, response_id, functools.partial(response_not_found, response_id))
    return {"id": response_id, "object": "response", "deleted": True}


def list_input_items(scope: Scope, response_id: str, after: str | None, limit: int, order: str) -> dict:
    return listed(scope, response_id, after, limit, order, functools.partial(response_not_found, response_id))
