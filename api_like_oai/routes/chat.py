from __future__ import annotations

from flask import Blueprint

from ..protocol import ChatCompletionRequest
from ..services.chat import chat_completion
from ..services.passthrough import passthrough
from . import check_limits, generation_context, lookup_model, parse_body, respond
from .waiting import keeps_alive_while_loading

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")
@keeps_alive_while_loading("openai")
def create_chat_completion():
    chat_request = parse_body(ChatCompletionRequest)
    check_limits(chat_request)
    model, model_name = lookup_model(chat_request.model, chat_request.token_limit())
    if model.settings.kind == "openai":
        return respond(passthrough(chat_request, model, model_name, "/chat/completions"))
    return respond(*chat_completion(chat_request, model, model_name, generation_context()))
