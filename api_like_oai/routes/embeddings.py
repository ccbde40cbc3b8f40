from __future__ import annotations

import base64
import struct

from flask import Blueprint, g, jsonify

from ..answers import EmbeddingList
from ..protocol import EmbeddingRequest
from ..services.passthrough import passthrough
from . import door, lookup_model, parse_body, respond
from .declare import KEY, route

bp = Blueprint("embeddings", __name__)


@route(
    bp,
    "/v1/embeddings",
    "/embeddings",
    summary="Embeddings (llama-server must run with --embeddings)",
    access=KEY,
    request=EmbeddingRequest,
    answer=EmbeddingList,
    body="json",
    model_in="json",
    metered="tokens",
    refusals=("context_length_exceeded", "model_not_supported", "not_supported"),
)
def create_embeddings():
    embedding_request = parse_body(EmbeddingRequest)
    model, model_name = lookup_model(embedding_request.model)
    if model.upstream.capabilities.passes_through:
        return respond(passthrough(embedding_request, model, model_name, "/embeddings", g.get("record")))
    inputs = embedding_request.input
    inputs = [inputs] if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)) else list(inputs)
    upstream = door(model)
    vectors = upstream.embeddings(inputs)
    prompt_tokens = sum(len(i) if isinstance(i, list) else len(upstream.tokenize(i)) for i in inputs)
    as_base64 = embedding_request.encoding_format == "base64"
    return jsonify(
        {
            "object": "list",
            "model": model_name,
            "data": [
                {"object": "embedding", "index": index, "embedding": _base64(vector) if as_base64 else vector}
                for index, vector in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


def _base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
