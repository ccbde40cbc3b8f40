"""One descriptor per API the proxy speaks: what is known of an API is here, not spread over the app.

An API is its descriptor, one dialect (dialects/: its request models, translation and shape) and one
route module. The descriptor says which paths are its own (`prefix`: their errors are written in its
shape), where its views are (`blueprint`, registered by app.create_app), which service entries answer
them and which shapes write its answers, its error body, and its documented routes (from which, with
the routes registered, /openapi.json is made: routes/docs.py). Its waiting behaviour is its shape's:
a stream whose model is loading or restarting gets the shape's keep-alive, then its answer or the
shape's error event (services/waiting.py).

Everything is named, not imported: a worker that never serves an API does not hold its dialect (idle
memory, benchmarks/PROFILE.md); `tests/unit/test_apis.py` resolves every name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ProxyError

# (method, path as /openapi.json writes it, summary, request model, answer model): a documented route
Endpoint = tuple[str, str, str, type | None, type | None]


@dataclass(frozen=True)
class Api:
    name: str
    prefix: str | None  # the paths that are its own start so; None: every path no other API takes
    blueprint: str  # its route module (app.create_app registers its `bp`)
    services: tuple[str, ...]  # its service entries, "module:function", one per way in
    shapes: tuple[str, ...]  # its answers' shapes, "module:Class": stream, fold, keep-alive, error event
    error: Callable[[ProxyError], tuple[int, dict]]  # (status, body) of an error on its paths
    error_model: str  # the model /openapi.json documents its errors with, "module:Class"
    endpoints: Callable[[], list[Endpoint]]  # its documented routes (models imported when called)
    not_its: frozenset[str] = frozenset()  # paths under its prefix that are another's
    public: frozenset[str] = frozenset()  # its probes a client sends before it has a key (no key asked)
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


def _openai_endpoints() -> list[Endpoint]:
    from .. import answers as o
    from .. import protocol as p

    return [
        (
            "post",
            "/v1/chat/completions",
            "Chat completion (set stream for server-sent events of ChatCompletionChunk)",
            p.ChatCompletionRequest,
            o.ChatCompletion,
        ),
        (
            "post",
            "/v1/completions",
            "Text completion (suffix: fill-in-the-middle through llama.cpp /infill)",
            p.CompletionRequest,
            o.Completion,
        ),
    ]


def _anthropic_endpoints() -> list[Endpoint]:
    from ..batch.models import message_batch_endpoints
    from ..dialects import anthropic as a
    from ..dialects import anthropic_answers as aa

    return [
        (
            "post",
            "/v1/messages",
            "Anthropic Messages API (set stream for its named events; ?beta=true accepted)",
            a.MessagesRequest,
            aa.MessageResponse,
        ),
        (
            "post",
            "/v1/messages/count_tokens",
            "Anthropic Messages API: the prompt's token count",
            a.CountTokensRequest,
            aa.TokenCount,
        ),
        *message_batch_endpoints(),  # Anthropic's Message Batches (batch/message_batches.py)
    ]


def _responses_endpoints() -> list[Endpoint]:
    from ..dialects import conversations as s
    from ..dialects import responses as r
    from ..dialects import responses_answers as ra

    return [
        (
            "post",
            "/v1/responses",
            "OpenAI Responses API (set stream for its named events; store, previous_response_id "
            "and conversation keep and continue turns)",
            r.ResponsesRequest,
            ra.ResponseObject,
        ),
        (
            "get",
            "/v1/responses",
            "The Responses API's WebSocket mode (an Upgrade: websocket handshake; response.create and "
            "response.steer events in, the stream's events out)",
            None,
            None,
        ),
        (
            "post",
            "/v1/responses/input_tokens",
            "OpenAI Responses API: the prompt's token count",
            r.ResponsesRequest,
            ra.InputTokenCount,
        ),
        (
            "post",
            "/v1/responses/compact",
            "Compact a conversation: its user messages, then one compaction item (the model's summary, sealed)",
            r.CompactRequest,
            ra.CompactedResponse,
        ),
        ("get", "/v1/responses/{response_id}", "A stored response, as it was answered", None, ra.ResponseObject),
        ("delete", "/v1/responses/{response_id}", "Delete a stored response", None, s.ResponseDeleted),
        (
            "get",
            "/v1/responses/{response_id}/input_items",
            "A stored response's input items (with the turns it continued)",
            None,
            s.ItemList,
        ),
    ]


def _ollama_endpoints() -> list[Endpoint]:
    from ..dialects import ollama as d

    return [
        ("get", "/", "Ollama's probe: `Ollama is running` (public)", None, None),
        ("get", "/api/version", "Ollama's version this answers as (public)", None, None),
        ("post", "/api/chat", "Ollama chat (NDJSON stream by default; stream false: one object)", d.ChatRequest, None),
        (
            "post",
            "/api/generate",
            "Ollama generate: templated as a chat turn, or raw / with suffix as a completion",
            d.GenerateRequest,
            None,
        ),
        ("post", "/api/embed", "Ollama embeddings, normalised, one per input", d.EmbedRequest, None),
        ("post", "/api/embeddings", "Ollama's older embeddings route: one vector", d.EmbeddingsRequest, None),
        ("get", "/api/tags", "Ollama's model list (the caller's models)", None, None),
        ("post", "/api/show", "Ollama's model details, read from its GGUF file", d.ModelRequest, None),
        ("get", "/api/ps", "Ollama's loaded models", None, None),
        ("delete", "/api/delete", "Unload a model the proxy starts (admin key only); its file stays", d.ModelRequest, None),
        ("post", "/api/pull", "Refused: models come from the configuration, no hub is reached", None, None),
        ("post", "/api/push", "Refused: no hub is reached", None, None),
        ("post", "/api/create", "Refused: models come from the configuration", None, None),
        ("post", "/api/copy", "Refused: models come from the configuration", None, None),
        ("post", "/api/blobs/{digest}", "Refused: models come from the configuration", None, None),
    ]


OPENAI = Api(
    "openai",
    None,
    "api_like_oai.routes.completions",
    ("api_like_oai.services.chat:chat_completion", "api_like_oai.services.completions:completion"),
    ("api_like_oai.dialects.openai_shape:ChatShape", "api_like_oai.dialects.openai_shape:CompletionShape"),
    _openai_error,
    "api_like_oai.answers:ErrorResponse",
    _openai_endpoints,
)
ANTHROPIC = Api(
    "anthropic",
    "/v1/messages",
    "api_like_oai.routes.anthropic",
    ("api_like_oai.services.messages:create",),
    ("api_like_oai.dialects.anthropic_shape:MessagesShape",),
    _anthropic_error,
    "api_like_oai.dialects.anthropic_answers:AnthropicErrorResponse",
    _anthropic_endpoints,
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
    _responses_endpoints,
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
    _ollama_endpoints,
    not_its=frozenset({"/api/hello"}),
    public=frozenset({"/", "/api/version"}),
)

APIS = (OPENAI, ANTHROPIC, RESPONSES, OLLAMA)


def api_of(path: str) -> Api:
    """The API whose paths `path` is one of (its errors are written in that API's shape): OpenAI's for
    every path no other API takes."""
    for api in APIS:
        if api.owns(path):
            return api
    return OPENAI
