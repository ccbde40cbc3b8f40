"""Reranking (`/v1/rerank`): the request Jina's and Cohere's clients send, what llama-server's own
`/v1/rerank` is sent, and its answer in their shape (pure, no I/O).

llama-server takes documents as strings only and knows no `return_documents`: documents given as
`{"text": ...}` objects are sent as their text, and the answer gets each result's document back here
(`{"text": ...}`, as Jina and Cohere return it) when the request asks for it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag

from ..protocol import STRICT


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)

    text: StrictStr


# A string or an object, told apart by type: an error names the field inside the object ("documents.0.text";
# routes name a union's branch only by these tags, which admission.invalid_request leaves out).
Document = Annotated[
    Annotated[StrictStr, Tag("str")] | Annotated[RerankDocument, Tag("dict")],
    Discriminator(lambda value: "str" if isinstance(value, str) else "dict"),
]


class RerankRequest(BaseModel):
    """Jina's `/v1/rerank` request (Cohere's v2 is the same fields): the query, the documents to order by
    relevance to it, how many of the best to return and whether to return their text."""

    model_config = ConfigDict(extra="forbid", **STRICT)

    model: str | None = None
    query: StrictStr
    documents: list[Document] = Field(
        ..., min_length=1, description="The texts to rank: strings, or objects with `text` (Jina, Cohere)"
    )
    top_n: int | None = Field(None, ge=1, description="Only the best top_n results (default: all)")
    return_documents: bool | None = Field(
        None, description="Each result carries its document as {\"text\"} (Jina's default: true; Cohere's: false)"
    )

    def texts(self) -> list[str]:
        return [document if isinstance(document, str) else document.text for document in self.documents]


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankList(BaseModel):
    """The answer (Jina's shape; Cohere's clients read `results` and `index`/`relevance_score` alike)."""

    model: str
    object: Literal["list"]
    usage: dict[str, int]
    results: list[RerankResult]


def upstream_body(rerank_request: RerankRequest) -> dict:
    """What llama-server's `/v1/rerank` is sent: the query, the documents' texts and top_n."""
    body = {"query": rerank_request.query, "documents": rerank_request.texts()}
    if rerank_request.top_n is not None:
        body["top_n"] = rerank_request.top_n
    return body


def answer(rerank_request: RerankRequest, upstream: dict, model_name: str) -> dict:
    """llama-server's answer as the client's: sorted by score (best first), cut to top_n, each result with
    its document when asked for (by default, as Jina does: `return_documents` unset), with the usage."""
    texts = rerank_request.texts()
    results = sorted(upstream.get("results") or (), key=lambda result: -result["relevance_score"])
    if rerank_request.top_n is not None:
        results = results[: rerank_request.top_n]
    with_documents = rerank_request.return_documents is not False
    usage = upstream.get("usage") or {}
    return {
        "model": model_name,
        "object": "list",
        "usage": {"prompt_tokens": usage.get("prompt_tokens", 0), "total_tokens": usage.get("total_tokens", 0)},
        "results": [_result(result, texts, with_documents) for result in results],
    }


def _result(result: dict, texts: list[str], with_document: bool) -> dict:
    shaped = {"index": result["index"], "relevance_score": result["relevance_score"]}
    if with_document and 0 <= result["index"] < len(texts):
        shaped["document"] = {"text": texts[result["index"]]}
    return shaped
