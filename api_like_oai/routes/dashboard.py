"""The dashboard: its page at /ui (static files shipped in the package, under a strict Content
Security Policy), its one event stream (/v1/internal/events) and its per-request stop action.

The page and its files hold no data, so they are served to anyone, like /docs; everything the page
shows comes through the stream, which needs a key like any other route. The page reads the stream
with fetch() and sends the key in the Authorization header (EventSource cannot send headers, and a
key in a URL would end up in logs and histories)."""

from __future__ import annotations

import time
from pathlib import Path

from flask import Blueprint, Response, current_app, g, send_from_directory

from ..dashboard.live import for_viewer
from ..errors import InvalidRequest, NotFound
from ..services.inflight import ABSENT, NOT_GENERATING, STOPPED
from ..sse import json_bytes
from . import SSE_HEADERS, current_caller, sees_everything, state
from .declare import ADMIN, OWN, PUBLIC, route

bp = Blueprint("dashboard", __name__)

PAGE_PATH = "/ui"
PAGE_FILES = Path(__file__).resolve().parent.parent / "ui"
# Scripts, styles and connections from the proxy itself only: no inline script or style, nothing
# from elsewhere, no framing. A name or an error text that held markup could not run as script even
# if it reached the page as HTML (the page only ever sets textContent).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
SECONDS_BETWEEN_FRAMES = 1.0
FOUND_ORDER = (STOPPED, NOT_GENERATING, ABSENT)  # what one worker found outranks what the next did
PAGE = {"documented": False, "recorded": False}  # files holding no data, like /docs
VIEW_KEY = "api_like_oai.dashboard"  # where app.create_app keeps the LiveView in `app.extensions`


def is_page(path: str) -> bool:
    return path == PAGE_PATH or path.startswith(PAGE_PATH + "/")


@route(bp, PAGE_PATH, PAGE_PATH + "/", methods=("GET",), summary="The dashboard", access=PUBLIC, **PAGE)
def page():
    return _page_file("index.html")


@route(bp, PAGE_PATH + "/<path:name>", methods=("GET",), summary="The dashboard's files", access=PUBLIC, **PAGE)
def page_file(name: str):
    return _page_file(name)


def _page_file(name: str) -> Response:
    response = send_from_directory(PAGE_FILES, name, max_age=0)  # a name outside the folder is a 404
    response.headers.update(PAGE_HEADERS)
    return response


@route(
    bp,
    "/v1/internal/events",
    methods=("GET",),
    summary="The dashboard's stream: live requests every second, history when it changed (a key: its own)",
    access=OWN,
    media=(),
    stream="text/event-stream",
)
def events():
    """The dashboard's stream: `hello` (what the caller may do), then `live` every second and
    `history` when it changed (dashboard/live.py). It ends when the client goes away or the proxy
    shuts down."""
    caller, record, app_state = current_caller(), g.get("record"), state()
    sees_all = sees_everything(caller)
    view = current_app.extensions[VIEW_KEY]
    hello = {"key": caller.name, "can_act": sees_all, "log_prompts": app_state.settings.log_prompts}

    def frames():
        sent_history = None
        try:
            yield _frame("hello", hello)
            while not view.closed and not app_state.inflight.shutting_down:
                live, history = view.current()
                yield _frame("live", for_viewer(live, caller, sees_all))
                if history is not sent_history:
                    yield _frame("history", for_viewer(history, caller, sees_all))
                    sent_history = history
                time.sleep(SECONDS_BETWEEN_FRAMES)  # under gevent: this greenlet sleeps, the worker goes on
        finally:
            if record is not None:
                record.close()

    return Response(frames(), mimetype="text/event-stream", headers=SSE_HEADERS, direct_passthrough=True)


def _frame(event: str, payload: dict) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"


@route(
    bp,
    "/v1/internal/requests/<request_id>/stop",
    summary="End one request's generation now",
    access=ADMIN,
)
def stop_request(request_id: str):
    """End one request's generation now (as stop-generation does for all): it finishes with
    finish_reason "stop". In whichever worker it runs (the dashboard's stream lists every worker's)."""
    shared = state()
    found = shared.inflight.stop_one(request_id)
    if found == ABSENT and shared.siblings is not None:
        found = min(shared.siblings.ask("stop_one", request_id), key=FOUND_ORDER.index, default=ABSENT)
    if found == ABSENT:
        raise NotFound(f"no request {request_id!r} in flight")
    if found == NOT_GENERATING:
        raise InvalidRequest(f"request {request_id!r} is not generating yet; it can be stopped once it is")
    return {"stopped": request_id}
