"""Models the proxy starts itself: load and unload on request (text-generation-webui's and llama.cpp
router mode's paths), their status as it changes (SSE), and their llama-servers' last log lines."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from flask import Blueprint, Response, jsonify, request

from .. import sse
from ..answers import ModelLoadResponse
from ..errors import InvalidRequest
from ..protocol import ModelLoadRequest
from ..supervisor import launch_rules
from . import SSE_HEADERS, current_caller, parse_body, sees_everything, state, without_addresses
from .declare import ADMIN, OWN, ModelQuery, route

bp = Blueprint("lifecycle", __name__)


def own_supervisor():
    """This proxy's supervisor; a proxy that starts no models of its own: a 400 (not_supported)."""
    supervisor = state().supervisor
    if supervisor is None:
        raise InvalidRequest(
            "this proxy starts no models of its own (see --model, --models-dir, or model: in "
            "the config file); its upstreams are started by someone else",
            code="not_supported",
        )
    return supervisor


def _started_model(name: str | None) -> str:
    caller = current_caller()
    model, asked = state().registry.lookup(name, caller.allows)  # aliases too; unknown: a 404 (strict registry)
    if not caller.allows(model.name, asked):
        raise state().registry.not_found(asked, caller.allows)
    if model.settings.launch is None:
        raise InvalidRequest(f"model {model.name!r} runs on upstreams the proxy does not start", param="model")
    return model.name


@route(
    bp,
    "/v1/internal/model/load",
    "/models/load",  # llama.cpp router mode's
    summary="Load a model the proxy starts (waits until loaded; `args`: the tuning flags DESIGN.md lists; a front: on a box)",
    access=ADMIN,
    request=ModelLoadRequest,
    answer=ModelLoadResponse,
    body="json",
    model_in="json",
    refusals=("disallowed_flag", "not_supported"),  # not_supported: a proxy that starts no models, nor has a fleet
)
def load():
    return _change("load")


@route(
    bp,
    "/v1/internal/model/unload",
    "/models/unload",  # llama.cpp router mode's
    summary="Unload a model the proxy starts (waits for its requests, then stops it; a fleet front: on every box)",
    access=ADMIN,
    request=ModelLoadRequest,
    answer=ModelLoadResponse,
    body="json",
    model_in="json",
    refusals=("not_supported",),
)
def unload():
    return _change("unload")


def allowed_args(args) -> None:
    """A load's `args` held to the flags a caller may set (supervisor/launch_rules.py): a 400 naming the first other."""
    try:
        launch_rules.check_requested(args)
    except launch_rules.DisallowedFlag as refused:
        raise InvalidRequest(str(refused), param="args", code="disallowed_flag") from None


def _change(op: str):
    """Load or unload the model the body names, once done: {"success", "model", "status"}."""
    change = parse_body(ModelLoadRequest)
    allowed_args(change.args or () if op == "load" else ())  # an unload sets them aside
    shared, name = state(), change.named()
    if _boxes_hold(shared, name):
        # a front: the fleet's boxes start and stop the model (FleetFront.load, unload), as one proxy would
        answer = shared.fleet.load(name, change.args) if op == "load" else shared.fleet.unload(name)
        return jsonify({"success": True, "model": name, "status": answer["status"]})
    supervisor, name = own_supervisor(), _started_model(name)
    answer = supervisor.ask(op, model=name, **({"args": change.args} if op == "load" else {}))
    return jsonify({"success": True, "model": name, "status": answer["status"]})


@route(
    bp,
    "/v1/internal/model/list",
    methods=("GET",),
    summary="text-generation-webui's list: the names of the models the proxy starts (the key's)",
    access=OWN,
)
def model_list():
    """text-generation-webui's list: the names of the models the proxy starts (those the caller's key may use)."""
    caller = current_caller()
    return jsonify(
        {
            "model_names": [
                model.name
                for model in state().registry.models.values()
                if model.settings.launch is not None and caller.allows(model.name)
            ]
        }
    )


@route(
    bp,
    "/v1/internal/model/logs",
    methods=("GET",),
    summary="A model's llama-server's last lines (a fleet front: its boxes')",
    access=ADMIN,
    query=ModelQuery,
    refusals=("not_supported",),
)
def logs():
    """A model's llama-server's last lines: paths, prompt-cache hits, every caller's token counts."""
    name, shared = request.args.get("model"), state()
    if _boxes_hold(shared, name):
        # a front: the lines of the boxes that run it, asked over the fleet's channel (FleetFront.logs)
        name = name or shared.fleet.default_model(shared.settings.default_model)
        return jsonify({"model": name, "lines": shared.fleet.logs(name)})
    return started_logs(name)


def _boxes_hold(shared, name: str | None = None) -> bool:
    """Whether a fleet's boxes, not this proxy, hold the model `name` (None: the models): a front that starts
    no models of its own, for a model it does not serve itself."""
    return shared.supervisor is None and shared.fleet is not None and name not in shared.registry.by_name


def started_logs(name: str | None):
    """{"model", "lines"} of a model this proxy starts (a box's, asked by a front: routes/fleet.box_logs)."""
    supervisor, name = own_supervisor(), _started_model(name)
    return jsonify({"model": name, "lines": supervisor.ask("logs", model=name)["lines"]})


@route(
    bp,
    "/v1/internal/models/events",
    methods=("GET",),
    summary="Server-sent events: the models' status, then each change (a key: its models'; a fleet front: its boxes')",
    access=OWN,
    media=(),
    stream="text/event-stream",
)
def events():
    """Server-sent events: the whole status first, then each model's status as it changes (load stages too);
    a caller who does not see everything sees its key's models only, without addresses (a front's boxes as
    `box 1`, `box 2`, ...). The stream has no end of its own: it ends when the worker shuts down (SIGTERM),
    rather than hold its grace period. A fleet front with no models of its own streams its boxes' merged
    (fleet/watch.py): their whole status first, then each box's changes, naming the box."""
    shared, caller = state(), current_caller()

    def ended() -> bool:
        return shared.inflight.draining

    changes = shared.fleet.events(ended) if _boxes_hold(shared) else own_supervisor().events(ended=ended)
    shown = (lambda event: event) if sees_everything(caller) else functools.partial(_own_models, caller, BoxLabels())
    return status_stream(changes, shown, caller.allows)


def status_stream(changes: Iterator[dict | None], shown=lambda event: event, allows=lambda model: True) -> Response:
    """The status events of `changes` as SSE, each `shown` (those of a model `allows` refuses left out); a None
    (a box's idle poll) a keep-alive comment. The first is taken now: its error is the answer."""
    first = next(changes)

    def frames():
        try:
            yield sse.frame(shown(first))
            for change in changes:
                if change is None:
                    yield sse.KEEPALIVE_COMMENT
                elif "model" not in change or allows(change["model"]):
                    yield sse.frame(shown(change))
        finally:
            changes.close()

    return Response(frames(), mimetype="text/event-stream", headers=SSE_HEADERS, direct_passthrough=True)


class BoxLabels:
    """A fleet's boxes as a tenant sees them, as /v1/models names them: `box 1`, `box 2`, ... in address order
    in the first status, then in the order they join; the same label for one box all through a stream."""

    def __init__(self):
        self.labels: dict[str, str] = {}

    def of(self, address: str) -> str:
        return self.labels.setdefault(address, f"box {len(self.labels) + 1}")

    def keyed(self, by_address: dict) -> dict:
        return {self.of(address): value for address, value in sorted(by_address.items())}


def _own_models(caller, labels: BoxLabels, event: dict) -> dict:
    """A status event (the whole status, or one model's change) with the caller's models only, no addresses."""
    if "models" in event:
        boxes = {"boxes": labels.keyed(event["boxes"])} if "boxes" in event else {}  # labelled first: in address order
        models = {name: _own_status(labels, status) for name, status in event["models"].items() if caller.allows(name)}
        return {**event, "models": models, **boxes}
    shown = {**event, "status": _own_status(labels, event["status"])} if "status" in event else dict(event)
    if "box" in event:
        shown["box"] = labels.of(event["box"])
    return shown


def _own_status(labels: BoxLabels, status: dict) -> dict:
    """A model's status without addresses, its boxes (a fleet front's) labelled."""
    shown = without_addresses(status)
    return {**shown, "boxes": labels.keyed(shown["boxes"])} if "boxes" in shown else shown
