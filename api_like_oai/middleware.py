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
