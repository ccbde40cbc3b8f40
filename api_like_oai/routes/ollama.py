"""Ollama's API on its own paths (`/`, `/api/*`), so that clients made for a local Ollama work through
the proxy unchanged, keys, limits and models on demand included. Errors under /api/ are Ollama's
`{"error": "..."}` (its descriptor, routes/apis.py, says so); streams are NDJSON. The views parse and wrap; the
work is services/ollama.py's."""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify, request

from ..errors import ModelNotFound
from ..middleware import ON_CLOSE
from . import admission, current_caller, generation_context, parse_dialect, sees_everything, state
from .declare import ADMIN_KEY, GENERATES, KEY, OWN, PUBLIC, route

bp = Blueprint("ollama", __name__)

NDJSON = "application/x-ndjson"  # its streams' media type (dialects/ollama_shape.py's, not imported at start-up)
RUNNING = "Ollama is running"  # `/` and /api/version ask no key (its descriptor's `public`): they say only that it runs


def _service():
    from ..services.ollama import Ollama

    # keep_alive loads, pins or unloads a model every caller shares: it is honoured from a caller who may
    # load and unload (sees_everything), and ignored from any other (as on an upstream the proxy does not
    # start), not refused: Ollama's clients send it unasked.
    return Ollama(admission(), generation_context(), state().supervisor, _after_close, steers_models=sees_everything())


def named_model_schema() -> dict:
    """/api/show's and /api/delete's body as the view takes it (its document's schema): ModelRequest, with
    `model` or the older `name` a non-empty string (ModelRequest.named refuses a body naming neither)."""
    from ..dialects.ollama import ModelRequest

    schema = ModelRequest.model_json_schema()
    schema["anyOf"] = [
        {"required": [name], "properties": {name: {"type": "string", "minLength": 1}}} for name in ("model", "name")
    ]
    return schema


def _after_close(callback) -> None:
    """`callback` runs once the answer is closed, after the request's lease is released (OnClose runs
    the last registered first)."""
    request.environ[ON_CLOSE].insert(0, callback)


def _answer(answer, headers: dict | None = None) -> Response:
    """A dict as one JSON object; an iterator of lines as NDJSON."""
    from ..dialects.ollama_shape import NDJSON

    if isinstance(answer, dict):
        return Response(_json_line(answer), mimetype="application/json", headers=headers)
    return Response(answer, mimetype=NDJSON, headers=headers, direct_passthrough=True)


def _json_line(body: dict) -> bytes:
    from ..compact_json import json_bytes

    return json_bytes(body)


@route(
    bp, "/", methods=("GET", "HEAD"), summary="Ollama's probe: `Ollama is running` (public)", access=PUBLIC, media=("text/plain",)
)
def running():
    return Response(RUNNING, mimetype="text/plain")


@route(bp, "/api/version", methods=("GET", "HEAD"), summary="Ollama's version this answers as (public)", access=PUBLIC)
def version():
    from ..services.ollama import VERSION

    return jsonify({"version": VERSION})


@route(
    bp,
    "/api/chat",
    summary="Ollama chat (NDJSON stream by default; stream false: one object)",
    access=KEY,
    request="api_like_oai.dialects.ollama:ChatRequest",
    body="json",
    model_in="json",
    metered="tokens",
    stream=NDJSON,
    refusals=GENERATES,
)
def chat():
    from ..dialects.ollama import ChatRequest

    return _answer(*_service().chat(parse_dialect(ChatRequest)))


@route(
    bp,
    "/api/generate",
    summary="Ollama generate: templated as a chat turn, or raw / with suffix as a completion",
    access=KEY,
    request="api_like_oai.dialects.ollama:GenerateRequest",
    body="json",
    model_in="json",
    metered="tokens",
    stream=NDJSON,
)
def generate():
    from ..dialects.ollama import GenerateRequest

    return _answer(*_service().generate(parse_dialect(GenerateRequest)))


@route(
    bp,
    "/api/embed",
    summary="Ollama embeddings, normalised, one per input",
    access=KEY,
    request="api_like_oai.dialects.ollama:EmbedRequest",
    body="json",
    model_in="json",
    metered="tokens",
)
def embed():
    from ..dialects.ollama import EmbedRequest

    return _answer(_service().embed(parse_dialect(EmbedRequest)))


@route(
    bp,
    "/api/embeddings",
    summary="Ollama's older embeddings route: one vector",
    access=KEY,
    request="api_like_oai.dialects.ollama:EmbeddingsRequest",
    body="json",
    model_in="json",
    metered="tokens",
)
def embeddings():
    from ..dialects.ollama import EmbeddingsRequest

    return _answer(_service().embeddings(parse_dialect(EmbeddingsRequest)))


@route(bp, "/api/tags", methods=("GET",), summary="Ollama's model list (the key's models)", access=OWN)
def tags():
    from ..services.ollama import tag

    caller = current_caller()
    own = [tag(name, model) for name, model in state().registry.by_name.items() if caller.allows(model.name, name)]
    return jsonify({"models": own + _fleets("/api/tags", {entry["name"] for entry in own})})


def _fleets(path: str, own: set[str]) -> list[dict]:
    """The fleet's entries of Ollama's list at `path` (with --fleet), as its boxes list them, but those of
    this instance's own names and those the caller's key may not use; a fleet call (a front asking this
    box) gets this instance's own only: no loop between boxes."""
    fleet = state().fleet
    if fleet is None or g.get("fleet_call"):
        return []
    caller = current_caller()
    return [entry for entry in fleet.listing(path) if entry["name"] not in own and caller.allows(entry["name"], entry["name"])]


@route(
    bp,
    "/api/show",
    summary="Ollama's model details, read from its GGUF file (`model`, or the older `name`, required)",
    access=KEY,
    request="api_like_oai.routes.ollama:named_model_schema",
    body="json",
    model_in="json",
)
def show():
    from ..dialects.ollama import ModelRequest
    from ..services.ollama import not_found, show

    name = parse_dialect(ModelRequest).named()
    try:
        model, _ = state().registry.lookup(name)  # any name, with one model and no list: as /api/chat
    except ModelNotFound:
        raise not_found(name) from None
    if not current_caller().allows(model.name, name):
        raise not_found(name)
    return jsonify(show(name, model, with_path=sees_everything()))


@route(bp, "/api/ps", methods=("GET",), summary="Ollama's loaded models (the key's)", access=OWN)
def ps():
    from ..services.ollama import running as running_models

    supervisor = state().supervisor
    statuses = supervisor.ask("status")["models"] if supervisor is not None else {}
    caller = current_caller()
    own = [entry for entry in running_models(statuses, state().registry) if caller.allows(entry["name"], entry["name"])]
    return jsonify({"models": own + _fleets("/api/ps", set(state().registry.by_name))})


@route(
    bp,
    "/api/pull",
    "/api/push",
    "/api/create",
    "/api/copy",
    summary="Refused, always (400 saying so): models come from the configuration, no model hub is reached",
    access=OWN,
    success=None,
)
def hub():
    from ..services.ollama import refused

    raise refused(request.path.removeprefix("/api/"))


@route(
    bp,
    "/api/blobs/<path:digest>",
    methods=("HEAD", "POST"),
    summary="Refused, always (400 saying so): models come from the configuration",
    access=OWN,
    success=None,
)
def blob(digest: str):
    from ..services.ollama import refused

    raise refused("blobs")


@route(
    bp,
    "/api/delete",
    methods=("DELETE",),
    summary="Unload a model the proxy starts (admin key only); its file stays",
    access=ADMIN_KEY,
    media=(),  # an empty 200, as Ollama's
    request="api_like_oai.routes.ollama:named_model_schema",
    body="json",
    model_in="json",
)
def delete():
    """With the admin key: a model the proxy starts is unloaded (its file and its configuration stay:
    models come from the configuration, not from this API); any other is Ollama's 400 saying so."""
    from ..dialects.ollama import ModelRequest
    from ..services.ollama import not_found, refused

    name = parse_dialect(ModelRequest).named()
    model = state().registry.by_name.get(name)
    if model is None:
        raise not_found(name)
    if state().supervisor is None or model.settings.launch is None:
        raise refused("delete")
    state().supervisor.ask("unload", model=model.name)
    return Response(status=200)
