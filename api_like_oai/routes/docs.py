"""/openapi.json made from the routes the app registered (app.url_map), each documented by its API's
descriptor (routes/apis.py) or the proxy's own table below, with the pydantic models of requests and
answers; and /docs (Swagger UI, offline). tests/unit/test_openapi.py holds the two equal: every public
route is documented, nothing is documented that is not registered."""

from __future__ import annotations

import re

from flask import Blueprint, Flask, Response, current_app, jsonify, send_from_directory
from openapi_ui_bundles import swagger_ui
from pydantic.json_schema import models_json_schema

from .. import answers as o
from .. import protocol as p
from ..batch import models as batch_models
from ..version import __version__
from .apis import APIS, Endpoint, api_of

bp = Blueprint("docs", __name__)

# Registered, not documented: the document itself, its page, and the files of its page and the dashboard's.
UNDOCUMENTED = frozenset({"/openapi.json", "/docs", "/docs/static/{filename}", "/static/{filename}", "/ui", "/ui/", "/ui/{name}"})
DOCUMENT_KEY = "api_like_oai.openapi"


def endpoints() -> list[Endpoint]:
    """Every documented route: each API's (its descriptor's), then the proxy's own. A function, so that
    the dialects' models are imported when the document is first asked for, not when the app is built
    (idle memory, benchmarks/PROFILE.md)."""
    return (
        [endpoint for api in APIS for endpoint in api.endpoints()]
        + _model_endpoints()
        + _model_load_endpoints()
        + _internal_endpoints()
        + _conversation_endpoints()
        + _key_endpoints()
        + _relayed_endpoints()
        + batch_models.endpoints()
    )


def _model_endpoints() -> list[Endpoint]:
    """The models, embeddings, reranking, speech and the health check."""
    from ..dialects import rerank as rr

    return [
        ("get", "/health", "200 when every upstream answers its health check, else 503 saying why (public)", None, None),
        ("get", "/metrics", "Prometheus metrics (the admin key once one is configured)", None, None),
        (
            "get",
            "/metrics/pool",
            "Each started model's requests waiting and running and KV-cache use, for an inference pool's endpoint "
            "picker (public with --open-pool-metrics, else as /metrics)",
            None,
            None,
        ),
        ("get", "/api/hello", "Claude Code's connectivity probe (public)", None, None),
        ("post", "/v1/embeddings", "Embeddings (llama-server must run with --embeddings)", p.EmbeddingRequest, o.EmbeddingList),
        (
            "post",
            "/v1/rerank",
            "Rerank documents by relevance to a query (Jina's and Cohere's shape; the model's "
            "llama-server runs with --reranking)",
            rr.RerankRequest,
            rr.RerankList,
        ),
        (
            "post",
            "/v1/audio/transcriptions",
            "Speech to text (multipart form, OpenAI's shape), by llama-server's own",
            None,
            None,
        ),
        ("post", "/v1/audio/translations", "Speech to English text (multipart form, OpenAI's shape)", None, None),
        ("post", "/v1/audio/speech", "Text to speech (OpenAI's shape)", None, None),
        ("get", "/v1/models", "The served models", None, o.ModelList),
        ("get", "/v1/models/{model_id}", "One served model", None, o.ModelCard),
    ]


def _model_load_endpoints() -> list[Endpoint]:
    """Loading and unloading the models the proxy starts, and what they say."""
    return [
        (
            "post",
            "/v1/internal/model/load",
            "Load a model the proxy starts (waits until loaded)",
            p.ModelLoadRequest,
            o.ModelLoadResponse,
        ),
        (
            "post",
            "/v1/internal/model/unload",
            "Unload a model the proxy starts (waits for its requests, then stops it)",
            p.ModelLoadRequest,
            o.ModelLoadResponse,
        ),
        ("post", "/models/load", "llama.cpp router mode's load (`model`)", p.ModelLoadRequest, o.ModelLoadResponse),
        ("post", "/models/unload", "llama.cpp router mode's unload (`model`)", p.ModelLoadRequest, o.ModelLoadResponse),
        ("get", "/v1/internal/model/list", "text-generation-webui's list: the names of the models the proxy starts", None, None),
        ("get", "/v1/internal/model/logs", "A model's llama-server's last lines", None, None),
        ("get", "/v1/internal/models/events", "Server-sent events: the models' status, then each change", None, None),
        ("get", "/v1/internal/model/info", "The model's template, context and upstreams", None, None),
    ]


def _internal_endpoints() -> list[Endpoint]:
    """The prompt, tokens, requests in flight and the dashboard's stream."""
    return [
        (
            "post",
            "/v1/internal/chat-prompt",
            "The prompt a chat request would send, without generating",
            p.ChatCompletionRequest,
            o.ChatPromptResponse,
        ),
        ("post", "/v1/internal/encode", "Tokenize text", p.EncodeRequest, o.EncodeResponse),
        ("post", "/v1/internal/decode", "Detokenize token ids", p.DecodeRequest, o.DecodeResponse),
        ("post", "/v1/internal/token-count", "Count tokens", p.EncodeRequest, o.TokenCountResponse),
        ("post", "/v1/internal/stop-generation", "End every generation in flight", None, o.StopGenerationResponse),
        ("get", "/v1/internal/requests", "This worker's requests in flight and their phase", None, o.LiveRequestList),
        ("post", "/v1/internal/requests/{request_id}/stop", "End one request's generation now", None, None),
        ("get", "/v1/internal/events", "The dashboard's stream: live requests every second, history when it changed", None, None),
        ("get", "/v1/fleet/status", "The fleet's boxes and models (with --fleet)", None, None),
        ("post", "/v1/fleet/pool", "Load a model across a box and its lenders (with --fleet)", None, None),
        ("post", "/v1/fleet/load", "Start one more copy of a model kept on several boxes (with --fleet)", None, None),
    ]


def _relayed_endpoints() -> list[Endpoint]:
    """llama.cpp's own API, relayed to the model's llama-server as it is (off with --no-native-api)."""
    from .native import ROUTES

    return [
        (
            method.lower(),
            path,
            f"llama.cpp's own {upstream_path}, relayed as it is (`model` in the body or the query names the model)",
            None,
            None,
        )
        for method, path, upstream_path in ROUTES
    ]


def _conversation_endpoints() -> list[Endpoint]:
    """endpoints()' stored conversations and their items."""
    from ..dialects import conversations as s

    return [
        ("post", "/v1/conversations", "Create a conversation", s.ConversationCreate, s.Conversation),
        ("get", "/v1/conversations/{conversation_id}", "A conversation", None, s.Conversation),
        ("post", "/v1/conversations/{conversation_id}", "Update a conversation's metadata", s.ConversationUpdate, s.Conversation),
        ("delete", "/v1/conversations/{conversation_id}", "Delete a conversation", None, s.ConversationDeleted),
        ("get", "/v1/conversations/{conversation_id}/items", "A conversation's items", None, s.ItemList),
        ("post", "/v1/conversations/{conversation_id}/items", "Add items to a conversation", s.ItemsCreate, s.ItemList),
        ("get", "/v1/conversations/{conversation_id}/items/{item_id}", "One item of a conversation", None, s.Item),
        (
            "delete",
            "/v1/conversations/{conversation_id}/items/{item_id}",
            "Delete an item (answers the conversation)",
            None,
            s.Conversation,
        ),
    ]


def _key_endpoints() -> list[Endpoint]:
    """endpoints()' managed keys and usage."""
    from ..access import manage as k

    return [
        ("get", "/v1/internal/keys", "Managed keys (admin key only)", None, k.KeyList),
        ("post", "/v1/internal/keys", "Create a managed key; the answer shows it once (admin key only)", k.NewKey, k.CreatedKey),
        ("get", "/v1/internal/keys/{name}", "One managed key (admin key only)", None, k.KeyView),
        (
            "patch",
            "/v1/internal/keys/{name}",
            "Change a key's models, limits or expiry (admin key only)",
            k.KeyChanges,
            k.KeyView,
        ),
        ("delete", "/v1/internal/keys/{name}", "Revoke a key, on every instance (admin key only)", None, k.KeyView),
        (
            "get",
            "/v1/internal/usage",
            "Usage per key, model, API and day (an admin key: all; a managed key: its own)",
            None,
            k.UsageList,
        ),
        (
            "get",
            "/v1/organization/usage/completions",
            "OpenAI's usage API for completions: daily buckets from start_time, group_by api_key_id (the key's name) and model",
            None,
            k.OpenAIUsagePage,
        ),
        (
            "get",
            "/v1/organization/usage/audio_transcriptions",
            "OpenAI's usage API for speech to text: the seconds transcribed or translated per day, grouped as for completions",
            None,
            k.OpenAIAudioUsagePage,
        ),
    ]


def queries() -> dict:
    """The operations that take a list's query (limit, after, order), described by its model."""
    from ..access import manage as k
    from ..dialects import conversations as s

    return {
        "/v1/responses/{response_id}/input_items": s.ItemListQuery,
        "/v1/conversations/{conversation_id}/items": s.ItemListQuery,
        "/v1/internal/usage": k.UsageQuery,
        "/v1/organization/usage/completions": k.OpenAIUsageQuery,
        "/v1/organization/usage/audio_transcriptions": k.OpenAIUsageQuery,
        **batch_models.queries(),
    }


STREAM_MODELS = [o.ChatCompletionChunk]
ERROR_STATUSES = {
    "400": "Invalid request",
    "401": "Missing or wrong API key",
    "403": "A route the key may not use",
    "404": "Unknown route or model",
    "413": "Body too large",
    "429": "A key over one of its limits (Retry-After)",
    "500": "Internal error",
    "502": "Bad upstream answer",
    "503": "Upstream unavailable or loading",
    "504": "Upstream timeout",
}


def registered(app: Flask) -> list[tuple[str, str, str]]:
    """(method, path as the document writes it, view) of every public route the app registered."""
    found = []
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?(\w+)>", r"{\1}", rule.rule)
        if path not in UNDOCUMENTED:
            found += [(method.lower(), path, rule.endpoint) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return found


def documentation(app: Flask) -> dict[tuple[str, str], tuple[Endpoint | None, str | None]]:
    """Each registered route's (documentation, the path it is an alias of): its own entry, else the entry
    of another path of the same view (`/chat/completions` is `/v1/chat/completions`); (None, None) for
    a route nobody documented."""
    table = {(method, path): endpoint for endpoint in endpoints() for method, path in [endpoint[:2]]}
    routes = registered(app)
    by_view = {(method, view): table[method, path] for method, path, view in routes if (method, path) in table}
    found = {}
    for method, path, view in routes:
        entry = table.get((method, path)) or by_view.get((method, view))
        found[method, path] = (entry, None if entry is None or entry[1] == path else entry[1])
    return found


def openapi_document(app: Flask) -> dict:
    """The document of `app`'s routes, made once per app."""
    if DOCUMENT_KEY not in app.extensions:
        app.extensions[DOCUMENT_KEY] = _document(documentation(app))
    return app.extensions[DOCUMENT_KEY]


def _document(documented: dict) -> dict:
    entries = [entry for entry, _ in documented.values() if entry is not None]
    models = {m for _, _, _, request, response in entries for m in (request, response) if m}
    models |= {*(_resolved(api.error_model) for api in APIS), *STREAM_MODELS}
    modes = [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)]
    _, schemas = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    paths: dict = {}
    for (method, path), (entry, alias_of) in sorted(documented.items(), key=lambda item: item[0][1]):
        summary = entry[2] if entry is not None else "Not documented"
        if alias_of is not None:
            summary = f"{summary} (the same as {alias_of})"
        paths.setdefault(path, {})[method] = _operation(path, summary, *(entry[3:] if entry else (None, None)))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "api_like_oai",
            "version": __version__,
            "description": "OpenAI-compatible API in front of llama.cpp's server.",
        },
        "paths": paths,
        "components": {"schemas": schemas.get("$defs", {}), "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
    }


def _resolved(name: str):
    """The object a descriptor names, "module:attribute"."""
    from importlib import import_module

    module, _, attribute = name.partition(":")
    return import_module(module).__dict__[attribute]


def _ref(model) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(path: str, summary: str, request, response) -> dict:
    api = api_of(path)
    statuses = {code: text for code, text in ERROR_STATUSES.items() if code != "503"}
    statuses[str(api.unavailable_status)] = ERROR_STATUSES["503"]
    error = {"description": "", "content": {"application/json": {"schema": _ref(_resolved(api.error_model))}}}
    answer = {"description": "OK"}
    if response is not None:
        answer["content"] = {"application/json": {"schema": _ref(response)}}
    operation = {
        "summary": summary,
        "responses": {"200": answer, **{code: {**error, "description": text} for code, text in statuses.items()}},
    }
    if request is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(request)}}}
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in re.findall(r"{(\w+)}", path)
    ]
    parameters += _query_parameters(queries().get(path))
    if parameters:
        operation["parameters"] = parameters
    return operation


def _query_parameters(query_model) -> list[dict]:
    if query_model is None:
        return []
    schema = query_model.model_json_schema()
    return [
        {"name": name, "in": "query", "required": False, "schema": _plain(field)} for name, field in schema["properties"].items()
    ]


def _plain(field_schema: dict) -> dict:
    """A query field's schema without its title, an optional string as a plain string."""
    field_schema = {
        key: value for key, value in field_schema.items() if key != "title" and not (key == "default" and value is None)
    }
    options = field_schema.pop("anyOf", None)
    return field_schema | (next(o for o in options if o.get("type") != "null") if options else {})


@bp.get("/openapi.json")
def openapi_json():
    return jsonify(openapi_document(current_app))


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
