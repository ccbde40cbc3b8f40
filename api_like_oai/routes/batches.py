"""OpenAI's Batch API: POST /v1/batches, GET /v1/batches[/{id}], POST /v1/batches/{id}/cancel
(batch/batches.py; the runner is batch/runner.py)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from ..batch import batches
from ..batch.models import BatchCreate, BatchListQuery
from . import current_caller, parse_body
from .files import list_query
from .scope import admitted_scope

bp = Blueprint("batches", __name__)


@bp.post("/v1/batches")
def create():
    scope = admitted_scope()
    return jsonify(batches.create(scope, parse_body(BatchCreate), current_caller().name))


@bp.get("/v1/batches")
def listing():
    return jsonify(batches.listing(admitted_scope(), list_query(BatchListQuery)))


@bp.get("/v1/batches/<batch_id>")
def retrieve(batch_id: str):
    return jsonify(batches.retrieve(admitted_scope(), batch_id))


@bp.post("/v1/batches/<batch_id>/cancel")
def cancel(batch_id: str):
    return jsonify(batches.cancel(admitted_scope(), batch_id))
