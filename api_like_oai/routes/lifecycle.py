"""Models the proxy starts itself: load and unload on request (text-generation-webui's and llama.cpp
router mode's paths), their status as it changes (SSE), and their llama-servers' last log lines."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from .. import sse
from ..errors import InvalidRequest
from ..protocol import ModelLoadRequest
from . import SSE_HEADERS, admin_once_configured, parse_body, state

bp = Blueprint("lifecycle", __name__)


def _supervisor():
    supervisor = state().supervisor
    if supervisor is None:
        raise InvalidRequest("this proxy starts no models of its own (see --model, --models-dir, or model: in "
                             "the config file); its upstreams are started by someone else")
    return supervisor


def _started_model(name: str | None) -> str:
    model, _ = state().registry.lookup(name)   # aliases too; an unknown name is a 404 with a strict registry
    if model.settings.launch is None:
        raise InvalidRequest(f"model {model.name!r} runs on upstreams the proxy does not start", param="model")
    return model.name


@bp.post("/v1/internal/model/load")
@bp.post("/models/load")
@admin_once_configured
def load():
    return _change("load")


@bp.post("/v1/internal/model/unload")
@bp.post("/models/unload")
@admin_once_configured
def unload():
    return _change("unload")


def _change(op: str):
    """Load or unload the model the body names, once done: {"success", "model", "status"}."""
    change = parse_body(ModelLoadRequest)
    supervisor, name = _supervisor(), _started_model(change.named())
    answer = supervisor.ask(op, model=name, **({"args": change.args} if op == "load" else {}))
    return jsonify({"success": True, "model": name, "status": answer["status"]})


@bp.get("/v1/internal/model/list")
def model_list():
    """text-generation-webui's list: the names of the models the proxy starts."""
    return jsonify({"model_names": [model.name for model in state().registry.models.values()
                                    if model.settings.launch is not None]})


@bp.get("/v1/internal/model/logs")
def logs():
    supervisor, name = _supervisor(), _started_model(request.args.get("model"))
    return jsonify({"model": name, "lines": supervisor.ask("logs", model=name)["lines"]})


@bp.get("/v1/internal/models/events")
def events():
    """Server-sent events: the whole status first, then each model's status as it changes (load stages too)."""
    changes = _supervisor().events()
    first = next(changes)   # the supervisor answers before the response starts, or its error is the answer

    def frames():
        try:
            yield sse.frame(first)
            for change in changes:
                yield sse.frame(change)
        finally:
            changes.close()

    return Response(frames(), mimetype="text/event-stream", headers=SSE_HEADERS, direct_passthrough=True)
