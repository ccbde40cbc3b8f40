"""WSGI middleware applied around the Flask app, before any routing."""

from __future__ import annotations

import re

REPEATED_SLASHES = re.compile(r"/{2,}")


def collapse_slashes(path: str) -> str:
    """`path` with each run of slashes made one: a base URL with a trailing slash gives `/v1//models`."""
    return REPEATED_SLASHES.sub("/", path)


class CollapseSlashes:
    """Routes `/v1//models` and `//v1/chat/completions` like their single-slash paths, for every route
    and method (Werkzeug would answer them with a redirect, which POST clients do not all follow)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if "//" in path:
            environ["PATH_INFO"] = collapse_slashes(path)
        return self.wsgi_app(environ, start_response)


ON_CLOSE = "api_like_oai.on_close"


class OnClose:
    """Runs what a request registered in `environ[ON_CLOSE]` once its response is closed: a plain answer
    once written, a stream at its end or when its client went away, even one never iterated (a
    streamed generator's own `finally` would not run then). A request that registered nothing gets its
    body back untouched."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        callbacks = environ[ON_CLOSE] = []
        try:
            body = self.wsgi_app(environ, start_response)
        except BaseException:
            _run_all(callbacks)
            raise
        return _ClosingBody(body, callbacks) if callbacks else body


class _ClosingBody:
    __slots__ = ("body", "callbacks")

    def __init__(self, body, callbacks: list):
        self.body, self.callbacks = body, callbacks

    def __iter__(self):
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close:
                close()
        finally:
            _run_all(self.callbacks)


def _run_all(callbacks: list) -> None:
    while callbacks:
        callbacks.pop()()
