"""llama.cpp's own API through the proxy, for the clients that speak it (continue.dev's llama.cpp
provider: /completion; llama.vscode and llama.vim: /infill; Zed: /props). Registered unless
--no-native-api. The proxy's own /metrics stays its own: llama.cpp's is at /llamacpp/metrics."""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, Response, request

from ..services import native
from ..services.native import NativeAnswer
from . import SSE_HEADERS, generation_context, lookup_model
from .declare import KEY, ModelQuery, declare

bp = Blueprint("native", __name__)

# (method, path clients call, path on llama-server, what else than 200 llama-server answers there)
ROUTES = (
    ("POST", "/completion", "/completion", ()),
    ("POST", "/infill", "/infill", (400,)),  # a model without fill-in-the-middle tokens (its 501, the caller's 400)
    ("GET", "/props", "/props", ()),
    ("POST", "/tokenize", "/tokenize", ()),
    ("POST", "/detokenize", "/detokenize", ()),
    ("POST", "/apply-template", "/apply-template", ()),
    ("GET", "/slots", "/slots", (400,)),  # llama-server run with --no-slots
    ("GET", "/llamacpp/metrics", "/metrics", (400,)),  # llama-server run without --metrics
)
# A body llama-server reads, with the model named in it (else in the query): any JSON object.
BODY = {"type": "object", "properties": {"model": {"type": "string"}}}


def _relay_to(upstream_path: str):
    def relay_view() -> Response:
        body = request.get_data(cache=False)  # bounded by --max-body-bytes (413 above)
        model, _ = lookup_model(native.requested_model(body, request.args.get("model"), request.method == "POST"))
        answer = native.relay(model, request.method, upstream_path, body, _query_without_model(), generation_context())
        return _response(answer)

    relay_view.__name__ = "relay_" + upstream_path.strip("/").replace("-", "_")
    return relay_view


def _query_without_model() -> str:
    """The query string for llama.cpp: `model` names one of our models, not one of llama.cpp's."""
    return urlencode([(key, value) for key, value in request.args.items(multi=True) if key != "model"])


def _response(answer: NativeAnswer) -> Response:
    headers = {**answer.headers, **(SSE_HEADERS if answer.streamed else {})}
    response = Response(answer.body, status=answer.status, headers=headers)
    response.call_on_close(answer.close)
    return response


for _method, _path, _upstream_path, _statuses in ROUTES:
    _posted = _method == "POST"
    declare(
        bp,
        (_path,),
        _relay_to(_upstream_path),
        methods=(_method,),
        summary=f"llama.cpp's own {_upstream_path}, relayed as it is (`model` in the body or the query names the model)",
        access=KEY,
        request=BODY if _posted else None,
        query=ModelQuery,
        body="json" if _posted else None,
        model_in="json" if _posted else "query",
        statuses=_statuses,
        relayed=True,
        media=(),  # llama-server's, as it answers
        metered="tokens" if _path in ("/completion", "/infill") else None,
    )
