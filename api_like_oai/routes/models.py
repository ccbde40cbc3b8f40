from __future__ import annotations

from flask import Blueprint, jsonify

from ..errors import ModelNotFound
from ..protocol import ModelCard, ModelList
from . import state

bp = Blueprint("models", __name__)


def _card(name: str, model) -> ModelCard:
    context_length = model.known_context_length()
    return ModelCard(id=name, created=model.created, context_length=context_length, max_model_len=context_length,
                     capabilities=model.capabilities(), input_modalities=model.input_modalities())


@bp.get("/v1/models")
@bp.get("/models")
def list_models():
    """Every name a client may send: each model and each of its aliases."""
    names = state().registry.by_name
    return jsonify(ModelList(data=[_card(name, model) for name, model in names.items()]).model_dump())


@bp.get("/v1/models/<path:model_id>")
@bp.get("/models/<path:model_id>")
def get_model(model_id: str):
    model = state().registry.by_name.get(model_id)
    if model is None:
        raise ModelNotFound(f"model {model_id!r} does not exist", param="model")
    return jsonify(_card(model_id, model).model_dump())
