"""Reranking (Jina's and Cohere's `/v1/rerank`, llama-server's paths for it): parse, admit, rank."""

from __future__ import annotations

from flask import Blueprint, g

from ..dialects.rerank import RerankRequest
from ..services.rerank import rerank
from . import door, lookup_model, parse_body, respond

bp = Blueprint("rerank", __name__)


@bp.post("/v1/rerank")
@bp.post("/rerank")
@bp.post("/v1/reranking")
@bp.post("/v2/rerank")  # Cohere's v2 client (ClientV2.rerank)
def create_rerank():
    rerank_request = parse_body(RerankRequest)
    model, model_name = lookup_model(rerank_request.model)
    return respond(rerank(rerank_request, model, model_name, g.get("record"), g.get("ticket"), door(model)))
