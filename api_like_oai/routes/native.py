"""llama.cpp's own API through the proxy, for the clients that speak it (continue.dev's llama.cpp
provider: /completion; llama.vscode and llama.vim: /infill; Zed: /props). Registered unless
--no-native-api. The proxy's own /metrics stays its own: llama.cpp's is at /llamacpp/metrics."""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, Response, request

from ..errors import ERROR_CODE_HEADER
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
# The bodies llama-server reads (its fields beside these are relayed as they are), the model named in them
# (else in the query): the fields it requires, so that the document's valid bodies are ones it takes.
_TEXT_OR_TOKENS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 256}]}
_REQUIRED = {
    "/completion": {"prompt": _TEXT_OR_TOKENS},
    "/infill": {"input_prefix": {"type": "string"}, "input_suffix": {"type": "string"}},
    "/tokenize": {"content": {"type": "string"}},
    "/detokenize": {"tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 4096}},
    "/apply-template": {
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"}},
                "required": ["role", "content"],
            },
        }
    },
}


_REFUSALS = {
    "/infill": ("not_supported",),  # a model without fill-in-the-middle tokens (its 501, the caller's 400)
    "/detokenize": ("token_out_of_vocabulary",),  # llama-server answered an id past its vocabulary with a 500
    "/completion": ("context_length_exceeded",),
}


def _body(path: str) -> dict:
    required = _REQUIRED[path]
    return {"type": "object", "properties": {"model": {"type": "string"}, **required}, "required": list(required)}


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
    if answer.status == 400:  # llama-server's own refusal, relayed: said as the proxy's refusals are
        headers[ERROR_CODE_HEADER] = "upstream_refused"
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
        request=_body(_path) if _posted else None,
        query=ModelQuery,
        body="json" if _posted else None,
        model_in="json" if _posted else "query",
        statuses=_statuses,
        relayed=True,
        media=(),  # llama-server's, as it answers
        metered="tokens" if _path in ("/completion", "/infill") else None,
        refusals=("upstream_refused", *_REFUSALS.get(_path, ())),
    )
