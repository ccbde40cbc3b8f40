from __future__ import annotations

from flask import Blueprint

from ..protocol import CompletionRequest
from ..services.completions import completion
from ..services.passthrough import passthrough
from . import check_limits, generation_context, lookup_model, parse_body, respond
from .waiting import keeps_alive_while_loading

bp = Blueprint("completions", __name__)


@bp.post("/v1/completions")
@bp.post("/completions")
@keeps_alive_while_loading("openai")
def create_completion():
    completion_request = parse_body(CompletionRequest)
    check_limits(completion_request)
    model, model_name = lookup_model(completion_request.model, completion_request.token_limit())
    if model.settings.kind == "openai":
        return respond(passthrough(completion_request, model, model_name, "/completions"))
    return respond(completion(completion_request, model, model_name, generation_context()))
