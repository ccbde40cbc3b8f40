"""Fit a chat into the model's context: keep the conversation, size the reply to what is left.

`max_tokens` is an upper bound, as users of local models expect (clients made for hosted models
ask for 32,000 tokens from a model with a few thousand of context): the oldest turns are dropped
only when the prompt leaves less than a reply reserve (the smaller of max_tokens and a share of the
context), and the reply may use what the context leaves. `overflow="error"` is OpenAI's strict
behaviour instead: prompt + max_tokens must fit as asked.

Counting tokens needs a round trip to llama.cpp's /tokenize, so it is skipped when the prompt's
byte length already proves it fits (a token is never shorter than one byte), and the cut in a long
history is found by bisection: a few counts, not one per dropped message.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContextLengthExceeded
from ..prompts import ChatPrompt
from ..settings import ERROR, TRUNCATE, Policy

__all__ = ["ERROR", "TRUNCATE", "FittedPrompt", "Policy", "droppable_turns", "fit"]

DEFAULT_POLICY = Policy()


@dataclass(frozen=True)
class FittedPrompt:
    prompt: ChatPrompt
    n_predict: int            # tokens to generate; -1 only when the context length is unknown
    dropped_messages: int


def fit(messages: list, render, count_tokens, context_length: int | None, max_tokens: int | None,
        policy: Policy = DEFAULT_POLICY, *, max_tokens_is_bound: bool = False) -> FittedPrompt:
    """`render(messages) -> ChatPrompt` with the oldest droppable turns removed as the policy says,
    and the tokens to generate; ContextLengthExceeded if even the shortest prompt does not fit.
    `max_tokens_is_bound` (Anthropic's max_tokens, which is required) keeps it a bound even under
    the strict policy."""
    prompt = render(messages)
    if context_length is None:
        return FittedPrompt(prompt, -1 if max_tokens is None else max_tokens, 0)
    prompt_bytes = len(prompt.text.encode())
    if _fits_by_bytes(prompt_bytes, context_length, max_tokens, policy):
        # Without max_tokens, the room the bytes prove (at least the reply reserve): more would need
        # the count, and llama.cpp does not know a context length the configuration set lower.
        return FittedPrompt(prompt, context_length - prompt_bytes if max_tokens is None else max_tokens, 0)
    if policy.overflow == ERROR and not max_tokens_is_bound:
        return _fit_exactly(prompt, count_tokens, context_length, max_tokens)
    reserve = max(1, int(context_length * policy.reply_share))
    if max_tokens is not None:
        reserve = min(reserve, max(max_tokens, 1))
    kept, prompt, prompt_tokens = _drop_oldest_turns(messages, render, count_tokens, context_length - reserve)
    room = context_length - prompt_tokens
    if room < 1:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens and the prompt needs {prompt_tokens} "
            "after dropping every message that may be dropped", param="messages")
    n_predict = room if max_tokens is None else min(max_tokens, room)
    return FittedPrompt(prompt, n_predict, len(messages) - len(kept))


def _fits_by_bytes(prompt_bytes: int, context_length: int, max_tokens: int | None, policy: Policy) -> bool:
    """Whether the byte length proves the prompt fits as asked (a token is at least one byte): with
    max_tokens, prompt and reply; without, the prompt and the reply reserve (or one token, if strict)."""
    if max_tokens is not None:
        return prompt_bytes + max_tokens <= context_length
    if policy.overflow == ERROR:
        return prompt_bytes + 1 <= context_length
    return prompt_bytes + max(1, int(context_length * policy.reply_share)) <= context_length


def _fit_exactly(prompt: ChatPrompt, count_tokens, context_length: int, max_tokens: int | None) -> FittedPrompt:
    prompt_tokens = count_tokens(prompt.text)
    wanted = max_tokens if max_tokens is not None else 1
    if prompt_tokens + wanted > context_length:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens; the prompt needs {prompt_tokens} "
            f"and max_tokens asks for {wanted}", param="messages")
    return FittedPrompt(prompt, max_tokens if max_tokens is not None else context_length - prompt_tokens, 0)


def _drop_oldest_turns(messages: list, render, count_tokens, token_budget: int):
    """(kept messages, their prompt, its tokens) after dropping the fewest oldest turns that bring the
    prompt within `token_budget` (or every droppable turn), found by bisection."""
    groups = droppable_turns(messages)
    measured: dict[int, tuple] = {}

    def measure(dropped: int):
        if dropped not in measured:
            removed = {index for group in groups[:dropped] for index in group}
            kept = [message for index, message in enumerate(messages) if index not in removed]
            prompt = render(kept)
            measured[dropped] = (kept, prompt, count_tokens(prompt.text))
        return measured[dropped]

    if measure(0)[2] <= token_budget:
        return measure(0)
    low, high = 1, len(groups)
    while low < high:
        middle = (low + high) // 2
        if measure(middle)[2] <= token_budget:
            high = middle
        else:
            low = middle + 1
    return measure(low)


def droppable_turns(messages: list) -> list[range]:
    """The turns that may be dropped, oldest first: every message before the last user message but
    the system messages; an assistant's tool calls go together with the results that answer them
    (a template raises on an orphan call or result, and the model would be confused)."""
    last_user = max((n for n, m in enumerate(messages) if _role(m) == "user"), default=len(messages))
    turns, position = [], 0
    while position < last_user:
        if _role(messages[position]) in ("system", "developer"):
            position += 1
            continue
        end = position + 1
        if _role(messages[position]) in ("assistant", "tool", "function"):
            while end < last_user and _role(messages[end]) in ("tool", "function"):
                end += 1
        turns.append(range(position, end))
        position = end
    return turns


def _role(message) -> str:
    return message["role"] if isinstance(message, dict) else message.role
