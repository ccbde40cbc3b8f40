"""OpenAI's Conversations API: /v1/conversations and their items (services/conversations.py)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from . import parse_body
from .scope import admitted_scope, list_query

bp = Blueprint("conversations", __name__)


def _service():
    """services/conversations.py, imported by the first request that needs it, not at start-up: it
    brings the Responses dialect's models (idle memory, benchmarks/PROFILE.md)."""
    from ..services import conversations

    return conversations


@bp.post("/v1/conversations")
def create():
    from ..dialects.conversations import ConversationCreate

    return jsonify(_service().create(admitted_scope(), parse_body(ConversationCreate)))


@bp.get("/v1/conversations/<conversation_id>")
def retrieve(conversation_id: str):
    return jsonify(_service().retrieve(admitted_scope(), conversation_id))


@bp.post("/v1/conversations/<conversation_id>")
def update(conversation_id: str):
    from ..dialects.conversations import ConversationUpdate

    return jsonify(_service().update(admitted_scope(), conversation_id, parse_body(ConversationUpdate)))


@bp.delete("/v1/conversations/<conversation_id>")
def delete(conversation_id: str):
    return jsonify(_service().delete(admitted_scope(), conversation_id))


@bp.get("/v1/conversations/<conversation_id>/items")
def list_items(conversation_id: str):
    return jsonify(_service().list_items(admitted_scope(), conversation_id, list_query()))


@bp.post("/v1/conversations/<conversation_id>/items")
def add_items(conversation_id: str):
    from ..dialects.conversations import ItemsCreate

    return jsonify(_service().add_items(admitted_scope(), conversation_id, parse_body(ItemsCreate)))


@bp.get("/v1/conversations/<conversation_id>/items/<item_id>")
def retrieve_item(conversation_id: str, item_id: str):
    return jsonify(_service().retrieve_item(admitted_scope(), conversation_id, item_id))


@bp.delete("/v1/conversations/<conversation_id>/items/<item_id>")
def delete_item(conversation_id: str, item_id: str):
    return jsonify(_service().delete_item(admitted_scope(), conversation_id, item_id))
