"""Ollama's API on its own paths (`/`, `/api/*`), so that clients made for a local Ollama work through
the proxy unchanged, keys, limits and models on demand included. Errors under /api/ are Ollama's
`{"error": "..."}` (its descriptor, routes/apis.py, says so); streams are NDJSON. The views parse and wrap; the
work is services/ollama.py's."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from ..errors import ModelNotFound
from ..middleware import ON_CLOSE
from . import admission, current_caller, generation_context, parse_dialect, require_admin, sees_everything, state

bp = Blueprint("ollama", __name__)

RUNNING = "Ollama is running"  # `/` and /api/version ask no key (its descriptor's `public`): they say only that it runs


def _service():
    from ..services.ollama import Ollama

    # keep_alive loads, pins or unloads a model every caller shares: it is honoured from a caller who may
    # load and unload (sees_everything), and ignored from any other (as on an upstream the proxy does not
    # start), not refused: Ollama's clients send it unasked.
    return Ollama(admission(), generation_context(), state().supervisor, _after_close, steers_models=sees_everything())


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


@bp.route("/", methods=["GET", "HEAD"])
def running():
    return Response(RUNNING, mimetype="text/plain")


@bp.route("/api/version", methods=["GET", "HEAD"])
def version():
    from ..services.ollama import VERSION

    return jsonify({"version": VERSION})


@bp.post("/api/chat")
def chat():
    from ..dialects.ollama import ChatRequest

    return _answer(*_service().chat(parse_dialect(ChatRequest)))


@bp.post("/api/generate")
def generate():
    from ..dialects.ollama import GenerateRequest

    return _answer(*_service().generate(parse_dialect(GenerateRequest)))


@bp.post("/api/embed")
def embed():
    from ..dialects.ollama import EmbedRequest

    return _answer(_service().embed(parse_dialect(EmbedRequest)))


@bp.post("/api/embeddings")
def embeddings():
    from ..dialects.ollama import EmbeddingsRequest

    return _answer(_service().embeddings(parse_dialect(EmbeddingsRequest)))


@bp.get("/api/tags")
def tags():
    from ..services.ollama import tag

    caller = current_caller()
    return jsonify(
        {"models": [tag(name, model) for name, model in state().registry.by_name.items() if caller.allows(model.name, name)]}
    )


@bp.post("/api/show")
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


@bp.get("/api/ps")
def ps():
    from ..services.ollama import running as running_models

    supervisor = state().supervisor
    statuses = supervisor.ask("status")["models"] if supervisor is not None else {}
    caller = current_caller()
    return jsonify(
        {"models": [entry for entry in running_models(statuses, state().registry) if caller.allows(entry["name"], entry["name"])]}
    )


@bp.post("/api/pull")
@bp.post("/api/push")
@bp.post("/api/create")
@bp.post("/api/copy")
@bp.route("/api/blobs/<path:digest>", methods=["HEAD", "POST"])
def hub(digest: str | None = None):
    from ..services.ollama import refused

    raise refused(request.path.removeprefix("/api/").split("/")[0])


@bp.delete("/api/delete")
@require_admin
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
