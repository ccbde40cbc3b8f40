"""OpenAI's completion APIs: /v1/chat/completions and /v1/completions (and their paths without /v1)."""

from __future__ import annotations

from flask import Blueprint

from ..protocol import ChatCompletionRequest, CompletionRequest
from ..services.chat import chat_completion
from ..services.completions import completion
from . import completed

bp = Blueprint("completions", __name__)


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")
def create_chat_completion():
    return completed(ChatCompletionRequest, "/chat/completions", chat_completion)


@bp.post("/v1/completions")
@bp.post("/completions")
def create_completion():
    return completed(CompletionRequest, "/completions", completion)
