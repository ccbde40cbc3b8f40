"""Serving: gunicorn with an event-driven (gevent) worker in production, Werkzeug's server with --debug.

The app is built in each worker, never in gunicorn's master: the gevent worker monkey-patches
`socket`, `ssl`, `threading` and friends when it starts, and everything that opens a connection,
takes a lock or starts a thread (urllib3, Flask, prometheus_client, the app) must be imported
after that. So this module and the master import only the settings; `make_app` runs in the worker.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import resource
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable

from .settings import Settings, is_loopback

log = logging.getLogger("api_like_oai")

WORKER_CLASSES = {"gevent": "api_like_oai.worker.EventWorker", "gthread": "gthread"}
# gevent: the most connections one worker serves at once (each stream also holds one upstream
# connection, so a worker needs about twice as many file descriptors; see _raise_file_limit).
EVENT_WORKER_CONNECTIONS = 10_000


def serve(settings: Settings, make_app: Callable[..., object]) -> None:
    warn_if_open_to_the_network(settings)
    run_dir = tempfile.mkdtemp(prefix="api-like-oai-")
    owner = os.getpid()
    supervisor = member = bridges = None
    try:
        if any(server.stdio for server in settings.mcp.named_servers):
            from .mcp.stdio import Bridges

            bridges = Bridges(settings.mcp, settings.log_level)
            make_app = functools.partial(make_app, mcp_bridges=bridges.endpoints)
        if settings.supervisor is not None:
            from .supervisor import launch

            supervisor = launch.Supervised(settings.supervisor, run_dir, settings.log_level)
            make_app = functools.partial(make_app, supervisor_socket=supervisor.socket_path)
        member = _join_fleet(settings, run_dir, supervisor.socket_path if supervisor is not None else None)
        _serve(settings, make_app, run_dir)
    finally:
        if os.getpid() == owner:  # a worker leaves through here too (SystemExit), and must not do this
            if member is not None:
                from .supervisor.launch import stop as stop_process

                stop_process(member, 5)
            if supervisor is not None:
                supervisor.stop(settings.supervisor.stop_timeout + 5)
            if bridges is not None:
                bridges.stop()
            shutil.rmtree(run_dir, ignore_errors=True)


def _join_fleet(settings: Settings, run_dir: str, supervisor_socket: str | None):
    """A box (--fleet with --advertise): its member process, which publishes it in Redis; else None."""
    if settings.fleet is None or settings.fleet.advertise is None:
        return None
    from .fleet import launch as fleet_launch

    static = [model.name for model in settings.models if model.launch is None]
    slot_dir = settings.supervisor.slot_dir if settings.supervisor is not None else None
    spread = {model.name: model.boxes for model in settings.models if model.boxes > 1}
    default = settings.default_model or (settings.models[0].name if settings.models else None)  # as its registry's
    return fleet_launch.start(settings.fleet, run_dir, supervisor_socket, static, slot_dir, settings.log_level, spread, default)


def _serve(settings: Settings, make_app: Callable[..., object], run_dir: str) -> None:
    if settings.debug:
        app = make_app()
        log_start(app, settings)
        app.run(host=settings.host, port=settings.port, threaded=True, debug=True, use_reloader=False)
        return
    if settings.workers > 1:
        # prometheus_client's multiprocess mode: each worker writes its metrics to files here and
        # /metrics sums them. Read when prometheus_client is imported, i.e. in the workers.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = run_dir
    application = _gunicorn_application()(settings, make_app, run_dir)
    gc.freeze()  # what the master loaded stays shared with the workers: their GC never writes to it
    application.run()


def warn_if_open_to_the_network(settings: Settings) -> None:
    """Warn, once at start-up, when the proxy listens beyond this machine with no API key: anyone
    who can reach the address can then use the models (LiteLLM's proxy refuses to start so; this
    one starts, since a private network may be what the user means, but says so)."""
    if settings.api_keys or settings.admin_keys or (settings.fleet is not None and settings.fleet.advertise):
        return  # a fleet's box with no keys takes only its fronts' calls (app._only_fleet_calls)
    for host, port in settings.listeners():
        if not is_loopback(host):
            log.warning(
                "api-like-oai listens on %s port %s with no API key: anyone who can reach this address "
                "can use the models. Set --api-key-file (or API_LIKE_OAI_API_KEY), or listen on 127.0.0.1.",
                host,
                port,
            )


def log_start(app, settings: Settings) -> None:
    from .routes import state  # in the worker, which has made the app

    registry = state(app).registry
    for model in registry.models.values():
        if model.upstream.capabilities.renders_prompts or model.settings.launch is not None:
            continue  # an OpenAI-compatible upstream formats chats itself; a started model may not be loaded
        try:
            model.formatter()  # logs the chosen template source
        except Exception as exc:  # noqa: BLE001 - the upstream may come up later; retried per request
            log.info(
                "model %s: chat template not resolved yet (%s); will retry on the first request",
                model.name,
                getattr(exc, "message", exc),
            )
    log.info(
        "api-like-oai listening on http://%s:%d (%s worker, pid %d), upstream %s",
        settings.host,
        settings.port,
        settings.worker_class,
        os.getpid(),
        ", ".join(u for m in settings.models for u in m.upstreams),
    )


def _gunicorn_application():
    from gunicorn.app.base import BaseApplication

    class GunicornServer(BaseApplication):
        def __init__(self, settings: Settings, make_app: Callable[..., object], run_dir: str):
            self.settings = settings
            self.make_app = make_app
            self.run_dir = run_dir
            super().__init__()

        def load_config(self):
            options = _gunicorn_options(self.settings, self.run_dir)
            if "control_socket_disable" in self.cfg.settings:
                # gunicorn >= 24 opens a control socket at one fixed path per user; two proxies
                # on one machine would fight over it, and nothing here uses it.
                options["control_socket_disable"] = True
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):
            """The WSGI app, built in the worker process (after the gevent worker patched it)."""
            _raise_file_limit()
            run_dir = self.run_dir if self.settings.workers > 1 else None
            app = self.make_app(run_dir=run_dir)
            log_start(app, self.settings)
            from .app import start_batch_runner  # in the worker: the master imports no app

            start_batch_runner(app, run_dir)
            return CountedApp(app)

    return GunicornServer


def _gunicorn_options(settings: Settings, run_dir: str) -> dict:
    """gunicorn's settings for the proxy's master and workers."""
    options = {
        "bind": [f"{settings.host}:{settings.port}", *settings.ollama_listen],
        "workers": settings.workers,
        "worker_class": WORKER_CLASSES[settings.worker_class],
        "preload_app": False,
        "timeout": 0,
        "keepalive": 5,
        "loglevel": settings.log_level,
        "accesslog": None,
        "child_exit": _forget_worker(run_dir, settings.workers > 1),
    }
    if settings.worker_class == "gevent":
        # our worker drains within grace_period and ends the streams left itself; gunicorn's
        # master waits a little longer before it kills the worker
        return options | {"worker_connections": EVENT_WORKER_CONNECTIONS, "graceful_timeout": int(settings.grace_period) + 5}
    return options | {
        "threads": settings.threads,
        "graceful_timeout": int(settings.grace_period) + 3,
        "post_worker_init": _end_streams_after_grace_period(settings),
    }


class CountedApp:
    """The WSGI app, counting the requests being answered (a stream counts until it ends), so a
    worker that is shutting down knows when it is done without waiting for idle keep-alive connections."""

    def __init__(self, app):
        self.app = app
        self.in_flight = 0

    def __call__(self, environ, start_response):
        self.in_flight += 1
        try:
            return _Counted(self.app(environ, start_response), self)
        except BaseException:
            self.in_flight -= 1
            raise


class _Counted:
    """A response body whose close() ends the count; iterating it is the inner body's own iterator."""

    __slots__ = ("body", "counter", "closed")

    def __init__(self, body, counter: CountedApp):
        self.body, self.counter, self.closed = body, counter, False

    def __iter__(self):
        return iter(self.body)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.counter.in_flight -= 1
        close = getattr(self.body, "close", None)
        if close:
            close()


def _raise_file_limit() -> None:
    """Every open stream holds two sockets (client and upstream): lift the soft limit on open files
    to the hard one, so the default 1024 of many systems does not cap a worker at ~500 streams."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)


def _forget_worker(run_dir: str, multiprocess: bool):
    """A gunicorn child_exit hook (in the master): a dead worker's live gauges and control socket go."""

    def forget(server, worker):
        if multiprocess:
            from prometheus_client import multiprocess as prometheus_multiprocess

            prometheus_multiprocess.mark_process_dead(worker.pid, run_dir)
        try:
            os.unlink(os.path.join(run_dir, f"worker-{worker.pid}.sock"))
        except FileNotFoundError:
            pass

    return forget


def _end_streams_after_grace_period(settings: Settings):
    """gthread only, a gunicorn post_worker_init hook: on SIGTERM the app drains (InFlight.drain, as the
    gevent worker's does), in-flight streams get `grace_period` seconds, then end with an error event
    (gunicorn itself stops accepting and waits)."""

    def install(worker):
        stop_accepting = signal.getsignal(signal.SIGTERM)
        from .routes import state  # in the worker, which has made the app

        inflight = state(worker.wsgi.app).inflight

        def on_sigterm(signum, frame):
            # in a thread, not this handler: a batch's claim is given back through the store; not a
            # daemon, so that the worker's exit waits for it
            threading.Thread(target=inflight.drain, name="drain").start()
            timer = threading.Timer(settings.grace_period, inflight.shut_down)
            timer.daemon = True
            timer.start()
            if callable(stop_accepting):
                stop_accepting(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

    return install
