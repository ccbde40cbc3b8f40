"""OpenAI's Batch API: POST /v1/batches, GET /v1/batches[/{id}], POST /v1/batches/{id}/cancel
(batch/batches.py; the runner is batch/runner.py)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..batch import batches
from ..batch.models import BatchCreate, BatchListQuery
from . import current_caller, parse_body
from .declare import OWN, route
from .files import list_query
from .scope import admitted_scope

bp = Blueprint("batches", __name__)


@route(
    bp,
    "/v1/batches",
    summary="Create a batch of requests from a file, run in the background",
    access=OWN,
    request="api_like_oai.batch.models:BatchCreate",
    answer="api_like_oai.batch.models:Batch",
    body="json",
    metered="requests",
)
def create():
    scope = admitted_scope()
    return jsonify(batches.create(scope, parse_body(BatchCreate), current_caller().name))


@route(
    bp,
    "/v1/batches",
    methods=("GET",),
    summary="The key's batches, newest first",
    access=OWN,
    answer="api_like_oai.batch.models:BatchList",
    query="api_like_oai.batch.models:BatchListQuery",
    metered="requests",
)
def listing():
    return jsonify(batches.listing(admitted_scope(), list_query(BatchListQuery)))


@route(
    bp,
    "/v1/batches/<batch_id>",
    methods=("GET",),
    summary="A batch",
    access=OWN,
    answer="api_like_oai.batch.models:Batch",
    metered="requests",
)
def retrieve(batch_id: str):
    return jsonify(batches.retrieve(admitted_scope(), batch_id))


@route(
    bp,
    "/v1/batches/<batch_id>/cancel",
    summary="Cancel a batch",
    access=OWN,
    answer="api_like_oai.batch.models:Batch",
    metered="requests",
)
def cancel(batch_id: str):
    return jsonify(batches.cancel(admitted_scope(), batch_id))
