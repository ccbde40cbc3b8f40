"""Reranking (Jina's and Cohere's `/v1/rerank`, llama-server's paths for it): parse, admit, rank."""

from __future__ import annotations

from flask import Blueprint, g

from ..dialects.rerank import RerankList, RerankRequest
from ..services.rerank import rerank
from . import door, lookup_model, parse_body, respond
from .declare import KEY, route

bp = Blueprint("rerank", __name__)


@route(
    bp,
    "/v1/rerank",
    "/rerank",
    "/v1/reranking",
    "/v2/rerank",  # Cohere's v2 client (ClientV2.rerank)
    summary="Rerank documents by relevance to a query (Jina's and Cohere's shape; the model's llama-server runs "
    "with --reranking)",
    access=KEY,
    request=RerankRequest,
    answer=RerankList,
    body="json",
    model_in="json",
    metered="tokens",
    refusals=("context_length_exceeded", "model_not_supported"),
)
def create_rerank():
    rerank_request = parse_body(RerankRequest)
    model, model_name = lookup_model(rerank_request.model)
    return respond(rerank(rerank_request, model, model_name, g.get("record"), g.get("ticket"), door(model)))
