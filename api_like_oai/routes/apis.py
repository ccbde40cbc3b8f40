"""One descriptor per API the proxy speaks: what is known of an API is here, not spread over the app.

An API is its descriptor, one dialect (dialects/: its request models, translation and shape) and one
route module. The descriptor says which paths are its own (`prefix`: their errors are written in its
shape), where its views are (`blueprint`, registered by app.create_app), which service entries answer
them and which shapes write its answers, and its error body. Its routes are declared beside their views
(routes/declare.py), the one place a route is added; /openapi.json is made from those declarations (routes/docs.py),
its errors documented with the API's error model. Its waiting behaviour is its shape's:
a stream whose model is loading or restarting gets the shape's keep-alive, then its answer or the
shape's error event (services/waiting.py).

Everything is named, not imported: a worker that never serves an API does not hold its dialect (idle
memory, benchmarks/PROFILE.md); `tests/unit/test_apis.py` resolves every name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ProxyError


@dataclass(frozen=True)
class Api:
    name: str
    prefix: str | None  # the paths that are its own start so; None: every path no other API takes
    blueprint: str  # its route module (app.create_app registers its `bp`)
    services: tuple[str, ...]  # its service entries, "module:function", one per way in
    shapes: tuple[str, ...]  # its answers' shapes, "module:Class": stream, fold, keep-alive, error event
    error: Callable[[ProxyError], tuple[int, dict]]  # (status, body) of an error on its paths
    error_model: str  # the model /openapi.json documents its errors with, "module:Class"
    not_its: frozenset[str] = frozenset()  # paths under its prefix that are another's
    unavailable_status: int = 503  # an upstream that is down (Anthropic's clients retry its 529 overloaded_error)

    def owns(self, path: str) -> bool:
        if self.prefix is None or path in self.not_its:
            return False
        return path == self.prefix.rstrip("/") or path.startswith(self.prefix.rstrip("/") + "/")


def _openai_error(exc: ProxyError) -> tuple[int, dict]:
    return exc.status, exc.to_dict()


def _anthropic_error(exc: ProxyError) -> tuple[int, dict]:
    return exc.anthropic_status, exc.to_anthropic()


def _ollama_error(exc: ProxyError) -> tuple[int, dict]:
    from ..dialects.ollama_shape import error_body

    return exc.status, error_body(exc)


OPENAI = Api(
    "openai",
    None,
    "api_like_oai.routes.completions",
    ("api_like_oai.services.chat:chat_completion", "api_like_oai.services.completions:completion"),
    ("api_like_oai.dialects.openai_shape:ChatShape", "api_like_oai.dialects.openai_shape:CompletionShape"),
    _openai_error,
    "api_like_oai.answers:ErrorResponse",
)
ANTHROPIC = Api(
    "anthropic",
    "/v1/messages",
    "api_like_oai.routes.anthropic",
    ("api_like_oai.services.messages:create",),
    ("api_like_oai.dialects.anthropic_shape:MessagesShape",),
    _anthropic_error,
    "api_like_oai.dialects.anthropic_answers:AnthropicErrorResponse",
    unavailable_status=529,
)
RESPONSES = Api(
    "responses",
    "/v1/responses",
    "api_like_oai.routes.responses",
    ("api_like_oai.services.responses:create",),
    ("api_like_oai.dialects.responses_shape:ResponsesShape",),
    _openai_error,
    "api_like_oai.answers:ErrorResponse",
)
# Claude Code's probe /api/hello is the proxy's, not Ollama's; Ollama's `/` answers no error of its own.
OLLAMA = Api(
    "ollama",
    "/api/",
    "api_like_oai.routes.ollama",
    ("api_like_oai.services.ollama:Ollama.chat", "api_like_oai.services.ollama:Ollama.generate"),
    ("api_like_oai.dialects.ollama_shape:OllamaShape",),
    _ollama_error,
    "api_like_oai.dialects.ollama:ErrorBody",
    not_its=frozenset({"/api/hello"}),
)

APIS = (OPENAI, ANTHROPIC, RESPONSES, OLLAMA)


def api_of(path: str) -> Api:
    """The API whose paths `path` is one of (its errors are written in that API's shape): OpenAI's for
    every path no other API takes."""
    for api in APIS:
        if api.owns(path):
            return api
    return OPENAI
