"""Fitting a conversation into the context: keep it, shorten the reply, drop turns only for the reserve,
in steps, and in an agent's session the oldest tool rounds after the task."""

from __future__ import annotations

import math

import pytest

from api_like_oai.errors import ContextLengthExceeded
from api_like_oai.prompts import ChatPrompt
from api_like_oai.services.fitting import ERROR, Policy, drop_points, droppable_turns, fit

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
    messages = conversation(3)  # 8 messages, 80 tokens
    fitted = fit(messages, render, Counter(), context_length=200, max_tokens=32000)
    assert (fitted.dropped_messages, fitted.n_predict) == (0, 120)


FEWEST = Policy(drop_step=0)


def test_turns_are_dropped_only_to_keep_the_reply_reserve():
    messages = conversation(10)  # 22 messages, 220 tokens
    fitted = fit(messages, render, Counter(), context_length=400, max_tokens=32000, policy=Policy(reply_share=0.5, drop_step=0))
    prompt_tokens = len(fitted.prompt.text) // 4
    assert prompt_tokens <= 200 < prompt_tokens + 2 * TOKENS_PER_MESSAGE  # the fewest turns dropped
    assert fitted.n_predict == 400 - prompt_tokens
    assert fitted.prompt.text.startswith("s" * 40) and fitted.prompt.text.endswith("q" * 40)


def test_turns_are_dropped_in_steps_of_an_eighth_of_the_context():
    """400 tokens of context: steps of 50 tokens (200 characters), i.e. five 10-token messages; the
    fewest steps that bring the prompt within the 200 tokens left by the reserve."""
    messages = conversation(10)  # 22 messages, 220 tokens
    fitted = fit(messages, render, Counter(), context_length=400, max_tokens=32000, policy=Policy(reply_share=0.5))
    assert fitted.dropped_messages == 5
    assert fitted.prompt.text.startswith("s" * 40) and fitted.prompt.text.endswith("q" * 40)


def test_a_small_max_tokens_is_the_reserve():
    messages = conversation(10)
    fitted = fit(messages, render, Counter(), context_length=230, max_tokens=20, policy=FEWEST)
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
    assert fit(messages, render, Counter(), context_length=200, max_tokens=100, policy=Policy(overflow=ERROR)).n_predict == 100


def test_without_max_tokens_the_reply_may_use_the_rest_of_the_context():
    """Counted when the bytes do not prove the fit (160 bytes, 40 tokens, a reserve of 50 of 200)."""
    assert fit(conversation(1), render, Counter(), context_length=200, max_tokens=None).n_predict == 160


@pytest.mark.parametrize("policy", [Policy(), Policy(overflow=ERROR)])
def test_without_max_tokens_a_prompt_proven_short_by_its_bytes_is_not_counted(policy):
    counter = Counter()
    fitted = fit(conversation(1), render, counter, context_length=1000, max_tokens=None, policy=policy)
    assert counter.calls == 0
    assert fitted.n_predict == 1000 - 160  # the room its 160 bytes prove


def test_byte_length_that_proves_the_fit_needs_no_count():
    counter = Counter()
    fit(conversation(1), render, counter, context_length=1000, max_tokens=100)
    assert counter.calls == 0


def test_droppable_turns_keep_calls_with_their_results_and_spare_system_the_last_question_and_round():
    messages = [
        {"role": "system"},
        {"role": "user"},
        {"role": "assistant"},
        {"role": "tool"},
        {"role": "tool"},
        {"role": "assistant"},
        {"role": "developer"},
        {"role": "user"},
        {"role": "assistant"},
        {"role": "tool"},
        {"role": "system"},
        {"role": "assistant"},
        {"role": "tool"},
        {"role": "tool"},
    ]
    assert droppable_turns(messages) == [range(1, 2), range(2, 5), range(5, 6), range(8, 10)]


# --- an agent's session: one task, then tool rounds ----------------------------------------------


def call(n: int) -> dict:
    return {"id": f"call_{n}", "type": "function", "function": {"name": "run", "arguments": "{}"}}


def session(rounds: int, results_per_round: int = 1) -> list[dict]:
    """System, the task, then `rounds` rounds: an assistant's calls (10 tokens) and their results
    (40 tokens in all), each round 200 characters."""
    messages = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "t" * 40}]
    for n in range(rounds):
        calls = [call(n * 10 + m) for m in range(results_per_round)]
        messages.append({"role": "assistant", "content": f"{n:04d}" + "a" * 36, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "r" * (160 // results_per_round)} for c in calls]
    return messages


def render_session(messages: list[dict]) -> ChatPrompt:
    """Each message's content; a result whose call is not in the prompt would be a template error."""
    shown_calls = {c["id"] for m in messages for c in m.get("tool_calls", ())}
    assert all(m["tool_call_id"] in shown_calls for m in messages if m["role"] == "tool"), "half a round"
    return ChatPrompt("".join(m["content"] for m in messages))


def test_an_agent_session_drops_its_oldest_tool_rounds_and_keeps_the_task():
    messages = session(30)  # 20 + 30 * 50 = 1520 tokens
    fitted = fit(messages, render_session, Counter(), context_length=1000, max_tokens=100, policy=FEWEST)
    assert fitted.prompt.text.startswith("s" * 40 + "t" * 40)  # the system prompt, the task
    assert fitted.prompt.text.endswith("0029" + "a" * 36 + "r" * 160)  # the latest round
    assert fitted.dropped_tool_rounds == 13 and fitted.dropped_messages == 26  # 20 + 17 * 50 = 870 <= 900
    assert fitted.n_predict == 100


def test_a_round_goes_with_all_its_results():
    fitted = fit(session(30, results_per_round=4), render_session, Counter(), context_length=1000, max_tokens=100, policy=FEWEST)
    assert fitted.dropped_tool_rounds == 13 and fitted.dropped_messages == 13 * 5


def test_the_latest_round_is_never_dropped():
    messages = session(3)
    messages[-1]["content"] = "r" * 4000
    with pytest.raises(ContextLengthExceeded, match="after dropping every message that may be dropped"):
        fit(messages, render_session, Counter(), context_length=1000, max_tokens=100)


def test_a_session_of_hundreds_of_rounds_costs_a_logarithmic_number_of_counts():
    counter = Counter()
    fitted = fit(session(400), render_session, counter, context_length=1000, max_tokens=100, policy=FEWEST)
    assert fitted.dropped_tool_rounds == 383
    assert counter.calls <= math.ceil(math.log2(400)) + 2


def prompts_of_a_growing_session(policy: Policy, turns: range) -> list[str]:
    return [
        fit(session(rounds), render_session, Counter(), context_length=1000, max_tokens=100, policy=policy).prompt.text
        for rounds in turns
    ]


def breaks(prompts: list[str]) -> int:
    """How many turns' prompts do not start with the previous turn's (llama.cpp re-reads them past the task)."""
    return sum(not later.startswith(earlier) for earlier, later in zip(prompts, prompts[1:], strict=False))


def test_rounds_are_dropped_in_steps_so_that_the_next_turns_extend_the_same_prompt():
    """A step is an eighth of the 1000-token context, 500 characters: three 200-character rounds. Once
    the session outgrows the context, dropping the fewest rounds changes the prompt after the task at
    every turn; dropping three at a time, at every third turn, the two between extend the prompt."""
    turns = range(17, 47)  # the session outgrows the 900 tokens left by the reply at 18 rounds
    assert breaks(prompts_of_a_growing_session(FEWEST, turns)) == 29
    assert breaks(prompts_of_a_growing_session(Policy(), turns)) == 10


def test_drop_points_follow_the_oldest_turns_so_later_turns_share_them():
    messages = session(10)
    groups = droppable_turns(messages)
    points = drop_points(messages, groups, step_size=500)
    assert points == [0, 3, 6, 9]  # 9 rounds may go; the tenth is the latest
    longer = session(14)
    assert drop_points(longer, droppable_turns(longer), step_size=500)[:4] == points


# --- effective_max_tokens: the one step that decides max_tokens before the prompt exists ----------


def _chat(**fields):
    from api_like_oai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **fields)


def _model(**fields):
    from api_like_oai.settings import ModelSettings

    return ModelSettings(name="m", upstreams=("http://127.0.0.1:1",), **fields)


def test_max_tokens_over_the_limit_is_refused_or_lowered_when_it_is_a_bound():
    from api_like_oai.errors import InvalidRequest
    from api_like_oai.services.fitting import effective_max_tokens
    from api_like_oai.settings import Limits

    limits = Limits(max_tokens=100)
    with pytest.raises(InvalidRequest, match="max_tokens is 500; the limit is 100") as refused:
        effective_max_tokens(_chat(max_tokens=500), _model(), limits)
    assert refused.value.param == "max_tokens"
    with pytest.raises(InvalidRequest, match="max_tokens is 300"):  # max_completion_tokens is the one that counts
        effective_max_tokens(_chat(max_tokens=50, max_completion_tokens=300), _model(), limits)
    assert effective_max_tokens(_chat(max_tokens=32000), _model(), limits, bound=True) == 100
    assert effective_max_tokens(_chat(max_tokens=100), _model(), limits) == 100
    assert effective_max_tokens(_chat(), _model(), limits) is None  # the context decides (fit)


def test_the_model_default_override_and_cap_apply_after_the_limit():
    from api_like_oai.services.fitting import effective_max_tokens, with_max_tokens
    from api_like_oai.settings import Limits

    limits = Limits(max_tokens=1000)
    assert effective_max_tokens(_chat(), _model(defaults={"max_tokens": 64}), limits) == 64
    assert effective_max_tokens(_chat(max_tokens=10), _model(defaults={"max_tokens": 64}), limits) == 10
    assert effective_max_tokens(_chat(max_tokens=10), _model(overrides={"max_tokens": 64}), limits) == 64
    assert effective_max_tokens(_chat(max_tokens=900), _model(max_tokens=256), limits) == 256
    assert effective_max_tokens(_chat(), _model(max_tokens=256), limits) == 256
    assert effective_max_tokens(_chat(max_completion_tokens=900), _model(max_tokens=256), limits) == 256
    request = with_max_tokens(_chat(max_tokens=10, max_completion_tokens=900), 256)
    assert (request.max_tokens, request.max_completion_tokens, request.token_limit()) == (256, 256, 256)
    unchanged = _chat(max_tokens=10)
    assert with_max_tokens(unchanged, 10) is unchanged
