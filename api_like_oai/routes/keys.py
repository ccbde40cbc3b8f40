"""Managed keys over HTTP, for an admin key only (/v1/internal/keys), and usage (/v1/internal/usage,
and OpenAI's usage API /v1/organization/usage/completions and audio_transcriptions): an admin key sees every key's, a managed
key its own."""

from __future__ import annotations

import time

from flask import Blueprint, g, jsonify, request
from pydantic import ValidationError

from ..access import manage
from ..access.keys import KeyProblem, NameTaken, UnknownKey
from ..access.usage import GROUPS, as_json, openai_buckets, summed
from ..errors import InvalidRequest, NotFound, PermissionDenied
from ..store.settings import duration
from . import current_caller, invalid_request, parse_body, state
from .declare import ADMIN_KEY, OWN, route

bp = Blueprint("keys", __name__)


def _book():
    book = state().gate.book
    if book is None:
        raise InvalidRequest("managed keys need a store; this proxy runs with --store none", code="no_store")
    return book


def _checked(operation, *args):
    """`operation(book, *args)`, its KeyProblem as the API's 404, 409 or 400."""
    try:
        return operation(_book(), *args)
    except UnknownKey as exc:
        raise NotFound(str(exc), param="name") from None
    except NameTaken as exc:
        error = InvalidRequest(str(exc), param="name", code="name_taken")
        error.status = 409
        raise error from None
    except KeyProblem as exc:
        raise InvalidRequest(str(exc)) from None


@route(
    bp, "/v1/internal/keys", methods=("GET",), summary="Managed keys (admin key only)", access=ADMIN_KEY, answer=manage.KeyList
)
def list_keys():
    return jsonify({"object": "list", "data": [record.public() for record in _book().records()]})


@route(
    bp,
    "/v1/internal/keys",
    summary="Create a managed key; the answer shows it once (admin key only)",
    access=ADMIN_KEY,
    request=manage.NewKey,
    answer=manage.CreatedKey,
    body="json",
    success=201,
    statuses=(409,),
)
def create_key():
    """A new key; the answer's `key` is the only time it is shown."""
    new = parse_body(manage.NewKey)
    key, record = _checked(manage.create_key, new.name, manage.KeyChanges(**new.model_dump(exclude={"name"}, exclude_unset=True)))
    return jsonify({"key": key, **record.public()}), 201


@route(
    bp,
    "/v1/internal/keys/<name>",
    methods=("GET",),
    summary="One managed key (admin key only)",
    access=ADMIN_KEY,
    answer=manage.KeyView,
)
def get_key(name: str):
    return jsonify(_checked(manage.existing, name).public())


@route(
    bp,
    "/v1/internal/keys/<name>",
    methods=("PATCH",),
    summary="Change a key's models, limits or expiry (admin key only)",
    access=ADMIN_KEY,
    request=manage.KeyChanges,
    answer=manage.KeyView,
    body="json",
)
def update_key(name: str):
    return jsonify(_checked(manage.update_key, name, parse_body(manage.KeyChanges)).public())


@route(
    bp,
    "/v1/internal/keys/<name>",
    methods=("DELETE",),
    summary="Revoke a key, on every instance (admin key only)",
    access=ADMIN_KEY,
    answer=manage.KeyView,
)
def revoke_key(name: str):
    """Revoke the key: every instance sharing the store refuses it from its next request."""
    return jsonify(_checked(manage.revoke_key, name).public())


@route(
    bp,
    "/v1/organization/usage/completions",
    methods=("GET",),
    summary="OpenAI's usage API for completions: daily buckets from start_time, group_by api_key_id (the key's name) "
    "and model (a managed key: its own)",
    access=OWN,
    answer=manage.OpenAIUsagePage,
    query=manage.OpenAIUsageQuery,
    metered="requests",
)
def openai_usage():
    """OpenAI's usage API for completions: daily buckets from `start_time`, `group_by` api_key_id (the
    key's name) and model; an admin key sees every key's, a managed key only its own."""
    return _openai_usage("completions")


@route(
    bp,
    "/v1/organization/usage/audio_transcriptions",
    methods=("GET",),
    summary="OpenAI's usage API for speech to text: the seconds transcribed or translated per day, grouped as for completions",
    access=OWN,
    answer=manage.OpenAIAudioUsagePage,
    query=manage.OpenAIUsageQuery,
    metered="requests",
)
def openai_audio_usage():
    """OpenAI's usage API for speech to text: the seconds transcribed or translated, as for completions."""
    return _openai_usage("audio_transcriptions")


def _openai_usage(kind: str):
    key_name = _usage_scope()
    try:
        query = manage.OpenAIUsageQuery.model_validate(
            request.args.to_dict(flat=True) | {"group_by": request.args.getlist("group_by") or request.args.getlist("group_by[]")}
        )
    except ValidationError as exc:
        raise invalid_request(exc) from None
    days, next_start = query.page_days(time.time())
    buckets = openai_buckets(manage.usage_of_days(_book(), days, key_name), days, tuple(query.group_by), kind)
    return jsonify(
        {
            "object": "page",
            "data": buckets,
            "has_more": next_start is not None,
            "next_page": str(next_start) if next_start is not None else None,
        }
    )


def _usage_scope() -> str | None:
    """Whose usage the caller may read: every key's for an admin key (None, or `?key=NAME`), its own for
    a managed key; 403 for others (usage is kept for managed keys only)."""
    caller = current_caller()
    if not caller.admin and caller.record is None:
        raise PermissionDenied("usage is kept for managed keys; ask with one, or with an admin key")
    ticket = g.get("ticket")
    if ticket is not None:
        ticket.admit_action()
    return request.args.get("key") if caller.admin else caller.name


@route(
    bp,
    "/v1/internal/usage",
    methods=("GET",),
    summary="Usage per key, model, API and day (an admin key: all; a managed key: its own)",
    access=OWN,
    answer=manage.UsageList,
    query=manage.UsageQuery,
    metered="requests",
)
def usage():
    """Usage rows, `?since=7d` (default), `?by=key,model` (of key, model, api, day; default: every row);
    an admin key sees every key's (or `?key=NAME`'s), a managed key only its own."""
    key_name = _usage_scope()
    entries = manage.usage_since(_book(), _since(), key_name)
    by = _group_by()
    return jsonify({"object": "list", "data": [as_json(entry) for entry in (summed(entries, by) if by else entries)]})


def _since() -> float:
    try:
        return duration(request.args.get("since", "7d"))
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="since") from None


def _group_by() -> tuple[str, ...] | None:
    by = request.args.get("by")
    if not by:
        return None
    groups = tuple(name.strip() for name in by.split(","))
    unknown = [name for name in groups if name not in GROUPS]
    if unknown:
        raise InvalidRequest(f"by: unknown groups {unknown}; use {', '.join(GROUPS)}", param="by")
    return groups
