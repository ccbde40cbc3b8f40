"""Thin Flask views: parse and validate, call a service, wrap its answer."""

from __future__ import annotations

import functools

from flask import Response, current_app, g, request
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from ..access.keys import ANONYMOUS, Caller
from ..compact_json import json_bytes
from ..errors import PayloadTooLarge
from ..middleware import ON_CLOSE
from ..observability import stage
from ..offload import let_others_run
from ..services import leases
from ..services.admission import Admission, invalid_request
from ..services.inflight import BARE_EVENTS, Context, Waiting
from ..services.passthrough import passthrough

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
STATE_KEY = "api_like_oai"  # where app.create_app keeps the AppState in `app.extensions`


def state(app=None):
    """The app's state (app.AppState): settings, models, generations in flight, metrics; of the app
    handling the request, or of `app` (the server and the worker, outside a request). The request's app
    is taken from Werkzeug's proxy at once, not through it (a lookup each for `.extensions`: issue 54)."""
    return (app or current_app._get_current_object()).extensions[STATE_KEY]


def parse_body(model: type[BaseModel]):
    """The request body validated as `model`; InvalidRequest naming the first bad field.

    pydantic's JSON parser (jiter) makes Python objects with the object keys' strings cached, then
    pydantic validates them: half the time of validating the JSON text directly on an agent's 50 KB
    body (strict validation treats JSON's types alike either way). The parser is the one
    `model_validate_json` uses, so integers of any size stay exact and nesting is bounded as before
    (orjson, tried here once, read integers past 64 bits as floats and let a body nest four times
    deeper, into a RecursionError later). What it refuses (NaN, malformed JSON, nesting past its
    limit) goes to `model_validate_json`, which names the error as before."""
    body = request_body()
    with stage(g._get_current_object().get("record"), "admission"):
        try:
            try:
                parsed = from_json(body, allow_inf_nan=False, cache_strings="keys")
            except ValueError:
                return model.model_validate_json(body)
            return _validated(model, parsed)
        except ValidationError as exc:
            raise invalid_request(exc) from None


def body_size(environ: dict) -> int:
    """The request body's Content-Length, 0 without one. Read from the environ: werkzeug's
    `content_length` looks for a Transfer-Encoding header too, and its header view raises a KeyError
    inside for the one a request does not have (issue 54: exceptions are dear on the way upstream)."""
    length = environ.get("CONTENT_LENGTH", "")
    return int(length) if length.isdigit() else 0


def request_body() -> bytes:
    """The JSON body, at most --max-body-bytes (413 over it). One with a Content-Length (nearly every
    one) is read off the server's input as it is: werkzeug's reading makes a request stream, a limited
    stream around it and looks the limit up in the app's config first, a tenth of a request's way to
    its first token on a core that was idle (issue 54). One werkzeug has begun to read (its request's
    `stream`, cached once made: a chunked body read whole by app._read_chunked_body_whole, a fleet
    front's look at the body) is werkzeug's to return."""
    flask_request = request._get_current_object()
    environ = flask_request.environ
    length = environ.get("CONTENT_LENGTH", "")
    if not length.isdigit() or "stream" in vars(flask_request):
        return flask_request.get_data(cache=False) or b""
    if int(length) > state().settings.limits.max_body_bytes:
        raise PayloadTooLarge("request body too large")
    return environ["wsgi.input"].read(int(length))


def _validated(model: type[BaseModel], parsed):
    """`parsed` as `model`. JSON has one kind of number, so 2.0 is the integer 2 (JSON Schema says so too,
    and /openapi.json is held to it): the strict models refuse a float where an integer goes, so a body
    refused for that alone is read again with its whole floats as integers (only then: no walk over an
    agent's 50 KB body on the way that succeeds)."""
    try:
        return model.model_validate(parsed)
    except ValidationError as exc:
        if not any(_is_whole_float(error) for error in exc.errors(include_url=False)):
            raise
        return model.model_validate(whole_floats_as_integers(parsed))


def _is_whole_float(error) -> bool:
    value = error.get("input")
    return error["type"] == "int_type" and isinstance(value, float) and value.is_integer()


def whole_floats_as_integers(value):
    """`value` (parsed JSON) with every float that has no fraction written as an int."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {key: whole_floats_as_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_floats_as_integers(item) for item in value]
    return value


def respond(answer, headers: dict | None = None) -> Response:
    """A service's answer as HTTP: a dict becomes JSON, an iterator of bytes an event stream."""
    if isinstance(answer, dict):
        # The bytes jsonify writes with the app's settings (compact, keys in order, a newline at the end),
        # by the frames' encoder (compact_json.py): 30 µs less per answer than Flask's provider.
        return Response(json_bytes(answer) + b"\n", mimetype="application/json", headers=headers)
    # direct_passthrough: the server iterates our generator itself, without Werkzeug's two wrappers
    # (ClosingIterator, iter_encoded) around every frame; the frames are bytes already.
    return Response(answer, mimetype="text/event-stream", headers={**SSE_HEADERS, **(headers or {})}, direct_passthrough=True)


def generation_context() -> Context:
    # `request`, `g` and current_app are each a context-variable lookup through Werkzeug's proxy: read once.
    shared, environ, flask_g = state(), request._get_current_object().environ, g._get_current_object()
    ticket, waiting, record = flask_g.get("ticket"), _waiting(), flask_g.get("record")
    # The doors open when the service first needs one: after a streamed request's waiting step, outside
    # the request's Flask context, so what they hold is taken from it now.
    return Context(
        shared.inflight,
        record,
        shared.settings.log_prompts,
        session=environ.get("HTTP_X_CLAUDE_CODE_SESSION_ID"),
        request_bytes=body_size(environ),
        opens_door=functools.partial(_door, ticket, waiting, record),
        waiting=waiting,
        shows_addresses=_sees_everything(flask_g, shared) and not flask_g.get("fleet_call"),
        bare_events=environ.get(BARE_EVENTS, False),
    )


def door(model):
    """The model's upstream as this request goes through it (services/door.py): its key's ticket and, for
    a model the proxy starts, its lease's renewal (hold_model's)."""
    return _door(g.get("ticket"), _waiting(), g.get("record"), model)


def _door(ticket, waiting: Waiting, record, model):
    # the renewal looked up when a replica is found crashed: the lease may be held after the door opened;
    # the priority asked read when the request waits for a slot (admission reads its service_tier)
    return model.door(ticket, lambda: waiting.renew, lambda: record.priority if record is not None else None)


def _waiting() -> Waiting:
    """The request's model load left pending by admission (hold_model), for its service's waiting step."""
    flask_g = g._get_current_object()
    waiting = flask_g.get("waiting")
    if waiting is None:
        waiting = flask_g.waiting = Waiting()
    return waiting


def offered_key() -> str:
    """The API key the request brings: `Authorization: Bearer <key>` (OpenAI's), else `x-api-key` (Anthropic's)."""
    authorization = request.headers.get("Authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return request.headers.get("x-api-key", "")


def current_caller() -> Caller:
    """Who sent this request (app._identify_caller); ANONYMOUS when the proxy asks for no key."""
    return _caller_of(g._get_current_object())


def _caller_of(flask_g) -> Caller:
    ticket = flask_g.get("ticket")
    return ticket.caller if ticket is not None else ANONYMOUS


def sees_everything(caller: Caller | None = None) -> bool:
    """Whether the caller sees and acts on what every caller shares (every model, request, error and
    address, the servers' logs): an admin key; while no admin key is configured, a key from the flags
    or the config file (or no key, when the proxy asks for none). A managed key only ever sees its own."""
    return _sees_everything(g._get_current_object(), state(), caller)


def _sees_everything(flask_g, shared, caller: Caller | None = None) -> bool:
    """sees_everything, given the request's `g` and the app's state."""
    if caller is None and flask_g.get("fleet_tenant"):  # a fleet call for a front's client who sees only its own
        return False
    caller = caller or _caller_of(flask_g)
    return caller.admin or (caller.record is None and not shared.settings.admin_keys)


OPERATORS_ONLY = ("upstreams", "args", "error")  # addresses, a load's flags, a failed child's log lines


def without_addresses(status: dict) -> dict:
    """A started model's status (the supervisor's) as a tenant sees it: without its llama-servers'
    addresses, the flags of its load, or a failed start's log lines (paths and addresses)."""
    return {name: value for name, value in status.items() if name not in OPERATORS_ONLY}


def admission() -> Admission:
    """This request's admission checks, bound to the app's limits and models, the access record and
    the caller's ticket (its models and limits)."""
    shared, flask_g = state(), g._get_current_object()
    limits, record, ticket = shared.settings.limits, flask_g.get("record"), flask_g.get("ticket")
    return Admission(limits, shared.registry, record, ticket, hold_model, flask_g.get("fleet_grants"))


def hold_model(model, later: bool = False) -> None:
    """A model the proxy starts is loaded (or swapped in) for this request, and kept until its response
    is closed (services/leases.py); with `later`, a model not ready yet is left pending in the request's
    Waiting for its service's waiting step."""
    leases.hold(state().supervisor, model, request.environ[ON_CLOSE], g.get("record"), _waiting(), later=later)


def parse_dialect(request_model: type[BaseModel]):
    """The body validated as `request_model`, a request of an API the service translates (Anthropic's,
    the Responses API): its service translates and admits it (services/admission.py)."""
    dialect_request = parse_body(request_model)
    # An agent's body is tens of kilobytes: other streams go on between parsing and translating.
    let_others_run(body_size(request.environ))
    return dialect_request


def lookup_model(requested: str | None):
    """(model, name to answer with) if the caller may use it (404 otherwise), admitted by its key's limits."""
    with stage(g.get("record"), "admission"):
        return admission().lookup_model(requested)


def completed(request_model: type[BaseModel], path: str, service) -> Response:
    """OpenAI's chat or text completion: the body parsed and admitted, then passed through as the
    client sent it to a `kind: openai` model's upstream at `path`, else answered by `service`
    (request, model, model_name, context) -> (answer, headers)."""
    sent = parse_body(request_model)
    api_request, model, model_name = admit(sent, waits_later=True)
    if model.upstream.capabilities.passes_through:
        return respond(passthrough(sent, model, model_name, path, g.get("record")))
    return respond(*service(api_request, model, model_name, generation_context()))


def admit(api_request, *, waits_later: bool = False):
    """(request with its max_tokens decided, model, name to answer with): Admission.admit."""
    with stage(g._get_current_object().get("record"), "admission"):
        return admission().admit(api_request, waits_later=waits_later)
