"""Fit a chat into the model's context: drop the oldest turns if needed, size the generation.

Counting tokens needs a round trip to llama.cpp's /tokenize, so it is skipped when the prompt's
byte length already proves it fits (a token is never shorter than one byte).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContextLengthExceeded
from ..prompts import ChatPrompt


@dataclass(frozen=True)
class FittedPrompt:
    prompt: ChatPrompt
    n_predict: int            # tokens to generate; -1 only when the context length is unknown
    dropped_messages: int


def fit(messages: list, render, count_tokens, context_length: int | None, max_tokens: int | None,
        *, max_tokens_is_bound: bool = False) -> FittedPrompt:
    """`render(messages) -> ChatPrompt` with the oldest droppable messages removed until
    prompt + max_tokens fits `context_length`; ContextLengthExceeded if even the minimum does not.
    With `max_tokens_is_bound` (Anthropic's `max_tokens`), max_tokens is only an upper bound: the
    prompt needs room for one token, and generation gets at most what the context leaves."""
    prompt = render(messages)
    if context_length is None:
        return FittedPrompt(prompt, -1 if max_tokens is None else max_tokens, 0)
    if max_tokens is not None and len(prompt.text.encode()) + max_tokens <= context_length:
        return FittedPrompt(prompt, max_tokens, 0)
    room_needed = max_tokens if max_tokens is not None and not max_tokens_is_bound else 1
    kept = list(messages)
    prompt_tokens = count_tokens(prompt.text)
    while prompt_tokens + room_needed > context_length:
        oldest = _oldest_droppable(kept)
        if oldest is None:
            raise ContextLengthExceeded(
                f"this model's context length is {context_length} tokens; the prompt needs {prompt_tokens} "
                f"(after dropping every message that may be dropped) and max_tokens asks for {room_needed}",
                param="messages")
        del kept[oldest:_end_of_turn(kept, oldest)]
        prompt = render(kept)
        prompt_tokens = count_tokens(prompt.text)
    room_left = context_length - prompt_tokens
    n_predict = room_left if max_tokens is None else min(max_tokens, room_left) if max_tokens_is_bound else max_tokens
    return FittedPrompt(prompt, n_predict, len(messages) - len(kept))


def _oldest_droppable(messages: list) -> int | None:
    """The first message that is not a system message and comes before the last user message."""
    last_user = max((n for n, m in enumerate(messages) if _role(m) == "user"), default=len(messages))
    return next((n for n, m in enumerate(messages[:last_user]) if _role(m) != "system"), None)


def _end_of_turn(messages: list, start: int) -> int:
    """Where the turn that starts at `start` ends: an assistant's tool calls go together with the
    tool results that answer them (a template raises on an orphan call or result)."""
    end = start + 1
    if _role(messages[start]) in ("assistant", "tool", "function"):
        while end < len(messages) and _role(messages[end]) in ("tool", "function"):
            end += 1
    return end


def _role(message) -> str:
    return message["role"] if isinstance(message, dict) else message.role
