from __future__ import annotations

from flask import Blueprint, g, jsonify

from ..answers import ModelCard, ModelList, ModelStatus
from ..errors import ModelNotFound
from . import current_caller, sees_everything, state, without_addresses
from .declare import KEY, OWN, route
from .lifecycle import BoxLabels

bp = Blueprint("models", __name__)


def _card(name: str, model, statuses: dict) -> dict:
    context_length = model.known_context_length()
    card = ModelCard(
        id=name,
        created=model.created,
        context_length=context_length,
        max_model_len=context_length,
        capabilities=model.capabilities(),
        input_modalities=model.input_modalities(),
        status=statuses.get(model.name),
    )
    return card.model_dump(exclude={"status"} if card.status is None else None)


def _statuses() -> dict:
    """The started models' statuses by name (one question to the supervisor); {} without one. Their
    llama-servers' addresses only to a caller who sees everything."""
    supervisor = state().supervisor
    statuses = supervisor.ask("status")["models"] if supervisor is not None else {}
    return statuses if sees_everything() else {name: without_addresses(status) for name, status in statuses.items()}


@route(
    bp,
    "/v1/models",
    "/models",
    methods=("GET",),
    summary="The served models (those the key may use)",
    access=OWN,
    answer=ModelList,
)
def list_models():
    """Every name the caller may send: each model and each of its aliases (those of its key's models)."""
    caller, names, statuses = current_caller(), state().registry.by_name, _statuses()
    return jsonify(
        {
            "object": ModelList.model_fields["object"].default,
            "data": [_card(name, model, statuses) for name, model in names.items() if caller.allows(model.name, name)]
            + [card for name, card in _fleet_cards().items() if name not in names and caller.allows(name, name)],
        }
    )


def _fleet_cards() -> dict[str, dict]:
    """The fleet's models (with --fleet), each with where it is: `status.boxes` (box, state, memory,
    in flight, queued); its value the best of its boxes' (loaded, else loading, else unloaded)."""
    fleet = state().fleet
    if fleet is None:
        return {}
    where = {name: [] for name in fleet.membership.remembered()} | fleet.models()  # its boxes gone: none
    shown = where if sees_everything() else _labelled(where)
    # as its boxes report them; a box's own list (a fleet call) asks no other box (no loop between boxes)
    metadata = {} if g.get("fleet_call") else fleet.cards()
    return {
        name: ModelCard(
            **{"created": 0, "context_length": None, "max_model_len": None, "capabilities": ["completion", "chat"]}
            | {field: value for field, value in metadata.get(name, {}).items() if value is not None},
            id=name,
            owned_by="fleet",
            status=ModelStatus(
                value=_best_state(boxes), boxes=boxes, memory_mib=max((box["memory_mib"] for box in boxes), default=0)
            ),
        ).model_dump()
        for name, boxes in shown.items()
    }


def _labelled(where: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The boxes named `box 1`, `box 2`, ... instead of their addresses (only to who sees every
    address): one label per box across every model, so a tenant tells two boxes apart."""
    labels = BoxLabels()
    for address in sorted({box["box"] for boxes in where.values() for box in boxes}):
        labels.of(address)  # numbered in address order
    return {name: [{**box, "box": labels.of(box["box"])} for box in boxes] for name, boxes in where.items()}


def _best_state(boxes: list[dict]) -> str:
    states = {box["state"] for box in boxes}
    return next((value for value in ("loaded", "loading") if value in states), "unloaded")


@route(
    bp,
    "/v1/models/<path:model_id>",
    "/models/<path:model_id>",
    methods=("GET",),
    summary="One served model (a model of another key's: 404)",
    access=KEY,
    answer=ModelCard,
)
def get_model(model_id: str):
    model = state().registry.by_name.get(model_id)
    if model is None and model_id in (fleet_cards := _fleet_cards()) and current_caller().allows(model_id, model_id):
        return jsonify(fleet_cards[model_id])
    if model is None or not current_caller().allows(model.name, model_id):
        raise ModelNotFound(f"model {model_id!r} does not exist", param="model")
    return jsonify(_card(model_id, model, _statuses()))
