"""OpenAI's Conversations API: /v1/conversations and their items (services/conversations.py)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..dialects.stored import ConversationCreate, ConversationUpdate, ItemsCreate
from ..services import conversations
from . import parse_body
from .scope import caller_scope, list_query

bp = Blueprint("conversations", __name__)


@bp.post("/v1/conversations")
def create():
    return jsonify(conversations.create(caller_scope(), parse_body(ConversationCreate)))


@bp.get("/v1/conversations/<conversation_id>")
def retrieve(conversation_id: str):
    return jsonify(conversations.retrieve(caller_scope(), conversation_id))


@bp.post("/v1/conversations/<conversation_id>")
def update(conversation_id: str):
    return jsonify(conversations.update(caller_scope(), conversation_id, parse_body(ConversationUpdate)))


@bp.delete("/v1/conversations/<conversation_id>")
def delete(conversation_id: str):
    return jsonify(conversations.delete(caller_scope(), conversation_id))


@bp.get("/v1/conversations/<conversation_id>/items")
def list_items(conversation_id: str):
    return jsonify(conversations.list_items(caller_scope(), conversation_id, list_query()))


@bp.post("/v1/conversations/<conversation_id>/items")
def add_items(conversation_id: str):
    return jsonify(conversations.add_items(caller_scope(), conversation_id, parse_body(ItemsCreate)))


@bp.get("/v1/conversations/<conversation_id>/items/<item_id>")
def retrieve_item(conversation_id: str, item_id: str):
    return jsonify(conversations.retrieve_item(caller_scope(), conversation_id, item_id))


@bp.delete("/v1/conversations/<conversation_id>/items/<item_id>")
def delete_item(conversation_id: str, item_id: str):
    return jsonify(conversations.delete_item(caller_scope(), conversation_id, item_id))
