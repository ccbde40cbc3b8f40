"""/openapi.json generated from the pydantic models of requests and answers (protocol.py, answers.py,
dialects/), and /docs (Swagger UI, offline)."""

from __future__ import annotations

import functools
import re

from flask import Blueprint, Response, jsonify, send_from_directory
from openapi_ui_bundles import swagger_ui
from pydantic.json_schema import models_json_schema

from .. import __version__
from .. import answers as o
from .. import protocol as p

bp = Blueprint("docs", __name__)


@functools.lru_cache(maxsize=1)
def endpoints() -> list[tuple]:
    """(method, path, summary, request model, response model); the one list the document is made from.
    A function, so that the dialects' models are imported when the document is first asked for, not
    when the app is built (idle memory, benchmarks/PROFILE.md)."""
    from ..dialects import anthropic as a
    from ..dialects import anthropic_answers as aa
    from ..dialects import conversations as s
    from ..dialects import rerank as rr
    from ..dialects import responses as r
    from ..dialects import responses_answers as ra

    return [
        ("post", "/v1/chat/completions", "Chat completion (set stream for server-sent events of ChatCompletionChunk)",
         p.ChatCompletionRequest, o.ChatCompletion),
        ("post", "/v1/completions", "Text completion (suffix: fill-in-the-middle through llama.cpp /infill)",
         p.CompletionRequest, o.Completion),
        ("post", "/v1/embeddings", "Embeddings (llama-server must run with --embeddings)", p.EmbeddingRequest, o.EmbeddingList),
        ("post", "/v1/rerank", "Rerank documents by relevance to a query (Jina's and Cohere's shape; also /rerank, "
         "/v1/reranking; the model's llama-server runs with --reranking)", rr.RerankRequest, rr.RerankList),
        ("get", "/v1/models", "The served models", None, o.ModelList),
        ("get", "/v1/models/{model_id}", "One served model", None, o.ModelCard),
        ("post", "/v1/internal/chat-prompt", "The prompt a chat request would send, without generating",
         p.ChatCompletionRequest, o.ChatPromptResponse),
        ("post", "/v1/internal/encode", "Tokenize text", p.EncodeRequest, o.EncodeResponse),
        ("post", "/v1/internal/decode", "Detokenize token ids", p.DecodeRequest, o.DecodeResponse),
        ("post", "/v1/internal/token-count", "Count tokens", p.EncodeRequest, o.TokenCountResponse),
        ("post", "/v1/internal/stop-generation", "End every generation in flight", None, o.StopGenerationResponse),
        ("get", "/v1/internal/requests", "This worker's requests in flight and their phase", None, o.LiveRequestList),
        ("post", "/v1/internal/model/load", "Load a model the proxy starts (waits until loaded)",
         p.ModelLoadRequest, o.ModelLoadResponse),
        ("post", "/v1/internal/model/unload", "Unload a model the proxy starts (waits for its requests, then stops it)",
         p.ModelLoadRequest, o.ModelLoadResponse),
        ("post", "/models/load", "llama.cpp router mode's load (`model`)", p.ModelLoadRequest, o.ModelLoadResponse),
        ("post", "/models/unload", "llama.cpp router mode's unload (`model`)", p.ModelLoadRequest, o.ModelLoadResponse),
        ("post", "/v1/messages", "Anthropic Messages API (set stream for its named events; ?beta=true accepted)",
         a.MessagesRequest, aa.MessageResponse),
        ("post", "/v1/messages/count_tokens", "Anthropic Messages API: the prompt's token count",
         a.CountTokensRequest, aa.TokenCount),
        ("post", "/v1/responses", "OpenAI Responses API (set stream for its named events; store, previous_response_id "
         "and conversation keep and continue turns)", r.ResponsesRequest, ra.ResponseObject),
        ("post", "/v1/responses/input_tokens", "OpenAI Responses API: the prompt's token count",
         r.ResponsesRequest, ra.InputTokenCount),
        ("get", "/v1/responses/{response_id}", "A stored response, as it was answered", None, ra.ResponseObject),
        ("delete", "/v1/responses/{response_id}", "Delete a stored response", None, s.ResponseDeleted),
        ("get", "/v1/responses/{response_id}/input_items", "A stored response's input items (with the turns it continued)",
         None, s.ItemList),
        *_stored_and_key_endpoints(),
    ]


def _stored_and_key_endpoints() -> list[tuple]:
    """endpoints()' conversations, managed keys and usage."""
    from ..access import manage as k
    from ..dialects import conversations as s

    return [
        ("post", "/v1/conversations", "Create a conversation", s.ConversationCreate, s.Conversation),
        ("get", "/v1/conversations/{conversation_id}", "A conversation", None, s.Conversation),
        ("post", "/v1/conversations/{conversation_id}", "Update a conversation's metadata", s.ConversationUpdate,
         s.Conversation),
        ("delete", "/v1/conversations/{conversation_id}", "Delete a conversation", None, s.ConversationDeleted),
        ("get", "/v1/conversations/{conversation_id}/items", "A conversation's items", None, s.ItemList),
        ("post", "/v1/conversations/{conversation_id}/items", "Add items to a conversation", s.ItemsCreate, s.ItemList),
        ("get", "/v1/conversations/{conversation_id}/items/{item_id}", "One item of a conversation", None, s.Item),
        ("delete", "/v1/conversations/{conversation_id}/items/{item_id}", "Delete an item (answers the conversation)",
         None, s.Conversation),
        ("get", "/v1/internal/keys", "Managed keys (admin key only)", None, k.KeyList),
        ("post", "/v1/internal/keys", "Create a managed key; the answer shows it once (admin key only)",
         k.NewKey, k.CreatedKey),
        ("get", "/v1/internal/keys/{name}", "One managed key (admin key only)", None, k.KeyView),
        ("patch", "/v1/internal/keys/{name}", "Change a key's models, limits or expiry (admin key only)",
         k.KeyChanges, k.KeyView),
        ("delete", "/v1/internal/keys/{name}", "Revoke a key, on every instance (admin key only)", None, k.KeyView),
        ("get", "/v1/internal/usage", "Usage per key, model, API and day (an admin key: all; a managed key: its own)",
         None, k.UsageList),
        ("get", "/v1/organization/usage/completions", "OpenAI's usage API for completions: daily buckets from "
         "start_time, group_by api_key_id (the key's name) and model", None, k.OpenAIUsagePage),
        ("get", "/v1/organization/usage/audio_transcriptions", "OpenAI's usage API for speech to text: the "
         "seconds transcribed or translated per day, grouped as for completions", None, k.OpenAIAudioUsagePage),
    ]


def queries() -> dict:
    """The operations that take a list's query (limit, after, order), described by its model."""
    from ..access import manage as k
    from ..dialects import conversations as s

    return {"/v1/responses/{response_id}/input_items": s.ItemListQuery,
            "/v1/conversations/{conversation_id}/items": s.ItemListQuery, "/v1/internal/usage": k.UsageQuery,
            "/v1/organization/usage/completions": k.OpenAIUsageQuery,
            "/v1/organization/usage/audio_transcriptions": k.OpenAIUsageQuery}


STREAM_MODELS = [o.ChatCompletionChunk]
ERROR_STATUSES = {"400": "Invalid request", "401": "Missing or wrong API key", "403": "A route the key may not use",
                  "404": "Unknown route or model", "413": "Body too large",
                  "429": "A key over one of its limits (Retry-After)", "500": "Internal error", "502": "Bad upstream answer",
                  "503": "Upstream unavailable or loading", "504": "Upstream timeout"}
# Anthropic's paths answer errors in Anthropic's shape, an upstream that is down with its 529.
ANTHROPIC_ERROR_STATUSES = {**{code: text for code, text in ERROR_STATUSES.items() if code != "503"},
                            "529": "Upstream unavailable or loading (overloaded_error)"}


@functools.lru_cache(maxsize=1)
def openapi_document() -> dict:
    from ..dialects.anthropic_answers import AnthropicErrorResponse

    models = {m for _, _, _, request, response in endpoints() for m in (request, response) if m}
    models |= {o.ErrorResponse, AnthropicErrorResponse, *STREAM_MODELS}
    modes = [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)]
    _, schemas = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    paths: dict = {}
    for method, path, summary, request, response in endpoints():
        paths.setdefault(path, {})[method] = _operation(path, summary, request, response)
    return {"openapi": "3.1.0",
            "info": {"title": "api_like_oai", "version": __version__,
                     "description": "OpenAI-compatible API in front of llama.cpp's server."},
            "paths": paths, "components": {"schemas": schemas.get("$defs", {}),
                                           "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}, {}]}


def _ref(model) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(path: str, summary: str, request, response) -> dict:
    from ..dialects.anthropic_answers import AnthropicErrorResponse

    anthropic = path.startswith("/v1/messages")
    error_model, statuses = (AnthropicErrorResponse, ANTHROPIC_ERROR_STATUSES) if anthropic \
        else (o.ErrorResponse, ERROR_STATUSES)
    error = {"description": "", "content": {"application/json": {"schema": _ref(error_model)}}}
    operation = {"summary": summary,
                 "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(response)}}},
                               **{code: {**error, "description": text} for code, text in statuses.items()}}}
    if request is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(request)}}}
    parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in re.findall(r"{(\w+)}", path)]
    parameters += _query_parameters(queries().get(path))
    if parameters:
        operation["parameters"] = parameters
    return operation


def _query_parameters(query_model) -> list[dict]:
    if query_model is None:
        return []
    schema = query_model.model_json_schema()
    return [{"name": name, "in": "query", "required": False, "schema": _plain(field)}
            for name, field in schema["properties"].items()]


def _plain(field_schema: dict) -> dict:
    """A query field's schema without its title, an optional string as a plain string."""
    field_schema = {key: value for key, value in field_schema.items()
                    if key != "title" and not (key == "default" and value is None)}
    options = field_schema.pop("anyOf", None)
    return field_schema | (next(o for o in options if o.get("type") != "null") if options else {})


@bp.get("/openapi.json")
def openapi_json():
    return jsonify(openapi_document())


DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>api_like_oai</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui"});</script>
</body></html>"""


@bp.get("/docs")
def docs_page():
    return Response(DOCS_PAGE, mimetype="text/html")


@bp.get("/docs/static/<path:filename>")
def docs_static(filename: str):
    return send_from_directory(swagger_ui.static_path, filename)
