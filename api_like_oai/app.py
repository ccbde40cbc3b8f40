"""create_app(settings): the Flask app with its blueprints, auth and the one error mapping."""

from __future__ import annotations

import hmac
import logging
from types import SimpleNamespace

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from .backends.llamacpp import LlamaCppClient
from .errors import AuthenticationFailed, InvalidRequest, NotFound, PayloadTooLarge, ProxyError
from .routes import chat, completions, docs, embeddings, internal, models
from .services.generation import InFlight
from .services.models import ModelRegistry, ServedModel
from .settings import Settings

log = logging.getLogger("api_like_oai")

PUBLIC_PATHS = frozenset({"/health", "/docs", "/openapi.json"})


def create_app(settings: Settings) -> Flask:
    app = Flask(__name__)
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.json.compact = True
    app.extensions["api_like_oai"] = SimpleNamespace(settings=settings, registry=build_registry(settings),
                                                     inflight=InFlight())
    for blueprint in (chat.bp, completions.bp, embeddings.bp, models.bp, internal.bp, docs.bp):
        app.register_blueprint(blueprint)
    if settings.api_keys:
        app.before_request(_require_key(settings.api_keys))
    _register_error_handlers(app)
    return app


def build_registry(settings: Settings) -> ModelRegistry:
    served = [ServedModel(m.name, LlamaCppClient(m.upstreams[0], connect_timeout=settings.connect_timeout,
                                                 read_timeout=settings.read_timeout), m.template)
              for m in settings.models]
    return ModelRegistry(served, strict=settings.strict_model_names)


def _require_key(api_keys: tuple[str, ...]):
    encoded_keys = [key.encode() for key in api_keys]

    def check_key():
        if request.method == "OPTIONS" or request.path in PUBLIC_PATHS or request.path.startswith("/docs/"):
            return None
        offered = _offered_key().encode()
        # Compare against every key, in constant time, so timing says nothing about which matched.
        matches = [hmac.compare_digest(offered, key) for key in encoded_keys]
        if not any(matches):
            raise AuthenticationFailed("missing or invalid API key; send 'Authorization: Bearer <key>'")
        return None

    return check_key


def _offered_key() -> str:
    authorization = request.headers.get("Authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return request.headers.get("x-api-key", "")


def _register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ProxyError)
    def proxy_error(exc: ProxyError):
        if exc.status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc.message)
        return jsonify(exc.to_dict()), exc.status

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
        return error
    error = ProxyError(exc.description or exc.name)
    error.status = exc.code or 500
    return error
