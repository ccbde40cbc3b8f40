"""Anthropic's Message Batches: /v1/messages/batches (batch/message_batches.py, over the batch runner).
Errors on these paths are Anthropic's (its descriptor's prefix, routes/apis.py)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from ..batch import message_batches
from ..batch.models import MessageBatchCreate, MessageBatchListQuery
from . import current_caller, parse_body
from .files import list_query
from .scope import admitted_scope

bp = Blueprint("message_batches", __name__)


def _base_url() -> str:
    """The proxy as the client reached it: a batch's results_url is under it."""
    return request.host_url.rstrip("/")


@bp.post("/v1/messages/batches")
def create():
    scope = admitted_scope()
    return jsonify(message_batches.create(scope, parse_body(MessageBatchCreate), _base_url(), current_caller().name))


@bp.get("/v1/messages/batches")
def listing():
    return jsonify(message_batches.listing(admitted_scope(), list_query(MessageBatchListQuery), _base_url()))


@bp.get("/v1/messages/batches/<batch_id>")
def retrieve(batch_id: str):
    return jsonify(message_batches.retrieve(admitted_scope(), batch_id, _base_url()))


@bp.post("/v1/messages/batches/<batch_id>/cancel")
def cancel(batch_id: str):
    return jsonify(message_batches.cancel(admitted_scope(), batch_id, _base_url()))


@bp.delete("/v1/messages/batches/<batch_id>")
def delete(batch_id: str):
    return jsonify(message_batches.delete(admitted_scope(), batch_id))


@bp.get("/v1/messages/batches/<batch_id>/results")
def results(batch_id: str):
    return Response(message_batches.results(admitted_scope(), batch_id), mimetype="application/x-jsonl")
