"""Reranking: a rerank request admitted like any other (the route did: key, model, limits), held to the
key's token limits by its documents' size, sent to the model's llama-server (`/v1/rerank`) or, for a
`kind: openai` model, to its upstream as it is; its tokens counted as prompt tokens."""

from __future__ import annotations

from ..access.gate import Ticket
from ..backends.upstream import Upstream
from ..dialects import rerank as shape
from ..errors import UpstreamError
from ..observability import RequestRecord
from .admission import capability_mismatch
from .models import ServedModel
from .passthrough import passthrough


def rerank(
    rerank_request: shape.RerankRequest,
    model: ServedModel,
    model_name: str,
    record: RequestRecord | None,
    ticket: Ticket | None = None,
    door: Upstream | None = None,
) -> dict:
    """The answer in Jina's shape (Cohere's clients read it too); a 400 naming the model's capabilities
    if it is known not to rank. `ticket`: the request's key, whose token limits the documents must fit;
    `door`: the model's upstream as the request goes through it (the model's own without one)."""
    if model.upstream.capabilities.passes_through:
        return passthrough(rerank_request, model, model_name, "/rerank", record)
    if model.reranks() is False:
        raise capability_mismatch(model, model_name, "rerank")
    door = door or model.upstream
    body = shape.upstream_body(rerank_request)
    _hold_tokens(body, door, ticket)
    upstream = door.rerank(body)
    if not _well_formed(upstream):
        raise UpstreamError(f"the reranker of model {model.name!r} answered something that is not a rerank result")
    answer = shape.answer(rerank_request, upstream, model_name)
    if record is not None:
        record.count(answer["usage"]["prompt_tokens"], 0)
    return answer


def _hold_tokens(body: dict, door: Upstream, ticket: Ticket | None) -> None:
    """The request's documents and query (each document is read with the query) must fit what is left of
    the key's token limits: their bytes bound their tokens, llama.cpp's /tokenize counts when they do not
    fit (a 429 before the reranker works)."""
    if ticket is None:
        return
    query, documents = body["query"], body["documents"]
    size = sum(len(text.encode()) for text in documents) + len(query.encode()) * len(documents)
    ticket.before_generation(size, lambda: sum(len(door.tokenize(query + text)) for text in documents))


def _well_formed(upstream) -> bool:
    results = upstream.get("results") if isinstance(upstream, dict) else None
    return isinstance(results, list) and all(
        isinstance(result, dict)
        and isinstance(result.get("index"), int)
        and isinstance(result.get("relevance_score"), int | float)
        for result in results
    )
