from __future__ import annotations

from flask import Blueprint, jsonify

from ..errors import ModelNotFound
from ..protocol import ModelCard, ModelList
from . import state

bp = Blueprint("models", __name__)


def _card(model) -> ModelCard:
    return ModelCard(id=model.name, created=model.created)


@bp.get("/v1/models")
@bp.get("/models")
def list_models():
    models = state().registry.models.values()
    return jsonify(ModelList(data=[_card(m) for m in models]).model_dump())


@bp.get("/v1/models/<path:model_id>")
@bp.get("/models/<path:model_id>")
def get_model(model_id: str):
    model = state().registry.models.get(model_id)
    if model is None:
        raise ModelNotFound(f"model {model_id!r} does not exist", param="model")
    return jsonify(_card(model).model_dump())
