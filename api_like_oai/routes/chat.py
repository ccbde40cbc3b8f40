from __future__ import annotations

from flask import Blueprint

from ..protocol import ChatCompletionRequest
from ..services.chat import chat_completion
from ..services.passthrough import passthrough
from . import admit, generation_context, parse_body, respond
from .waiting import keeps_alive_while_loading

bp = Blueprint("chat", __name__)


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")
@keeps_alive_while_loading("openai")
def create_chat_completion():
    sent = parse_body(ChatCompletionRequest)
    chat_request, model, model_name = admit(sent)
    if model.settings.kind == "openai":   # OpenAI's own request goes through as the client sent it
        return respond(passthrough(sent, model, model_name, "/chat/completions"))
    return respond(*chat_completion(chat_request, model, model_name, generation_context()))
