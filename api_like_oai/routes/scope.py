"""What the routes of stored objects share: the caller's scope in the store, and a list's query."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import g, request
from pydantic import ValidationError

from ..batch.lines import ENVIRON_KEY as BATCH_LINE
from ..services.scope import Scope
from . import current_caller, invalid_request, offered_key, state

if TYPE_CHECKING:
    from ..dialects.conversations import ItemListQuery

# The Conversations API's models are imported by the first request that needs them, not at start-up
# (they bring the Responses dialect: idle memory, benchmarks/PROFILE.md).


def caller_scope() -> Scope:
    """The store as this request's caller sees it: by its API key, or the one shared scope when the
    proxy asks for none (the key was already checked, in constant time, by the app)."""
    app_state = state()
    on_behalf = request.environ.get(BATCH_LINE)
    if on_behalf is not None:  # a batch's line: its key's scope, known by its owner digest
        return Scope(app_state.store, None, _quota_bytes(), owner=on_behalf.owner)
    return Scope(app_state.store, offered_key() if app_state.gate.required else None, _quota_bytes())


def _quota_bytes() -> int | None:
    """The caller's storage quota: its managed key's own, else --max-stored-mib (the admin key has none)."""
    caller = current_caller()
    if caller.admin:
        return None
    mib = caller.record.max_stored_mib if caller.record is not None and caller.record.max_stored_mib else None
    mib = mib or state().settings.max_stored_mib
    return mib * 1024 * 1024 if mib else None


def admitted_scope() -> Scope:
    """`caller_scope()` for a route that only reads or writes the store (a conversation, its items, a
    stored response): counted first against the key's request limits (Ticket.admit_action), so a key
    refused on chat cannot go on filling the store."""
    ticket = g.get("ticket")
    if ticket is not None:
        ticket.admit_action()
    scope = caller_scope()
    if request.method == "POST":  # a write: within the key's storage quota
        scope.check_room(request.content_length or 0)
    return scope


def list_query() -> ItemListQuery:
    """`limit`, `after` and `order` of a list request; 400 naming a bad one."""
    from ..dialects.conversations import ItemListQuery

    try:
        return ItemListQuery.model_validate(request.args.to_dict())
    except ValidationError as exc:
        raise invalid_request(exc) from None
