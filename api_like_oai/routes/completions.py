from __future__ import annotations

from flask import Blueprint

from ..protocol import CompletionRequest
from ..services.completions import completion
from . import parse_body, respond, state

bp = Blueprint("completions", __name__)


@bp.post("/v1/completions")
@bp.post("/completions")
def create_completion():
    completion_request = parse_body(CompletionRequest)
    model, model_name = state().registry.lookup(completion_request.model)
    return respond(completion(completion_request, model, model_name, state().inflight))
