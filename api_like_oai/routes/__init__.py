"""Thin Flask views: parse and validate, call a service, wrap its answer."""

from __future__ import annotations

from flask import Response, current_app, jsonify, request
from pydantic import BaseModel, ValidationError

from ..errors import InvalidRequest

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def state():
    """The app's immutable settings and model registry (see app.create_app)."""
    return current_app.extensions["api_like_oai"]


def parse_body(model: type[BaseModel]):
    """The request body validated as `model`; InvalidRequest naming the first bad field."""
    try:
        return model.model_validate_json(request.get_data(cache=False) or b"")
    except ValidationError as exc:
        raise invalid_request(exc) from None


def invalid_request(exc: ValidationError) -> InvalidRequest:
    error = exc.errors(include_url=False)[0]
    if error["type"] == "json_invalid":
        return InvalidRequest("the request body is not valid JSON")
    if error["type"] == "model_type" and not error["loc"]:
        return InvalidRequest("the request body must be a JSON object")
    param = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return InvalidRequest(f"unsupported field {param!r}: this proxy cannot honour it", param=param)
    if error["type"] == "missing":
        return InvalidRequest(f"missing required field {param!r}", param=param)
    return InvalidRequest(f"invalid value for {param!r}: {error['msg']}", param=param)


def respond(answer) -> Response:
    """A service's answer as HTTP: a dict becomes JSON, an iterator of bytes an event stream."""
    if isinstance(answer, dict):
        return jsonify(answer)
    return Response(answer, mimetype="text/event-stream", headers=SSE_HEADERS)
