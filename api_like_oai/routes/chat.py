from __future__ import annotations

from flask import Blueprint

from ..protocol import ChatCompletionRequest
from ..services.chat import chat_completion
from . import parse_body, respond, state

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")
def create_chat_completion():
    chat_request = parse_body(ChatCompletionRequest)
    model, model_name = state().registry.lookup(chat_request.model)
    return respond(chat_completion(chat_request, model, model_name, state().inflight))
