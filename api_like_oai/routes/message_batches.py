"""Anthropic's Message Batches: /v1/messages/batches (batch/message_batches.py, over the batch runner).
Errors on these paths are Anthropic's (its descriptor's prefix, routes/apis.py), and its views are the
Anthropic blueprint's (app.create_app registers it; importing this module adds these)."""

from __future__ import annotations

from flask import Response, jsonify, request

from ..batch import message_batches
from ..batch.models import MessageBatchCreate, MessageBatchListQuery
from . import current_caller, parse_body
from .anthropic import bp  # its paths are under the Anthropic API's prefix: that blueprint's views
from .declare import OWN, route
from .files import list_query
from .scope import admitted_scope


def _base_url() -> str:
    """The proxy as the client reached it: a batch's results_url is under it."""
    return request.host_url.rstrip("/")


@route(
    bp,
    "/v1/messages/batches",
    summary="Create a Message Batch (Anthropic's), run in the background",
    access=OWN,
    request="api_like_oai.batch.models:MessageBatchCreate",
    answer="api_like_oai.batch.models:MessageBatch",
    body="json",
    metered="requests",
    refusals=("duplicate_item",),
)
def batch_create():
    scope = admitted_scope()
    return jsonify(message_batches.create(scope, parse_body(MessageBatchCreate), _base_url(), current_caller().name))


@route(
    bp,
    "/v1/messages/batches",
    methods=("GET",),
    summary="The key's Message Batches, newest first",
    access=OWN,
    answer="api_like_oai.batch.models:MessageBatchList",
    query="api_like_oai.batch.models:MessageBatchListQuery",
    metered="requests",
)
def batch_listing():
    return jsonify(message_batches.listing(admitted_scope(), list_query(MessageBatchListQuery), _base_url()))


@route(
    bp,
    "/v1/messages/batches/<batch_id>",
    methods=("GET",),
    summary="A Message Batch",
    access=OWN,
    answer="api_like_oai.batch.models:MessageBatch",
    metered="requests",
)
def batch_retrieve(batch_id: str):
    return jsonify(message_batches.retrieve(admitted_scope(), batch_id, _base_url()))


@route(
    bp,
    "/v1/messages/batches/<batch_id>/cancel",
    summary="Cancel a Message Batch",
    access=OWN,
    answer="api_like_oai.batch.models:MessageBatch",
    metered="requests",
)
def batch_cancel(batch_id: str):
    return jsonify(message_batches.cancel(admitted_scope(), batch_id, _base_url()))


@route(
    bp,
    "/v1/messages/batches/<batch_id>",
    methods=("DELETE",),
    summary="Delete an ended Message Batch",
    access=OWN,
    answer="api_like_oai.batch.models:MessageBatchDeleted",
    metered="requests",
)
def batch_delete(batch_id: str):
    return jsonify(message_batches.delete(admitted_scope(), batch_id))


@route(
    bp,
    "/v1/messages/batches/<batch_id>/results",
    methods=("GET",),
    summary="A Message Batch's results (JSONL)",
    access=OWN,
    media=("application/x-jsonl",),
    metered="requests",
)
def batch_results(batch_id: str):
    return Response(message_batches.results(admitted_scope(), batch_id), mimetype="application/x-jsonl")
