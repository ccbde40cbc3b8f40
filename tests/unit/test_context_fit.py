"""Fitting a conversation into the context: keep it, shorten the reply, drop turns only for the reserve."""

from __future__ import annotations

import math

import pytest

from api_like_oai.errors import ContextLengthExceeded
from api_like_oai.prompts import ChatPrompt
from api_like_oai.services.context import ERROR, Policy, droppable_turns, fit

TOKENS_PER_MESSAGE = 10


def render(messages: list[dict]) -> ChatPrompt:
    return ChatPrompt("".join(m["content"] for m in messages))


class Counter:
    """count_tokens for prompts of fixed-size messages ("x" * 40 per message = 10 tokens), counting calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return len(text) // 4


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "s" * 40}]
    for _ in range(turns):
        messages += [{"role": "user", "content": "u" * 40}, {"role": "assistant", "content": "a" * 40}]
    return [*messages, {"role": "user", "content": "q" * 40}]


def test_a_large_max_tokens_keeps_the_conversation_and_shortens_the_reply():
    messages = conversation(3)                     # 8 messages, 80 tokens
    fitted = fit(messages, render, Counter(), context_length=200, max_tokens=32000)
    assert (fitted.dropped_messages, fitted.n_predict) == (0, 120)


def test_turns_are_dropped_only_to_keep_the_reply_reserve():
    messages = conversation(10)                    # 22 messages, 220 tokens
    fitted = fit(messages, render, Counter(), context_length=400, max_tokens=32000, policy=Policy(reply_share=0.5))
    prompt_tokens = len(fitted.prompt.text) // 4
    assert prompt_tokens <= 200 < prompt_tokens + 2 * TOKENS_PER_MESSAGE   # the fewest turns dropped
    assert fitted.n_predict == 400 - prompt_tokens
    assert fitted.prompt.text.startswith("s" * 40) and fitted.prompt.text.endswith("q" * 40)


def test_a_small_max_tokens_is_the_reserve():
    messages = conversation(10)
    fitted = fit(messages, render, Counter(), context_length=230, max_tokens=20)
    assert len(fitted.prompt.text) // 4 + 20 <= 230
    assert fitted.n_predict == 20


@pytest.mark.parametrize("turns", [50, 300])
def test_a_long_history_costs_a_logarithmic_number_of_counts(turns):
    counter = Counter()
    fit(conversation(turns), render, counter, context_length=400, max_tokens=100)
    assert counter.calls <= math.ceil(math.log2(turns)) + 2


def test_a_prompt_that_leaves_no_room_at_all_is_a_400():
    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "q" * 40}]
    with pytest.raises(ContextLengthExceeded):
        fit(messages, render, Counter(), context_length=100, max_tokens=10)


def test_overflow_error_is_openai_s_strict_check():
    messages = conversation(3)
    with pytest.raises(ContextLengthExceeded, match="max_tokens asks for 150"):
        fit(messages, render, Counter(), context_length=200, max_tokens=150, policy=Policy(overflow=ERROR))
    assert fit(messages, render, Counter(), context_length=200, max_tokens=100,
               policy=Policy(overflow=ERROR)).n_predict == 100


def test_without_max_tokens_the_reply_may_use_the_rest_of_the_context():
    """Counted when the bytes do not prove the fit (160 bytes, 40 tokens, a reserve of 50 of 200)."""
    assert fit(conversation(1), render, Counter(), context_length=200, max_tokens=None).n_predict == 160


@pytest.mark.parametrize("policy", [Policy(), Policy(overflow=ERROR)])
def test_without_max_tokens_a_prompt_proven_short_by_its_bytes_is_not_counted(policy):
    counter = Counter()
    fitted = fit(conversation(1), render, counter, context_length=1000, max_tokens=None, policy=policy)
    assert counter.calls == 0
    assert fitted.n_predict == 1000 - 160   # the room its 160 bytes prove


def test_byte_length_that_proves_the_fit_needs_no_count():
    counter = Counter()
    fit(conversation(1), render, counter, context_length=1000, max_tokens=100)
    assert counter.calls == 0


def test_droppable_turns_keep_calls_with_their_results_and_spare_system_and_the_last_question():
    messages = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"},
                {"role": "tool"}, {"role": "assistant"}, {"role": "developer"}, {"role": "user"},
                {"role": "assistant"}, {"role": "tool"}]
    assert droppable_turns(messages) == [range(1, 2), range(2, 5), range(5, 6)]
