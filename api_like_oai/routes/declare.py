"""Each route declared once, beside its view: the one place to add a route.

`@route(bp, "/v1/embeddings", "/embeddings", summary=..., access=KEY, request=..., model_in="json")` registers
the view's Flask rules and keeps its Declaration. Everything else the app knows about a route is read from
the declarations, never written again by hand:
- /openapi.json (routes/docs.py): paths, methods, request and answer models, statuses, security;
- who may call it (`access`): `guard` wraps the view (admin, admin key, fleet calls), and `is_public` tells
  the key check (app._identify_caller) which routes ask no key;
- what a fleet front relays to a box (`model_in`, routes/fleet.py);
- whether the access log and metrics record it (`recorded`, app._open_record);
- the endpoint table of the manual (`endpoint_table_markdown`).

Models are named, "module:Class", where the view imports them lazily (idle memory: a worker that never
serves an API does not hold its dialect, benchmarks/PROFILE.md); routes/docs.py resolves them when the
document is first asked for. tests/unit/test_openapi.py holds every registered view declared and every
declaration registered.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from flask import current_app, g, request
from pydantic import BaseModel
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from ..errors import AuthenticationFailed, PermissionDenied
from . import current_caller, sees_everything, state

# Who may call a route:
PUBLIC = "public"  # anyone, no key asked (probes, the documents, the dashboard's files)
KEY = "key"  # a key of the model the request names (another model's key: a 404, as if it did not exist)
OWN = "own"  # any key, each to its own part (its stored objects, its usage, its requests)
ADMIN = "admin"  # the admin key once one is configured; until then the keys from the flags (sees_everything)
ADMIN_KEY = "admin-key"  # the admin key (--admin-key) only
FLEET = "fleet"  # calls from the fleet's other instances only (the fleet secret)
POOL = "pool"  # public with --open-pool-metrics (an endpoint picker sends no key), else as ADMIN
ACCESS = (PUBLIC, KEY, OWN, ADMIN, ADMIN_KEY, FLEET, POOL)

# Why a route may refuse (400, the error's `code`, also in X-Error-Code) a request its schema allows: what
# no schema can say. /openapi.json lists a route's in its 400 answer (`x-refusals`); every other
# schema-valid request is accepted (tests/e2e/test_contract.py holds it).
REFUSALS = {
    "context_length_exceeded": "the prompt and the answer asked for do not fit the model's context",
    "model_not_supported": "the model cannot do what is asked (rerank, embed, read images or audio)",
    "not_supported": "the model's server does not do it (speech, fill-in-the-middle, embeddings)",
    "unsupported_format": "the file is not in a format this server reads",
    "invalid_tool_choice": "tool_choice asks for a tool and `tools` has none, or not that one",
    "duplicate_tool_name": "two tools with one name",
    "block_not_allowed": "a content block or field the message's role cannot hold",
    "duplicate_item": "two items with one id",
    "token_out_of_vocabulary": "a token id the model's vocabulary does not have",
    "invalid_audio": "audio that cannot be read as the format it says",
    "invalid_image": "an image that cannot be read",
    "invalid_image_url": "an image URL that cannot be fetched, or is not allowed",
    "invalid_mcp_server_url": "an MCP server's URL that is not http(s), does not resolve, or is not allowed",
    "upstream_refused": "llama-server's own refusal of a relayed request, as it answered it",
    "nothing_to_answer": "every input item is of a kind set aside here (a hosted tool's call, an item reference)",
    "conflicting_fields": "two fields that cannot both be given (tools and functions, previous_response_id and a conversation)",
    "invalid_chat_template": "the model's chat template refuses these messages (roles in an order it does not take)",
    "invalid_json_schema": "a JSON schema given for an answer or a tool that cannot be used (an unknown type, ...)",
    "over_limit": "a value past one of the limits the proxy is configured with (n, max_tokens)",
    "disallowed_flag": "a flag a caller may not set, or its value (DESIGN.md: launch rules)",
}
GENERATES = (
    "context_length_exceeded",
    "over_limit",
    "invalid_tool_choice",
    "duplicate_tool_name",
    "model_not_supported",
    "not_supported",
    "invalid_audio",
    "invalid_image",
    "invalid_image_url",
    "upstream_refused",
    "conflicting_fields",
    "invalid_chat_template",
    "invalid_json_schema",
)

# Where a route's model is named, so that a fleet front relays it to a box that serves the model:
MODEL_IN = ("json", "form", "query")
BODIES = ("json", "multipart")

ROUTE_MODULES = (
    "completions",
    "anthropic",
    "responses",
    "ollama",
    "embeddings",
    "models",
    "internal",
    "docs",
    "conversations",
    "keys",
    "lifecycle",
    "dashboard",
    "rerank",
    "audio",
    "native",
    "fleet",
    "files",
    "batches",
    "message_batches",
)


@dataclass(frozen=True)
class Declaration:
    """What the app knows about one view: its paths (the first its name, the others aliases), methods,
    who may call it and what it takes and answers."""

    endpoint: str  # the Flask endpoint of its view ("blueprint.function")
    paths: tuple[str, ...]  # Flask rules; the first is the route, the others its aliases
    methods: tuple[str, ...]
    summary: str
    access: str
    request: object = None  # the body's model: a class, "module:Class", or a JSON schema (dict)
    answer: object = None  # the 2xx answer's model, as `request`
    query: object = None  # the query's model, as `request`
    body: str | None = None  # "json" | "multipart" | None (takes no body)
    model_in: str | None = None  # where the request names its model: "json" | "form" | "query" | None
    statuses: tuple[int, ...] = ()  # what it answers beyond its access kind's (statuses_of)
    success: int | None = 200  # its answer's status; None: a route that only refuses
    metered: str | None = None  # what it counts against a key: "tokens" | "seconds" | "requests" | None
    recorded: bool = True  # in the access log, the metrics and the dashboard
    relayed: bool = False  # llama-server's answer as it is (any status, llama-server's shapes)
    media: tuple[str, ...] = ("application/json",)  # its answer's media types (a stream's aside); (): any
    stream: str | None = None  # the media type of a streamed answer, if it can stream
    documented: bool = True  # in /openapi.json (the documents themselves and static files are not)
    refusals: tuple[str, ...] = ()  # codes of REFUSALS it may answer a schema-valid request with

    def __post_init__(self):
        if self.access not in ACCESS or self.model_in not in (*MODEL_IN, None) or self.body not in (*BODIES, None):
            raise ValueError(f"{self.endpoint}: access {self.access!r}, model_in {self.model_in!r}, body {self.body!r}")
        if not set(self.refusals) <= REFUSALS.keys():
            raise ValueError(f"{self.endpoint}: refusals {self.refusals!r} not among REFUSALS")


DECLARATIONS: dict[str, Declaration] = {}  # by endpoint, filled as the route modules are imported

# Flask's own static folder (the app has none: a 404 for every name, after the key check).
DECLARATIONS["static"] = Declaration(
    "static", ("/static/<path:filename>",), ("GET",), "Flask's static folder (empty)", KEY, documented=False
)


def route(registry, *paths: str, methods=("POST",), summary: str, access: str, **fields) -> Callable:
    """Register the decorated view at `paths` on `registry` (a Blueprint or the app) for `methods`, guarded
    by its access, and keep its Declaration. The view itself is returned unchanged."""

    def register(view):
        declare(registry, paths, view, methods=methods, summary=summary, access=access, **fields)
        return view

    return register


def declare(registry, paths, view, *, methods, summary: str, access: str, **fields) -> Declaration:
    """`route` for a view made in a loop (llama.cpp's relayed routes)."""
    name = view.__name__
    blueprint = getattr(registry, "name", None) if not hasattr(registry, "url_map") else None
    endpoint = f"{blueprint}.{name}" if blueprint else name
    declaration = Declaration(endpoint, tuple(paths), tuple(methods), summary, access, **fields)
    DECLARATIONS[endpoint] = declaration
    guarded = guard(declaration, view)
    for path in paths:
        registry.add_url_rule(path, endpoint=name, view_func=guarded, methods=list(methods))
    return declaration


def guard(declaration: Declaration, view) -> Callable:
    """The view, refusing a caller its access does not let through. Public and key routes are the key
    check's (app._identify_caller: 401 without a key) and the model lookup's (404 for another's model)."""
    check = _CHECKS.get(declaration.access)
    if check is None:
        return view

    @functools.wraps(view)
    def guarded(*args, **kwargs):
        check()
        return view(*args, **kwargs)

    return guarded


def _admin() -> None:
    if not sees_everything():
        raise PermissionDenied("this route needs an admin key (--admin-key)")


def _admin_key() -> None:
    if not current_caller().admin:
        raise PermissionDenied("this route needs an admin key (--admin-key)")


def _fleet() -> None:
    if not g.get("fleet_call"):
        raise AuthenticationFailed("fleet routes take only calls from the fleet's instances (the fleet secret)")


def _pool() -> None:
    if not _pool_is_open():
        _admin()


def _pool_is_open() -> bool:
    return state().settings.open_pool_metrics


_CHECKS = {ADMIN: _admin, ADMIN_KEY: _admin_key, FLEET: _fleet, POOL: _pool}


def of_request() -> Declaration | None:
    """The declaration of the route this request matched; for a method the route does not take (a 405),
    the route's own, so that its 405 is answered as its other methods would be (no key for a public one)."""
    rule = request.url_rule
    if rule is None and isinstance(request.routing_exception, MethodNotAllowed):
        rule = _rule_of_path(request.routing_exception.valid_methods or ())
    return DECLARATIONS.get(rule.endpoint) if rule is not None else None


def _rule_of_path(methods):
    adapter = current_app.url_map.bind_to_environ(request.environ)
    for method in methods:
        try:
            return adapter.match(method=method, return_rule=True)[0]
        except HTTPException:
            continue
    return None


def is_public() -> bool:
    """Whether this request's route asks no key."""
    declaration = of_request()
    if declaration is None:
        return False
    return declaration.access == PUBLIC or (declaration.access == POOL and _pool_is_open())


def all_declarations() -> list[Declaration]:
    """Every route module's declarations (each module imported), in their modules' order; the app's own
    (/metrics) is made with the app and added here when declared."""
    for module in ROUTE_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    return list(DECLARATIONS.values())


def relayed_by_fleet(model_in: tuple[str, ...] = MODEL_IN) -> dict[str, Declaration]:
    """The routes whose model is named where `model_in` says, by path (an alias included): what a fleet
    front relays to a box serving the model (routes/fleet.relays: those a key of the model may call)."""
    return {path: d for d in all_declarations() if d.model_in in model_in for path in d.paths}


def endpoint_table_markdown() -> str:
    """The manual's endpoint table, one row per route (its aliases beside it): method, path, summary,
    who may call it, and where it names its model."""
    rows = ["| Method | Path | What it does | Access | Model named in |", "|---|---|---|---|---|"]
    for declaration in sorted(all_declarations(), key=lambda d: (d.paths[0], d.methods)):
        if not declaration.documented:
            continue
        methods = ", ".join(m for m in declaration.methods if m != "HEAD")
        paths = "<br>".join(f"`{_openapi_path(path)}`" for path in declaration.paths)
        summary = declaration.summary.replace("|", "\\|")
        rows.append(f"| {methods} | {paths} | {summary} | {declaration.access} | {declaration.model_in or '-'} |")
    return "\n".join(rows) + "\n"


def _openapi_path(rule: str) -> str:
    from .docs import openapi_path

    return openapi_path(rule)


class ModelQuery(BaseModel):
    """`?model=`: a route that names its model in the query (the default model without it)."""

    model: str | None = None
