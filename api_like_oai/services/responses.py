"""OpenAI's Responses API: POST /v1/responses (`create`) and /v1/responses/input_tokens, and the stored
responses read back (GET and DELETE /v1/responses/{id}, its input_items). The route parses the body and
wraps the answer; everything between is here.

A request is translated into the chat request with the turns it continues (stored_responses.Turn),
admitted (admission.py), and generated as every chat is (chat.dialect_answer), its events written by
the Responses shape; a stored turn is kept around the generation (stored_responses.py)."""

from __future__ import annotations

import functools

from ..dialects.responses import ResponsesRequest
from ..dialects.responses_tools import at_most
from ..dialects.responses_translation import Translation
from ..observability import stage
from ..sealing import Seal
from .admission import Admission, DialectRequest, client_request
from .chat import count_prompt_tokens, dialect_answer
from .inflight import Context
from .scope import Scope, fetched, listed, removed, response_not_found
from .stored_responses import Turn, kept


def create(request: ResponsesRequest, admission: Admission, scope: Scope, seal: Seal, context: Context):
    """(answer, headers): the response as one dict, or its event stream's bytes when `request.stream`."""
    turn = Turn(scope, seal, context.record)
    dialect, translation = _admitted(request, turn, admission, context.record)
    # The sampling values are asked for by the first event, when the upstream's defaults are known (the
    # prompt's rendering asked /props) but for a stored stream's in_progress copy, which may ask first.
    shape = turn.shape(dialect.model_name, functools.partial(dialect.model.sampling_used, dialect.chat))
    turn.begin(shape)
    try:
        answer, headers = dialect_answer(shape, dialect.chat, dialect.model, context,
                                         at_most(request.max_tool_calls) if request.max_tool_calls else None)
    except BaseException:
        turn.discard()   # a stream kept as in_progress that never started
        raise
    return kept(answer, shape), headers | translation.headers(len(turn.history))


def input_tokens(request: ResponsesRequest, admission: Admission, scope: Scope, seal: Seal, record=None) -> dict:
    """The token count of the prompt the request (with the turns it continues) renders to."""
    dialect, _ = _admitted(request, Turn(scope, seal), admission, record)
    return {"object": "response.input_tokens", "input_tokens": count_prompt_tokens(dialect.chat, dialect.model)}


def _admitted(request: ResponsesRequest, turn: Turn, admission: Admission, record) -> tuple[DialectRequest, Translation]:
    with stage(record, "admission"):
        with client_request():
            translation = turn.translate(request)
        return admission.dialect(request, translation.chat), translation


# --- reading back ------------------------------------------------------------------------------

def retrieve(scope: Scope, response_id: str) -> dict:
    return fetched(scope, response_id, functools.partial(response_not_found, response_id))


def delete(scope: Scope, response_id: str) -> dict:
    removed(scope, response_id, functools.partial(response_not_found, response_id))
    return {"id": response_id, "object": "response", "deleted": True}


def list_input_items(scope: Scope, response_id: str, after: str | None, limit: int, order: str) -> dict:
    return listed(scope, response_id, after, limit, order, functools.partial(response_not_found, response_id))
