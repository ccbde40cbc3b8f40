"""OpenAI's Conversations API over the store: a conversation is an object (id, created_at, metadata)
whose items are its turns' items in order. /v1/responses with `conversation` reads them before its
input and appends its input and output (stored_responses.Turn)."""

from __future__ import annotations

import functools
import time

from ..dialects.conversations import ConversationCreate, ConversationUpdate, ItemListQuery, ItemsCreate
from ..errors import NotFound
from ..store import Page, new_id
from .scope import Scope, conversation_not_found, fetched, listed, refusals, removed
from .stored_items import input_items, item_list


def create(scope: Scope, request: ConversationCreate) -> dict:
    conversation = {
        "id": new_id("conv"),
        "object": "conversation",
        "created_at": int(time.time()),
        "metadata": dict(request.metadata or {}),
    }
    with refusals("items"):
        scope.need().put(conversation["id"], scope.owner, conversation, input_items(request.items or []))
    return conversation


def retrieve(scope: Scope, conversation_id: str) -> dict:
    return fetched(scope, conversation_id, functools.partial(conversation_not_found, conversation_id))


def update(scope: Scope, conversation_id: str, request: ConversationUpdate) -> dict:
    conversation = retrieve(scope, conversation_id) | {"metadata": dict(request.metadata)}
    if not scope.need().update(conversation_id, scope.owner, conversation):
        raise conversation_not_found(conversation_id)
    return conversation


def delete(scope: Scope, conversation_id: str) -> dict:
    removed(scope, conversation_id, functools.partial(conversation_not_found, conversation_id))
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def list_items(scope: Scope, conversation_id: str, query: ItemListQuery) -> dict:
    return listed(scope, conversation_id, query.after, query.limit, query.order, lambda: conversation_not_found(conversation_id))


def add_items(scope: Scope, conversation_id: str, request: ItemsCreate) -> dict:
    """The items added at the end, with their ids, as a list."""
    added = input_items(request.items)
    with refusals("items"):
        if not scope.need().append(conversation_id, scope.owner, added):
            raise conversation_not_found(conversation_id)
    return item_list(Page(added, False))


def retrieve_item(scope: Scope, conversation_id: str, item_id: str) -> dict:
    retrieve(scope, conversation_id)
    item = scope.need().item(conversation_id, scope.owner, item_id)
    if item is None:
        raise NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.")
    return item


def delete_item(scope: Scope, conversation_id: str, item_id: str) -> dict:
    """The conversation, as OpenAI answers a deleted item."""
    conversation = retrieve(scope, conversation_id)
    if not scope.need().delete_item(conversation_id, scope.owner, item_id):
        raise NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.")
    return conversation
