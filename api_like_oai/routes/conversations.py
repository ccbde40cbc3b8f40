"""OpenAI's Conversations API: /v1/conversations and their items (services/conversations.py)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from . import parse_body
from .declare import OWN, route
from .scope import admitted_scope, list_query

bp = Blueprint("conversations", __name__)


def _service():
    """services/conversations.py, imported by the first request that needs it, not at start-up: it
    brings the Responses dialect's models (idle memory, benchmarks/PROFILE.md)."""
    from ..services import conversations

    return conversations


@route(
    bp,
    "/v1/conversations",
    methods=("POST",),
    summary="Create a conversation",
    access=OWN,
    request="api_like_oai.dialects.conversations:ConversationCreate",
    answer="api_like_oai.dialects.conversations:Conversation",
    body="json",
    metered="requests",
    refusals=("duplicate_item", "not_supported"),
)
def create():
    from ..dialects.conversations import ConversationCreate

    return jsonify(_service().create(admitted_scope(), parse_body(ConversationCreate)))


@route(
    bp,
    "/v1/conversations/<conversation_id>",
    methods=("GET",),
    summary="A conversation",
    access=OWN,
    answer="api_like_oai.dialects.conversations:Conversation",
    metered="requests",
)
def retrieve(conversation_id: str):
    return jsonify(_service().retrieve(admitted_scope(), conversation_id))


@route(
    bp,
    "/v1/conversations/<conversation_id>",
    methods=("POST",),
    summary="Update a conversation's metadata",
    access=OWN,
    request="api_like_oai.dialects.conversations:ConversationUpdate",
    answer="api_like_oai.dialects.conversations:Conversation",
    body="json",
    metered="requests",
)
def update(conversation_id: str):
    from ..dialects.conversations import ConversationUpdate

    return jsonify(_service().update(admitted_scope(), conversation_id, parse_body(ConversationUpdate)))


@route(
    bp,
    "/v1/conversations/<conversation_id>",
    methods=("DELETE",),
    summary="Delete a conversation",
    access=OWN,
    answer="api_like_oai.dialects.conversations:ConversationDeleted",
    metered="requests",
)
def delete(conversation_id: str):
    return jsonify(_service().delete(admitted_scope(), conversation_id))


@route(
    bp,
    "/v1/conversations/<conversation_id>/items",
    methods=("GET",),
    summary="A conversation's items",
    access=OWN,
    answer="api_like_oai.dialects.conversations:ItemList",
    query="api_like_oai.dialects.conversations:ItemListQuery",
    metered="requests",
)
def list_items(conversation_id: str):
    return jsonify(_service().list_items(admitted_scope(), conversation_id, list_query()))


@route(
    bp,
    "/v1/conversations/<conversation_id>/items",
    methods=("POST",),
    summary="Add items to a conversation",
    access=OWN,
    request="api_like_oai.dialects.conversations:ItemsCreate",
    answer="api_like_oai.dialects.conversations:ItemList",
    body="json",
    metered="requests",
    refusals=("duplicate_item", "not_supported"),
)
def add_items(conversation_id: str):
    from ..dialects.conversations import ItemsCreate

    return jsonify(_service().add_items(admitted_scope(), conversation_id, parse_body(ItemsCreate)))


@route(
    bp,
    "/v1/conversations/<conversation_id>/items/<item_id>",
    methods=("GET",),
    summary="One item of a conversation",
    access=OWN,
    answer="api_like_oai.dialects.conversations:Item",
    metered="requests",
)
def retrieve_item(conversation_id: str, item_id: str):
    return jsonify(_service().retrieve_item(admitted_scope(), conversation_id, item_id))


@route(
    bp,
    "/v1/conversations/<conversation_id>/items/<item_id>",
    methods=("DELETE",),
    summary="Delete an item (answers the conversation)",
    access=OWN,
    answer="api_like_oai.dialects.conversations:Conversation",
    metered="requests",
)
def delete_item(conversation_id: str, item_id: str):
    return jsonify(_service().delete_item(admitted_scope(), conversation_id, item_id))
