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
from ..fleet.settings import CALLER_HEADER, ROUTE_HEADER, SECRET_HEADER
from ..services import fleet_relay
from ..supervisor.launch_rules import RPC_ENDPOINT
from . import current_caller, declare, sees_everything, state
from .apis import ANTHROPIC, api_of
from .declare import FLEET, route
from .responses import RESOLVED_AT_FRONT

bp = Blueprint("fleet", __name__)


def trust_fleet_call():
    """A request carrying the fleet secret is a fleet call (g.fleet_call): a front vouches for its
    client. A wrong secret, or a fleet route without one, is refused."""
    offered = request.headers.get(SECRET_HEADER)
    if offered is None:
        return  # a fleet route refuses it (its declaration's access, routes/declare.py)
    if not hmac.compare_digest(offered.encode(), state().settings.fleet.secret.encode()):
        raise AuthenticationFailed("wrong fleet secret")
    g.fleet_call = True
    record = g.get("record")
    if record is not None:
        record.key_name = request.headers.get(CALLER_HEADER) or "fleet"
        record.route = request.headers.get(ROUTE_HEADER) or "-"


@functools.cache
def model_routes() -> frozenset[str]:
    """The paths a front relays to a box serving the model its request names: every route that names its
    model in its JSON body and that a key of the model may call (a route for the admin, a model's load,
    is never relayed: the box could not tell the front's tenant from its admin). Those that name it in a
    form or the query (declare.relayed_by_fleet(("form", "query"))) are not relayed yet."""
    return frozenset(path for path, declared in declare.relayed_by_fleet(("json",)).items() if declared.access == declare.KEY)


def forward_elsewhere():
    """A client's request for a model this instance does not serve, relayed to the fleet's box for it
    (None: served here). A fleet call is never relayed again (no loops)."""
    if request.method != "POST" or request.path not in model_routes():
        return None
    raw = request.get_data()  # cached: the route's parse_body reads the same bytes if it is served here
    body = _json_object(raw)
    model = body.get("model")
    shared = state()
    if isinstance(model, str) and model not in shared.registry.by_name and g.get("fleet_call"):
        # placed here by a front's stale view: a refusal, so that it tries the next box (never our default model)
        raise UpstreamUnavailable(f"model {model!r} is not served on this box")
    if g.get("fleet_call") or not isinstance(model, str) or model in shared.registry.by_name:
        return None
    if not shared.fleet.serves(model):
        if shared.registry.strict:  # a front's 404 names the models, its own and the fleet's, the caller may use
            raise _not_found(model)
        return None
    return _relayed(model, body, raw)


def _not_found(model: str) -> ModelNotFound:
    """The 404 of a model neither this instance nor the fleet has (or the caller may not use): it lists
    the names, this instance's and the fleet's, the caller's key lets it use."""
    caller, shared = current_caller(), state()
    names = {name for name, served in shared.registry.by_name.items() if caller.allows(served.name, name)}
    names |= {name for name in shared.fleet.known() if caller.allows(name, name)}
    return ModelNotFound(f"model {model!r} does not exist; known models: {', '.join(sorted(names))}", param="model")


def _relayed(model: str, body: dict, raw: bytes) -> Response:
    if not current_caller().allows(model, model):
        raise _not_found(model)
    shared, anthropic = state(), api_of(request.path) is ANTHROPIC

    def send(sent_body: dict, sent_raw: bytes | None = None) -> fleet_relay.Relayed:
        sent_raw = orjson.dumps(sent_body) if sent_raw is None else sent_raw
        path, headers = request.full_path.rstrip("?"), dict(request.headers)
        sent = fleet_relay.Sent(model, sent_body, sent_raw, request.method, path, headers, anthropic)
        caller, ticket, record = current_caller(), g.get("ticket"), g.get("record")
        return fleet_relay.relay(shared.fleet, shared.metrics, sent, caller, ticket, record, sees_everything=sees_everything())

    resolved = RESOLVED_AT_FRONT.get(request.path)  # stored state: read and kept here, the box sent what it needs
    relayed = resolved(body, send) if resolved is not None else send(body, raw)
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
    answer = _supervisor(model).ask("load", model=model, rpc=endpoints, lent_mib=lent)
    return jsonify({"model": model, "status": answer["status"]})


@route(
    bp,
    "/v1/fleet/load",
    summary="Start one more copy of a model kept on several boxes (fleet calls only)",
    access=FLEET,
    request={"type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}},
    body="json",
)
def start_copy():
    """A front has this box start one more copy of a model kept on several boxes (`boxes:`), within
    its budget (a start that no longer fits is refused, 503). Back once it is loaded."""
    model = _json_object(request.get_data()).get("model")
    if not isinstance(model, str):
        raise InvalidRequest("a load is {model}")
    answer = _supervisor(model).ask("load", model=model)
    return jsonify({"model": model, "status": answer["status"]})


def _supervisor(model: str):
    """This box's supervisor, if it starts `model`; else the 404 of a model it does not start."""
    supervisor = state().supervisor
    if supervisor is None or model not in state().registry.by_name:
        raise ModelNotFound(f"model {model!r} is not one this box starts", param="model")
    return supervisor
