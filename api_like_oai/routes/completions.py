from __future__ import annotations

from flask import Blueprint

from ..protocol import CompletionRequest
from ..services.completions import completion
from ..services.passthrough import passthrough
from . import admit, generation_context, parse_body, respond
from .waiting import keeps_alive_while_loading

bp = Blueprint("completions", __name__)


@bp.post("/v1/completions")
@bp.post("/completions")
@keeps_alive_while_loading("openai")
def create_completion():
    sent = parse_body(CompletionRequest)
    completion_request, model, model_name = admit(sent)
    if model.settings.kind == "openai":   # OpenAI's own request goes through as the client sent it
        return respond(passthrough(sent, model, model_name, "/completions"))
    return respond(completion(completion_request, model, model_name, generation_context()))
