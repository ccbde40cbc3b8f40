"""create_app(settings): the Flask app with its blueprints, auth and the one error mapping."""

from __future__ import annotations

import functools
import glob
import importlib
import ipaddress
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import Flask, Response, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException

from . import installation
from .access.book import open_book
from .access.gate import Gate, Ticket
from .access.priority import KEPT_FREE, KEPT_FREE_YIELDING, asked
from .access.usage import BATCH_API
from .backends.llamacpp import LlamaCppClient
from .backends.openai import OpenAIUpstream
from .backends.pool import UpstreamPool
from .batch.batches import progress as batch_progress
from .batch.lines import ENVIRON_KEY as BATCH_LINE
from .dashboard.buckets import open_buckets
from .dashboard.history import History
from .dashboard.live import Collector, LiveRequest, LiveView, Sources, live_requests
from .errors import (
    ERROR_CODE_HEADER,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ProxyError,
)
from .flask_app import ProxyFlask
from .middleware import ON_CLOSE, CollapseSlashes, OnClose
from .observability import Metrics, RequestRecord, lifecycle_metrics, pool_metrics
from .routes import (
    STATE_KEY,
    audio,
    batches,
    conversations,
    dashboard,
    declare,
    docs,
    embeddings,
    files,
    fleet,
    internal,
    keys,
    lifecycle,
    models,
    native,
    offered_key,
    rerank,
    sees_everything,
    state,
)
from .routes.apis import ANTHROPIC, APIS, api_of
from .sealing import Seal
from .services.inflight import InFlight
from .services.models import ModelRegistry, ServedModel
from .settings import ModelSettings, Settings, is_loopback
from .store import Store, open_store

if TYPE_CHECKING:  # built only with their flags: traces, the supervisor, the fleet, several workers
    from .fleet.front import FleetFront
    from .siblings import LaneMark, Siblings
    from .supervisor.client import SupervisorClient
    from .tracing import Tracing

log = logging.getLogger("api_like_oai")
YIELD_WAIT_SECONDS = 30.0  # a stopped batch line waits at most this long for the request it yielded to
# the device files of a GPU llama.cpp may decode on: NVIDIA's, AMD's (ROCm), a render node (Vulkan, SYCL)
GPU_DEVICES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dri/renderD*")


@dataclass(frozen=True)
class AppState:
    """What every request of the app shares, fixed when the app is built (`app.extensions`)."""

    settings: Settings
    registry: ModelRegistry
    inflight: InFlight
    metrics: Metrics
    seal: Seal  # signs thoughts handed out and checks them when they come back
    store: Store | None = None  # stored responses and conversations (None: --store none)
    siblings: Siblings | None = None  # the other workers, with --workers > 1
    gate: Gate = Gate()  # the keys requests may bring, managed ones in the store's key book
    supervisor: SupervisorClient | None = None  # the models the proxy starts itself
    tracing: Tracing | None = None  # with --otlp-endpoint (opentelemetry imported only then)
    history: History | None = None  # the dashboard's charts and recent errors, kept in the store
    fleet: FleetFront | None = None  # with --fleet: the boxes, placement, the relay


def create_app(settings: Settings, *, run_dir: str | None = None, supervisor_socket: str | None = None) -> Flask:
    """The app; `run_dir` (server.py's, with several workers) is where this worker meets the others;
    `supervisor_socket` where it asks the supervisor for the models the proxy starts (server.py's too)."""
    app = ProxyFlask(__name__)
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.json.compact = True
    app.config["MAX_CONTENT_LENGTH"] = settings.limits.max_body_bytes
    app.extensions[STATE_KEY] = _app_state(settings, run_dir, supervisor_socket)
    _register_blueprints(app, settings)
    # /metrics and /metrics/pool (routes/internal.py) answer what only the app knows: every model's and
    # key's counts; the model-server protocol's gauges an inference pool's endpoint picker reads.
    app.extensions[internal.METRICS_KEY] = _metrics
    app.extensions[internal.POOL_METRICS_KEY] = _pool_metrics
    app.extensions[dashboard.VIEW_KEY] = LiveView(Collector(_live_sources(state(app))), state(app).history)
    _register_hooks(app, settings)
    _register_error_handlers(app)
    app.wsgi_app = CollapseSlashes(OnClose(app.wsgi_app))
    return app


def _register_hooks(app: Flask, settings: Settings) -> None:
    """What runs before and after every request: the origin and host checks, the access record, the key."""
    # Order matters: a web page of a foreign origin is refused first, before any work (a browser sends a
    # "simple" text/plain or form POST without a preflight); then CORS preflight is answered before the
    # key check (browsers send no key on it).
    # After a request, in this order: the record closes first (Flask ran the last registered first).
    before, after = [_refuse_foreign_origins(settings.cors_origins)], [_close_record]
    if _reachable_only_here(settings) and not state(app).gate.required:
        before.append(_refuse_rebound_names(settings.allowed_hosts))
    before.append(_read_chunked_body_whole)
    if settings.cors_origins:
        before.append(_cors_preflight(settings.cors_origins))
        after.append(_cors_headers(settings.cors_origins))
    # The record opens before the key check, so a refused key is in the access log and the metrics.
    before.append(_open_record)
    if settings.fleet is not None:  # before the key check: a fleet call's client was checked at its front
        before.append(fleet.trust_fleet_call)
    before.append(_batch_line)  # a batch's line run in-process: its key is the batch's
    if settings.fleet is not None and settings.fleet.advertise and not state(app).gate.required:
        before.append(_only_fleet_calls)  # a box with no keys of its own: closed to all but its fronts
    if state(app).gate.required:
        before.append(_identify_caller)
        after.insert(1, _rate_limit_headers)
    if settings.fleet is not None:
        before.append(fleet.forward_elsewhere)
    app.before_request(_before_in_turn(before))
    app.after_request(_after_in_turn(after))


def _before_in_turn(hooks: list):
    """One Flask hook running `hooks` in order before a request; the first that answers (returns a
    response) ends the run. One hook, not one each: Flask asks of every hook, on every request, whether
    it is a coroutine (issue 54: the first token's path, where every call costs several times its warm
    time on a core that was idle)."""
    hooks = tuple(hooks)

    def before_request():
        # Each hook is given the request itself (its parameter `request` stands for Flask's proxy of it):
        # through the proxy, every `request.` is three calls of Werkzeug's (issue 54 again).
        current = request._get_current_object()
        for hook in hooks:
            answer = hook(current)
            if answer is not None:
                return answer
        return None

    return before_request


def _after_in_turn(hooks: list):
    """One Flask hook running `hooks` in order after a request, each given the response the one before returned."""
    hooks = tuple(hooks)

    def after_request(response: Response) -> Response:
        for hook in hooks:
            response = hook(response)
        return response

    return after_request


def _register_blueprints(app: Flask, settings: Settings) -> None:
    """Every API's routes, and llama.cpp's own and the fleet's when they are on."""
    api_blueprints = [importlib.import_module(api.blueprint).bp for api in APIS]  # each API's views (routes/apis.py)
    for blueprint in (
        *api_blueprints,
        embeddings.bp,
        models.bp,
        internal.bp,
        docs.bp,
        conversations.bp,
        keys.bp,
        lifecycle.bp,
        dashboard.bp,
        rerank.bp,
        audio.bp,
        files.bp,
        batches.bp,
    ):
        app.register_blueprint(blueprint)
    if settings.native_api:
        app.register_blueprint(native.bp)
    if settings.fleet is not None:
        app.register_blueprint(fleet.bp)


def _app_state(settings: Settings, run_dir: str | None, supervisor_socket: str | None = None) -> AppState:
    inflight = InFlight()
    registry, metrics = build_registry(settings), Metrics()
    siblings = None
    if run_dir is not None:
        from .siblings import Siblings  # only with several workers

        siblings = Siblings(
            run_dir,
            {
                "stop": lambda _: inflight.stop_all(),
                "stop_one": inflight.stop_one,
                "requests": lambda _: [row.to_wire() for row in live_requests(inflight.requests.records())],
                "held": lambda arg: _heard_held(registry, arg),
                "sockets": inflight.sockets.of,  # a key's Responses WebSockets open (their bound)
            },
        )
    store = open_store(settings.store, settings.limits.max_body_bytes)
    seal = Seal(*installation.seal_key_sources(store, settings.fleet.secret if settings.fleet is not None else None))
    gate = Gate(
        settings.api_keys,
        settings.admin_keys,
        open_book(store),
        settings.limits_on_store_error,
        settings.metrics_per_key,
        settings.api_key_priority,
    )
    supervisor = None
    if supervisor_socket is not None:
        from .supervisor.client import SupervisorClient

        supervisor = SupervisorClient(supervisor_socket)
    _wire_slot_queues(registry, metrics, siblings, settings)
    return AppState(
        settings,
        registry,
        inflight,
        metrics,
        seal,
        store,
        siblings,
        gate,
        supervisor,
        _tracing(settings),
        History(open_buckets(store)),
        _fleet_front(settings),
    )


def _wire_slot_queues(registry: ModelRegistry, metrics: Metrics, siblings: Siblings | None, settings: Settings) -> None:
    """Each model's slot queue counting its waiters in the metrics (a request without a key's too), leaving
    --batch-free-slots free of batch lines while people use it, yielding to them by --batch-yield and,
    with several workers, preempting across them."""
    lane = None
    if siblings is not None:
        from .siblings import LaneMark

        lane = LaneMark(siblings.run_dir)
    for model in registry.models.values():
        model.places.on_wait = metrics.slot_waiting_noted
        model.places.yielding = yields_to_people(settings.batch_yield, model.settings)
        model.places.free_for_people = settings.batch_free_slots
        if settings.batch_free_slots is None:  # yielding (a CPU box): one line beside people, else one slot free
            model.places.free_for_people = KEPT_FREE_YIELDING if model.places.yielding else KEPT_FREE
        if lane is not None:
            model.places.on_background = lane.noted
            model.places.elsewhere = _told_elsewhere(siblings, lane, model.name)


def yields_to_people(choice: str, model: ModelSettings) -> bool:
    """--batch-yield for `model`: on, off, or auto: on when its llama-servers run on this machine (the
    proxy starts them, or their addresses are loopback) and it has no GPU device (a CPU-only box, where
    every decoding slot shares the same cores), off otherwise (a GPU decodes lines beside a prompt for
    little, and stopping them loses their progress; a server elsewhere is not known)."""
    if choice != "auto":
        return choice == "on"
    local = model.launch is not None or all(is_loopback(urlsplit(url).hostname or "") for url in model.upstreams)
    return model.kind == "llamacpp" and local and not has_gpu()


def has_gpu() -> bool:
    """Whether this machine has a device llama.cpp may decode on besides its CPU: an NVIDIA or AMD GPU's
    device file, a render node (Vulkan, SYCL), or a Mac (Metal)."""
    return sys.platform == "darwin" or any(glob.glob(pattern) for pattern in GPU_DEVICES)


def _told_elsewhere(siblings: Siblings, lane: LaneMark, name: str):
    """SlotQueue.elsewhere for the model `name`: while another worker runs batch lines, the others told
    that a request of a key's priority came and holds `running` of its slots here with the others (the
    runner may preempt a line), and told again when it ends; whether they were told."""

    def tell(running: int, came: bool, starting: int = 0) -> bool:
        if came and not lane.elsewhere():
            return False
        siblings.tell("held", {"model": name, "held": running, "came": came, "starting": starting, "worker": os.getpid()})
        return True

    return tell


def _heard_held(registry: ModelRegistry, told) -> bool:
    """A sibling's "held": whether a background generation of its model was asked to stop here."""
    model = registry.models.get(told["model"])
    return model is not None and model.places.heard(
        told["worker"], int(told["held"]), bool(told["came"]), int(told.get("starting", 0))
    )


def _live_sources(shared: AppState) -> Sources:
    """What the dashboard's live frame reads of the app: every worker's requests, the models and their
    upstreams, the supervisor's status, the fleet's records."""

    def requests() -> list[LiveRequest]:
        own = live_requests(shared.inflight.requests.records())
        if shared.siblings is None:
            return own
        return own + [LiveRequest.from_wire(row) for rows in shared.siblings.ask("requests") for row in rows]

    supervisor, fleet_front, store = shared.supervisor, shared.fleet, shared.store
    return Sources(
        requests,
        lambda: shared.registry.models.values(),
        (lambda: supervisor.ask("status")) if supervisor is not None else (lambda: None),
        (lambda: fleet_front.membership.current()) if fleet_front is not None else None,
        (lambda: batch_progress(store, time.time())) if store is not None else list,
    )


def _fleet_front(settings: Settings):
    if settings.fleet is None:
        return None
    from .fleet.front import FleetFront  # only with --fleet: it brings the redis client

    return FleetFront(settings.fleet, connect_timeout=settings.connect_timeout, read_timeout=settings.read_timeout)


def _tracing(settings: Settings):
    if settings.otlp_endpoint is None:
        return None
    from .tracing import Tracing  # only with traces on: the `otel` extra (arguments.py checked it is installed)

    return Tracing(settings.otlp_endpoint)


def _metrics():
    shared = state()
    text = generate_latest(shared.metrics.collected())
    if shared.supervisor is not None:
        text += lifecycle_metrics(shared.supervisor.ask("status"))
        text += pool_metrics(shared.supervisor.ask("occupancy"))
    if shared.fleet is not None:
        from .fleet.metrics import fleet_metrics

        text += fleet_metrics(shared.fleet.membership.current())
    if shared.settings.upstream_metrics:
        from .upstream_metrics import upstream_metrics

        text += upstream_metrics(
            [
                (model.name, client.base_url, client.api_key)
                for model in shared.registry.models.values()
                if model.upstream.capabilities.metrics
                for client in model.upstream.servers()
            ]
        )
    return Response(text, mimetype=CONTENT_TYPE_LATEST)


def _pool_metrics():
    """The model-server protocol's gauges alone (observability.pool_metrics): what an inference pool's
    endpoint picker reads, without the rest of /metrics. Empty where the proxy starts no model."""
    shared = state()
    text = pool_metrics(shared.supervisor.ask("occupancy")) if shared.supervisor is not None else b""
    return Response(text, mimetype=CONTENT_TYPE_LATEST)


def _open_record(request):
    declared = declare.of_request()
    if declared is not None and not declared.recorded:  # the probes, the documents, the dashboard's files
        return
    shared = state()
    rule = request.url_rule
    record = g.record = RequestRecord(
        rule.rule if rule else "unmatched", shared.metrics, shared.settings.log_format, live_requests=shared.inflight.requests
    )
    if shared.tracing is not None:
        record.tracing, record.traceparent = shared.tracing, request.headers.get("traceparent")
    record.on_close.append(shared.history.add)
    record.priority = asked(request.environ.get("HTTP_PRIORITY"))  # for clients that set no service_tier
    # A record leaves the live requests when it closes; a stream never iterated never closes its record.
    request.environ[ON_CLOSE].append(functools.partial(shared.inflight.requests.discard, record))


def _close_record(response: Response) -> Response:
    record = g.get("record")
    # streams close their own, when they end (SSE, Ollama's NDJSON: else a stream's usage is never counted)
    if record is not None and response.mimetype not in ("text/event-stream", "application/x-ndjson"):
        record.status = response.status_code
        record.close()
    return response


def _refuse_foreign_origins(origins: tuple[str, ...]):
    """A request that says it comes from a web page (`Origin`) whose origin is neither this proxy's own
    (the dashboard, the docs) nor one --cors-origins allows is refused, 403, whatever its method and
    content type: CORS alone only hides the answer from the page, while the request has done its work.
    Requests without `Origin` (curl, the SDKs, agents) are not from a page and pass."""

    def refuse_foreign_origin(request):
        origin = request.environ.get("HTTP_ORIGIN")  # the header, without werkzeug's header view of the environ
        if origin is None or "*" in origins or origin in origins or _same_origin(origin, request.host):
            return None
        raise PermissionDenied(
            f"requests from a web page of {origin.partition('://')[2][:100]!r} are refused: its origin is not this proxy's, "
            "nor one --cors-origins allows"
        )

    return refuse_foreign_origin


def _reachable_only_here(settings: Settings) -> bool:
    """Whether every address the proxy listens on is a loopback one (the default)."""
    return all(is_loopback(host) for host, _ in settings.listeners())


def _refuse_rebound_names(allowed: tuple[str, ...]):
    """A keyless proxy on loopback answers only requests sent to an IP address, to `localhost` (or a
    name under it, which browsers keep on loopback), to this machine's name or to a name --allowed-hosts
    lists (403 else). A web page served from a name that its DNS then points at 127.0.0.1 (DNS
    rebinding) is of the same origin as the proxy to the browser, so the Origin check lets it through;
    its Host header still names it."""
    # this machine's own name too (Ollama's check allows it): no page's DNS answers for it
    names = frozenset(name.lower() for name in (*allowed, socket.gethostname()))

    def refuse_rebound_name(request):
        name = _hostname(request.host)
        if "*" in names or name in names or _never_rebound(name):
            return None
        raise PermissionDenied(
            f"requests sent to the name {name[:100]!r} are refused: a proxy with no API key on a loopback address "
            "answers requests for localhost or an IP address only (a web page can point any other name at it, "
            "DNS rebinding); start it with --allowed-hosts naming it, or give it keys"
        )

    return refuse_rebound_name


@functools.lru_cache(maxsize=64)
def _never_rebound(name: str) -> bool:
    """Whether a browser could not have reached `name` through a name a web page's DNS controls."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _hostname(host: str) -> str:
    """A Host header's name alone, lower-cased: `[::1]:8081` -> `::1`, `Example:80` -> `example`."""
    host = host.lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _read_chunked_body_whole(request):
    """A chunked JSON body (no Content-Length) read here, a 413 past --max-body-bytes: werkzeug's limited
    stream stops at the limit without saying so, and the view read a cut body (a 400 for broken JSON).
    A multipart form (audio) has its own limit, set by its view, and its own parser."""
    if "chunked" not in request.environ.get("HTTP_TRANSFER_ENCODING", "").lower() or request.content_length is not None:
        return
    if request.mimetype == "multipart/form-data":
        return
    limit = request.max_content_length
    if limit is not None and len(request.get_data(cache=True)) >= limit:
        raise PayloadTooLarge("request body too large")


def _same_origin(origin: str, host: str) -> bool:
    """`origin` (scheme://host[:port]) names the host the request was sent to (its Host header)."""
    scheme, _, address = origin.partition("://")
    return scheme in ("http", "https") and bool(address) and address.lower() == host.lower()


def _cors_preflight(origins: tuple[str, ...]):
    def answer_preflight(request):
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            response = Response(status=204)
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = request.headers.get(
                "Access-Control-Request-Headers", "Authorization, Content-Type"
            )
            response.headers["Access-Control-Max-Age"] = "600"
            return response
        return None

    return answer_preflight


def _cors_headers(origins: tuple[str, ...]):
    def add_cors_headers(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if "*" in origins:
            response.headers["Access-Control-Allow-Origin"] = "*"
        elif origin and origin in origins:  # an allowed origin, never an arbitrary one reflected
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
        return response

    return add_cors_headers


def build_registry(settings: Settings) -> ModelRegistry:
    def client(url: str, api_key: str = "") -> LlamaCppClient:
        return LlamaCppClient(url, connect_timeout=settings.connect_timeout, read_timeout=settings.read_timeout, api_key=api_key)

    def served(model: ModelSettings) -> ServedModel:
        # The one place the kind is read: after this, callers ask the upstream's capabilities.
        if model.kind == "openai":
            upstream = OpenAIUpstream(
                model.upstreams[0], connect_timeout=settings.connect_timeout, read_timeout=settings.read_timeout, name=model.name
            )
            return ServedModel(model, upstream, settings.images)
        # The llama-servers the proxy starts take only its own key (supervisor/spec.py).
        key = settings.supervisor.api_key if model.launch is not None and settings.supervisor is not None else ""
        drafting = model.launch.drafting_urls if model.launch is not None else ()
        return ServedModel(
            model,
            UpstreamPool(
                [client(url, key) for url in model.upstreams], routing=model.routing, name=model.name, drafting=drafting
            ),
            image_limits=settings.images,
        )

    served = [served(model) for model in settings.models]
    return ModelRegistry(served, strict=settings.strict_model_names, default=settings.default_model)


def _identify_caller(request):
    """Who the request's key says the caller is (401 for no or a wrong key), as `g.ticket`: the
    request's passage through its key's limits, finished (usage written) when its record closes."""
    # Public routes ask no key (their declarations say so: routes/declare.py); a fleet call's front checked it.
    # A batch's line comes with its key's ticket already (_batch_line).
    if request.method == "OPTIONS" or declare.is_public() or g.get("fleet_call") or "ticket" in g:
        return
    shared = state()
    ticket = Ticket(shared.gate.identify(offered_key()), shared.gate, shared.metrics)
    g.ticket = ticket
    record = g.get("record")
    if record is not None:
        record.key_name = ticket.caller.name
    if record is not None and ticket.caller.record is not None:
        ticket.record = record
        record.on_close.append(ticket.finish)


def _only_fleet_calls(request):
    """A box of a fleet (--advertise) given no keys of its own takes only its fronts' calls (the fleet
    secret) and a batch's lines; its public probes (/health: its member's and the orchestrator's) stay
    open. Keys of its own (--api-key, --admin-key) open it to direct calls that bring them."""
    if (
        g.get("fleet_call")
        or request.environ.get(BATCH_LINE) is not None
        or request.method == "OPTIONS"
        or declare.is_public()  # the declarations' public routes (and /metrics/pool with --open-pool-metrics)
    ):
        return
    raise AuthenticationFailed(
        "this instance is a box of a fleet: it takes calls only from the fleet's fronts (send them there), "
        "or with a key of its own (--api-key-file) if it was given one"
    )


def _batch_line(request):
    """A batch's line, run by the batch runner through the app (batch/runner.call): the caller is the
    batch's key as the runner gives it in the WSGI environ (never from a header), at the background
    priority, with its limits and usage as any request's."""
    on_behalf = request.environ.get(BATCH_LINE)
    if on_behalf is None:
        return
    shared = state()
    ticket = g.ticket = Ticket(on_behalf.caller, shared.gate, shared.metrics)
    record = g.get("record")
    if record is not None:  # its usage, metrics and log line apart from interactive requests'
        record.endpoint = BATCH_API + record.endpoint
        record.key_name = ticket.caller.name
        if ticket.caller.record is not None:
            ticket.record = record
            record.on_close.append(ticket.finish)


def start_batch_runner(app: Flask, run_dir: str | None = None) -> None:
    """This worker's batch runner (batch/runner.py), started by the server once the app is built; none
    with --store none (batches live in the store). With several workers (`run_dir`), one of them runs
    the instance's batches at a time."""
    shared = state(app)
    if shared.store is None:
        return
    from .batch.runner import Runner, one_per_instance

    def slots() -> int:
        """The most slots a model has: how many lines to keep in flight (1 until a /props says)."""
        for model in shared.registry.models.values():
            if model.upstream.slot_count() is None and model.facts is not None:
                model.facts.known_soon()  # /props asked at most every 10 s while it does not answer
        return max((model.upstream.slot_count() or 1 for model in shared.registry.models.values()), default=1)

    runner = Runner(app, shared.store, shared.gate, slots, shared.metrics, _lane(shared), one_per_instance(run_dir))
    runner.until_answered = functools.partial(_until_answered, shared.registry)
    shared.inflight.on_drain.append(runner.let_go)  # a graceful stop gives its batches back at once
    runner.start()


def _until_answered(registry: ModelRegistry, requested) -> None:
    """Runner.until_answered: a stopped line is run again once the request it yielded to answers (its
    preparation's CPU would delay that request's first token), at most YIELD_WAIT_SECONDS later."""
    try:
        model, _ = registry.lookup(requested if isinstance(requested, str) else None)
    except ProxyError:
        return
    model.places.until_answered(YIELD_WAIT_SECONDS)


def _lane(shared: AppState):
    """lane_open(model asked) for the batch runner: whether the supervisor's models let a line for it
    run now (batch.runner.may_run), their status asked at most once a second; always without one."""
    from .batch.runner import may_run

    supervisor = shared.supervisor
    if supervisor is None:
        return lambda requested: True
    asked: list = [0.0, {}]

    def lane_open(requested) -> bool:
        try:
            model, _ = shared.registry.lookup(requested if isinstance(requested, str) else None)
        except ProxyError:
            return True  # the line's own route answers it (a 404)
        if time.monotonic() - asked[0] >= 1.0:
            try:
                asked[:] = [time.monotonic(), supervisor.ask("status")["models"]]
            except ProxyError:
                return True  # no status: the line's admission meets what is wrong
        return may_run(asked[1], model.name)

    return lane_open


def _rate_limit_headers(response: Response) -> Response:
    """Every answer to a key with limits says what is left (OpenAI's headers, Anthropic's on its API)."""
    ticket = g.get("ticket")
    if ticket is not None:
        response.headers.update(ticket.headers(api_of(request.path) is ANTHROPIC))
    return response


def _register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ProxyError)
    def proxy_error(exc: ProxyError):
        # Each API's errors in its own shape: Anthropic's and Ollama's on their paths, OpenAI's everywhere else.
        # A fleet call's error goes back to a front's client, maybe a tenant: a box's llama-server addresses never do.
        shown = exc if sees_everything() and not g.get("fleet_call") else exc.without_addresses()
        status, body = api_of(request.path).error(shown)
        record = g.get("record")
        if record is not None:
            record.fail(status, exc.code, exc.message)
        if status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.path, status, exc.message)
        # The code in a header as well, for every API (Anthropic's and Ollama's bodies have no code).
        return jsonify(body), status, {**exc.headers, **({ERROR_CODE_HEADER: exc.code} if exc.code else {})}

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return proxy_error(_from_http(exc))

    @app.errorhandler(Exception)
    def unexpected_error(exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.path)
        return proxy_error(ProxyError("internal error in the proxy; see its log"))


def _from_http(exc: HTTPException) -> ProxyError:
    if exc.code == 404:
        return NotFound(f"no route {request.method} {request.path}")
    if exc.code == 413:
        return PayloadTooLarge("request body too large")
    if exc.code == 405:
        error = InvalidRequest(f"method {request.method} is not allowed on {request.path}")
        error.status = 405
        allowed = sorted(getattr(exc, "valid_methods", None) or ())
        error.headers = {"Allow": ", ".join(allowed)} if allowed else {}  # RFC 9110: a 405 says what is allowed
        return error
    error = ProxyError(exc.description or exc.name)
    error.status = exc.code or 500
    return error
