"""Serving: gunicorn's threaded worker in production, Werkzeug's server only with --debug."""

from __future__ import annotations

import logging
import signal
import threading

from .settings import Settings

log = logging.getLogger("api_like_oai")


def serve(app, settings: Settings) -> None:
    _log_start(app, settings)
    if settings.debug:
        app.run(host=settings.host, port=settings.port, threaded=True, debug=True, use_reloader=False)
        return
    _GunicornServer(app, settings).run()


def _log_start(app, settings: Settings) -> None:
    registry = app.extensions["api_like_oai"].registry
    for model in registry.models.values():
        try:
            model.formatter()  # logs the chosen template source
        except Exception as exc:  # noqa: BLE001 - the upstream may come up later; retried per request
            log.info("model %s: chat template not resolved yet (%s); will retry on the first request",
                     model.name, getattr(exc, "message", exc))
    log.info("api-like-oai listening on http://%s:%d, upstream %s", settings.host, settings.port,
             ", ".join(u for m in settings.models for u in m.upstreams))


def _gunicorn_application():
    from gunicorn.app.base import BaseApplication

    class GunicornServer(BaseApplication):
        def __init__(self, app, settings: Settings):
            self.application = app
            self.settings = settings
            super().__init__()

        def load_config(self):
            options = {"bind": f"{self.settings.host}:{self.settings.port}",
                       "workers": self.settings.workers, "threads": self.settings.threads,
                       "worker_class": "gthread", "timeout": 0,
                       # our own timer ends streams at grace_period; gunicorn waits a little longer
                       # so their error events are sent before it kills the worker
                       "graceful_timeout": int(self.settings.grace_period) + 3,
                       "post_worker_init": _end_streams_after_grace_period(self.application, self.settings),
                       "keepalive": 5, "loglevel": self.settings.log_level, "accesslog": None}
            if "control_socket_disable" in self.cfg.settings:
                # gunicorn >= 24 opens a control socket at one fixed path per user; two proxies
                # on one machine would fight over it, and nothing here uses it.
                options["control_socket_disable"] = True
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):
            return self.application

    return GunicornServer


def _end_streams_after_grace_period(app, settings: Settings):
    """A gunicorn post_worker_init hook: on SIGTERM, in-flight streams get `grace_period` seconds,
    then end with an error event (gunicorn itself stops accepting and waits for them)."""

    def install(worker):
        stop_accepting = signal.getsignal(signal.SIGTERM)
        inflight = app.extensions["api_like_oai"].inflight

        def on_sigterm(signum, frame):
            timer = threading.Timer(settings.grace_period, inflight.shut_down)
            timer.daemon = True
            timer.start()
            if callable(stop_accepting):
                stop_accepting(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

    return install


def _GunicornServer(app, settings):  # noqa: N802 - reads as the class it builds
    return _gunicorn_application()(app, settings)
