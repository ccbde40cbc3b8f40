"""The fleet at the HTTP edge (fleet/ does the work): fleet calls recognised by their secret, a request
for a model this instance does not serve relayed to a box, and the fleet's own routes.

The order of the app's before_request hooks (app.py): the record opens, `trust_fleet_call` marks a
call from another instance of the fleet (its secret checked in constant time; a wrong one is a 401),
the caller's key is checked unless it is such a call (its front checked it), then `forward_elsewhere`.
"""

from __future__ import annotations

import hmac
import re

import orjson
from flask import Blueprint, Response, g, jsonify, request

from ..errors import AuthenticationFailed, FleetUnavailable, InvalidRequest, ModelNotFound, UpstreamUnavailable
from ..fleet.settings import CALLER_HEADER, ROUTE_HEADER, SECRET_HEADER
from ..fleet.usage import StreamUsage, counts_in, prompt_bound, reply_bound
from . import current_caller, sees_everything, state
from .apis import ANTHROPIC, api_of

bp = Blueprint("fleet", __name__)

# The routes that name a model in their JSON body: a front relays them to a box serving the model.
MODEL_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/completions",
        "/v1/embeddings",
        "/embeddings",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/responses",
        "/responses",
    }
)
FLEET_PATHS = "/v1/fleet/"  # the fleet's own routes: fleet calls only
ADDRESS = re.compile(r"(?:https?://)?[A-Za-z0-9.\-]+:[0-9]{2,5}")  # a box's or Redis's, in a refusal's message


def trust_fleet_call():
    """A request carrying the fleet secret is a fleet call (g.fleet_call): a front vouches for its
    client. A wrong secret, or a fleet route without one, is refused."""
    offered = request.headers.get(SECRET_HEADER)
    if offered is None:
        if request.path.startswith(FLEET_PATHS):
            raise AuthenticationFailed("fleet routes take only calls from the fleet's instances (the fleet secret)")
        return
    if not hmac.compare_digest(offered.encode(), state().settings.fleet.secret.encode()):
        raise AuthenticationFailed("wrong fleet secret")
    g.fleet_call = True
    record = g.get("record")
    if record is not None:
        record.key_name = request.headers.get(CALLER_HEADER) or "fleet"
        record.route = request.headers.get(ROUTE_HEADER) or "-"


def forward_elsewhere():
    """A client's request for a model this instance does not serve, relayed to the fleet's box for it
    (None: served here). A fleet call is never relayed again (no loops)."""
    if request.method != "POST" or request.path not in MODEL_ROUTES:
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
    caller = current_caller()
    if not caller.allows(model, model):
        raise _not_found(model)
    ticket = g.get("ticket")
    if ticket is not None:  # once, here, as for a request served here: the box counts no limit of its own
        ticket.admit(reply_bound(body))
        ticket.before_generation(len(raw), lambda: prompt_bound(body))
    record = g.get("record")
    metrics = state().metrics
    try:
        relayed = state().fleet.forward(
            model,
            body,
            raw,
            request.method,
            request.full_path.rstrip("?"),
            dict(request.headers),
            caller=caller.name,
            anthropic=api_of(request.path) is ANTHROPIC,
            on_passed_over=lambda box: metrics.child(metrics.fleet_passed_over, box).inc(),
        )
    except FleetUnavailable as exc:
        if not sees_everything():
            exc.message = ADDRESS.sub("<a box>", exc.message)  # no addresses to a tenant (its headers kept)
        raise
    metrics.child(metrics.fleet_relays, relayed.candidate.address, relayed.candidate.route, str(relayed.status)).inc()
    if record is not None:
        record.model, record.requested_model = model, model
        record.upstream, record.route = relayed.candidate.address, relayed.candidate.route
        record.status = relayed.status
    body_pieces = relayed.body
    if record is not None and isinstance(body_pieces, bytes):
        _count(record, counts_in(_json_or_none(body_pieces)))
    elif record is not None:
        body_pieces = _counted_stream(body_pieces, record)  # app._close_record leaves streams to close their own
    headers = {**relayed.headers, ROUTE_HEADER: relayed.candidate.route}
    if sees_everything():  # the box's address: only to who sees every address
        headers["X-Fleet-Box"] = relayed.candidate.address
    response = Response(body_pieces, status=relayed.status, headers=headers, direct_passthrough=True)
    response.call_on_close(relayed.close)
    return response


def _counted_stream(pieces, record):
    """A relayed stream's pieces; its usage counted and its record closed when it ends."""
    usage = StreamUsage()
    try:
        for piece in pieces:
            usage.feed(piece)
            yield piece
    finally:
        _count(record, usage.counts)
        record.close()


def _count(record, counts) -> None:
    if counts is not None:
        record.count(*counts)


def _json_or_none(raw: bytes):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _json_object(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}  # the route's own parser names the error
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


@bp.get("/v1/fleet/status")
def fleet_status():
    """The fleet as this instance sees it: every box's record (fleet calls only: `api-like-oai fleet status`)."""
    return jsonify({"boxes": state().fleet.membership.current()})


RPC_ENDPOINT = re.compile(r"[A-Za-z0-9.\-]+:[0-9]{1,5}")


@bp.post("/v1/fleet/pool")
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


@bp.post("/v1/fleet/load")
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
