"""OpenAI's completion APIs: /v1/chat/completions and /v1/completions (and their paths without /v1)."""

from __future__ import annotations

from flask import Blueprint

from ..answers import ChatCompletion, Completion
from ..protocol import ChatCompletionRequest, CompletionRequest
from ..services.chat import chat_completion
from ..services.completions import completion
from . import completed
from .declare import GENERATES, KEY, route

bp = Blueprint("completions", __name__)


@route(
    bp,
    "/v1/chat/completions",
    "/chat/completions",
    summary="Chat completion (set stream for server-sent events of ChatCompletionChunk)",
    access=KEY,
    request=ChatCompletionRequest,
    answer=ChatCompletion,
    body="json",
    model_in="json",
    metered="tokens",
    stream="text/event-stream",
    refusals=GENERATES,
)
def create_chat_completion():
    return completed(ChatCompletionRequest, "/chat/completions", chat_completion)


@route(
    bp,
    "/v1/completions",
    "/completions",
    summary="Text completion (suffix: fill-in-the-middle through llama.cpp /infill)",
    access=KEY,
    request=CompletionRequest,
    answer=Completion,
    body="json",
    model_in="json",
    metered="tokens",
    stream="text/event-stream",
    refusals=GENERATES,
)
def create_completion():
    return completed(CompletionRequest, "/completions", completion)
