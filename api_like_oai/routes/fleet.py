"""The fleet at the HTTP edge (fleet/ does the work): fleet calls recognised by their secret, a request
for a model this instance does not serve relayed to a box, and the fleet's own routes.

The order of the app's before_request hooks (app.py): the record opens, `trust_fleet_call` marks a
call from another instance of the fleet (its secret checked in constant time; a wrong one is a 401),
the caller's key is checked unless it is such a call (its front checked it), then `forward_elsewhere`.
"""

from __future__ import annotations

import functools
import hmac

import orjson
from flask import Blueprint, Response, g, jsonify, request

from ..errors import AuthenticationFailed, InvalidRequest, ModelNotFound, UpstreamUnavailable
from ..fleet.settings import CALLER_HEADER, GRANTS_HEADER, ROUTE_HEADER, SECRET_HEADER, TENANT_HEADER
from ..services import fleet_relay
from ..supervisor.launch_rules import RPC_ENDPOINT
from . import current_caller, declare, sees_everything, state
from .apis import ANTHROPIC, OLLAMA, api_of
from .audio import allow_audio_form
from .declare import FLEET, ModelQuery, route
from .docs import resolved
from .lifecycle import allowed_args, own_supervisor, started_logs, status_stream
from .responses import RESOLVED_AT_FRONT

bp = Blueprint("fleet", __name__)


def trust_fleet_call(request):
    """A request carrying the fleet secret is a fleet call (g.fleet_call): a front vouches for its
    client. A wrong secret, or a fleet route without one, is refused."""
    offered = request.headers.get(SECRET_HEADER)
    if offered is None:
        return  # a fleet route refuses it (its declaration's access, routes/declare.py)
    if not hmac.compare_digest(offered.encode(), state().settings.fleet.secret.encode()):
        raise AuthenticationFailed("wrong fleet secret")
    g.fleet_call = True
    g.fleet_tenant = request.headers.get(TENANT_HEADER) == "1"  # routes.sees_everything: as the front's client
    grants = request.headers.get(GRANTS_HEADER)  # the front's client's grants of named MCP servers
    g.fleet_grants = tuple(name for name in grants.split(",") if name) if grants is not None else None
    record = g.get("record")
    if record is not None:
        record.key_name = request.headers.get(CALLER_HEADER) or "fleet"
        record.route = request.headers.get(ROUTE_HEADER) or "-"


def relays(declared: declare.Declaration | None) -> bool:
    """Whether a front relays the route to a box serving the model its request names: every route that
    names its model (in its JSON body, its form or its query: the declaration's `model_in`) and that a key
    of the model may call (a route for the admin, a model's load, is never relayed: the box could not tell
    the front's tenant from its admin)."""
    return declared is not None and declared.model_in is not None and declared.access == declare.KEY


@functools.cache
def model_routes() -> frozenset[str]:
    """The paths a front relays (`relays`), aliases included."""
    return frozenset(path for path, declared in declare.relayed_by_fleet().items() if relays(declared))


def forward_elsewhere(request):
    """A client's request for a model this instance does not serve, relayed to the fleet's box for it
    (None: served here). One naming no model goes to the fleet's default model when this instance has
    none of its own, as one proxy serves its default. A fleet call is never relayed again (no loops)."""
    declared = declare.of_request()
    if not relays(declared):
        return None
    named, shared = _named(declared), state()
    model = named.model
    if g.get("fleet_call"):
        if model is not None and model not in shared.registry.by_name:
            # placed here by a front's stale view: a refusal, so that it tries the next box (never our default model)
            raise UpstreamUnavailable(f"model {model!r} is not served on this box")
        return None
    if model is None:
        if not named.absent or shared.registry.default is not None or _requires_model(declared.endpoint):
            return None  # the route's own 400, or this instance's own default model, as on one proxy
        model = shared.fleet.default_model(shared.settings.default_model)
        return _relayed(model, named.naming(model)) if model is not None else None
    if model in shared.registry.by_name:
        return None
    if not shared.fleet.serves(model):
        if shared.registry.strict:  # a front's 404 names the models, its own and the fleet's, the caller may use
            raise _not_found(model)
        return None
    return _relayed(model, named)


@functools.cache
def _requires_model(endpoint: str) -> bool:
    """Whether the route's request must name its model (Ollama's, Anthropic's Messages): one naming none is
    the route's own 400, here as on one proxy, not the default model's."""
    request_model = declare.DECLARATIONS[endpoint].request
    schema = resolved(request_model) if request_model is not None else {}
    if not isinstance(schema, dict):
        schema = schema.model_json_schema()
    return "model" in schema.get("required", ()) or any("model" in one.get("required", ()) for one in schema.get("anyOf", ()))


def _named(declared: declare.Declaration) -> fleet_relay.Named:
    """Where the request names its model, read as its declaration says (a form read within the limits the
    audio routes allow it, its bytes kept to relay)."""
    path = request.full_path.rstrip("?")
    query_model = request.args.get("model") if declared.query is not None or declared.model_in == "query" else None
    if declared.model_in == "query":
        return fleet_relay.in_query(path, query_model)
    if declared.model_in == "form":
        allow_audio_form()
        raw = request.get_data(parse_form_data=False)  # cached: the form is parsed from the same bytes
        upload = request.files.get("file") if not g.get("fleet_call") else None  # its seconds, read at the front
        audio = upload.read() if upload is not None else None
        if upload is not None:
            upload.stream.seek(0)  # the route's own read, if it is served here
        return fleet_relay.in_form(path, raw, request.mimetype_params.get("boundary", ""), request.form.get("model"), audio)
    # cached: the route's parse_body reads the same bytes if it is served here
    return fleet_relay.in_json(path, request.get_data(), query_model, ollama=api_of(request.path) is OLLAMA)


def _not_found(model: str) -> ModelNotFound:
    """The 404 of a model neither this instance nor the fleet has (or the caller may not use): it lists
    the names, this instance's and the fleet's, the caller's key lets it use."""
    if api_of(request.path) is OLLAMA:  # Ollama's own words, as one proxy answers them there (its clients read them)
        from ..services.ollama import not_found

        return not_found(model)
    caller, shared = current_caller(), state()
    names = {name for name, served in shared.registry.by_name.items() if caller.allows(served.name, name)}
    names |= {name for name in shared.fleet.known() if caller.allows(name, name)}
    return ModelNotFound(f"model {model!r} does not exist; known models: {', '.join(sorted(names))}", param="model")


_WRITTEN = object()  # a body a front made (a Responses turn made self-contained): its bytes written from it


def _relayed(model: str, named: fleet_relay.Named) -> Response:
    if not current_caller().allows(model, model):
        raise _not_found(model)
    shared, anthropic = state(), api_of(request.path) is ANTHROPIC

    def send(sent_body: dict, sent_raw=_WRITTEN) -> fleet_relay.Relayed:
        """`sent_body` to a box: its bytes as the client sent them, or (a body the front made) written out."""
        sent_raw = orjson.dumps(sent_body) if sent_raw is _WRITTEN else sent_raw
        headers, form = dict(request.headers), named.form_boundary is not None
        sent = fleet_relay.Sent(
            model, sent_body, sent_raw, request.method, named.path, headers, anthropic, named.audio_seconds, form=form
        )
        caller, ticket, record = current_caller(), g.get("ticket"), g.get("record")
        return fleet_relay.relay(shared.fleet, shared.metrics, sent, caller, ticket, record, sees_everything=sees_everything())

    at_front = RESOLVED_AT_FRONT.get(request.path)  # stored state: read and kept here, the box sent what it needs
    relayed = at_front(named.body, send) if at_front is not None else send(named.body, named.raw)
    response = Response(relayed.body, status=relayed.status, headers=relayed.headers, direct_passthrough=True)
    response.call_on_close(relayed.close)
    return response


def _json_object(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}  # the route's own parser names the error
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


@route(
    bp,
    "/v1/fleet/status",
    methods=("GET",),
    summary="The fleet's boxes and models (fleet calls only)",
    access=FLEET,
)
def fleet_status():
    """The fleet as this instance sees it: every box's record (fleet calls only: `api-like-oai fleet status`)."""
    return jsonify({"boxes": state().fleet.membership.current()})


POOL = {
    "type": "object",
    "required": ["model", "rpc", "lent_mib"],
    "properties": {
        "model": {"type": "string"},
        "rpc": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": f"^{RPC_ENDPOINT.pattern}$"}},
        "lent_mib": {"type": "integer", "minimum": 0},
    },
}


@route(
    bp,
    "/v1/fleet/pool",
    summary="Load a model across a box and its lenders (fleet calls only)",
    access=FLEET,
    request=POOL,
    body="json",
)
def start_pool():
    """A front has this box host a model pooled over RPC: its llama-server started with `--rpc` to the
    helpers' rpc-servers, `lent_mib` of its memory counted on them, not here. Back once it is loaded."""
    body = _json_object(request.get_data())
    model, endpoints, lent = body.get("model"), body.get("rpc"), body.get("lent_mib")
    if (
        not isinstance(model, str)
        or not isinstance(lent, int)
        or lent < 0
        or not isinstance(endpoints, list)
        or not endpoints
        or not all(isinstance(e, str) and RPC_ENDPOINT.fullmatch(e) for e in endpoints)
    ):
        raise InvalidRequest("a pool is {model, rpc: [host:port, ...], lent_mib}")
    return _supervisor_did("load", model, rpc=endpoints, lent_mib=lent)


@route(
    bp,
    "/v1/fleet/load",
    summary="Start one more copy of a model, or a front's admin's load (fleet calls only)",
    access=FLEET,
    request={
        "type": "object",
        "required": ["model"],
        "properties": {"model": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}}},
    },
    body="json",
    refusals=("disallowed_flag",),
)
def start_copy():
    """A front has this box start one more copy of a model kept on several boxes (`boxes:`), within
    its budget (a start that no longer fits is refused, 503), or load it for the front's admin (`args`:
    held to the same rules as a load here). Back once it is loaded."""
    body = _json_object(request.get_data())
    model, args = body.get("model"), body.get("args") or []
    if not isinstance(model, str) or not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise InvalidRequest("a load is {model, args: [flag, ...]}")
    allowed_args(args)
    return _supervisor_did("load", model, **({"args": args} if args else {}))


@route(
    bp,
    "/v1/fleet/unload",
    summary="Stop this box's copy of a model, for a front's admin (fleet calls only)",
    access=FLEET,
    request={"type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}},
    body="json",
)
def stop_copy():
    """A front's admin unloads a model: this box's copy stopped once its requests are done."""
    model = _json_object(request.get_data()).get("model")
    if not isinstance(model, str):
        raise InvalidRequest("an unload is {model}")
    return _supervisor_did("unload", model)


@route(
    bp,
    "/v1/fleet/logs",
    methods=("GET",),
    summary="A model's llama-server's last lines on this box, for a front's admin (fleet calls only)",
    access=FLEET,
    query=ModelQuery,
    refusals=("not_supported",),
)
def box_logs():
    """A front's admin reads a model's logs (FleetFront.logs): this box's lines, as its own admin reads them.
    A fleet call of its own: a box's `/v1/internal/model/logs` is its admin's, which a front's call is not."""
    return started_logs(request.args.get("model"))


@route(
    bp,
    "/v1/fleet/events",
    methods=("GET",),
    summary="This box's models' status, then each change, with keep-alives (fleet calls only)",
    access=FLEET,
    media=(),
    stream="text/event-stream",
)
def box_events():
    """A front's `/v1/internal/models/events` reads each box's here (fleet/watch.py): the whole status first,
    then each change, unfiltered (the front filters for its caller); a keep-alive comment each second without
    one, by which the front tells a box gone silent from one with nothing to say. Ends as the box drains."""
    supervisor, inflight = own_supervisor(), state().inflight
    return status_stream(supervisor.events(ended=lambda: inflight.draining, idle=True))


def _supervisor_did(op: str, model: str, **fields):
    """This box's supervisor asked to `op` (load, unload) `model`: {"model", "status"} once it is done."""
    answer = _supervisor(model).ask(op, model=model, **fields)
    return jsonify({"model": model, "status": answer["status"]})


def _supervisor(model: str):
    """This box's supervisor, if it starts `model`; else the 404 of a model it does not start."""
    supervisor = state().supervisor
    if supervisor is None or model not in state().registry.by_name:
        raise ModelNotFound(f"model {model!r} is not one this box starts", param="model")
    return supervisor
