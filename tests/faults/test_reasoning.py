"""Reasoning models, replayed by a scripted fake llama.cpp whose chat template has <think> (as Qwen3's
and DeepSeek-R1's do): the thought in reasoning_content, the answer alone in content."""

from __future__ import annotations

import pytest
import requests

from ..conftest import openai_client

# A reasoning model's template in miniature: history keeps reasoning_content it is given; the
# generation prompt opens the thought when `open_thought` says so (DeepSeek-R1 always does).
CHAT_TEMPLATE = (  # /props reports it (the conftest's `fake`)
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content.split('</think>')[-1] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% elif open_thought %}<think>\n{% endif %}{% endif %}"
)
QUESTION = [{"role": "user", "content": "What is 2 + 2?"}]
THOUGHT_TOKENS = ["<th", "ink>", "\nTwo", " plus two", " is four.", "\n</th", "ink>", "\n\nIt", " is 4."]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(autouse=True)
def reset(fake):
    fake.tokens = THOUGHT_TOKENS
    yield


def answer_of(proxy, stream: bool, **request) -> tuple[str | None, str | None, dict]:
    """(reasoning_content, content, the rest) of an answer, assembled from its stream if streamed."""
    body = {"model": "m", "messages": QUESTION, **request}
    if not stream:
        message = requests.post(proxy.url + "/v1/chat/completions", json=body, timeout=30).json()["choices"][0]["message"]
        return message.get("reasoning_content"), message["content"], message
    reasoning, content, calls = None, None, []
    extra_body = {name: body.pop(name) for name in ("chat_template_kwargs", "reasoning_format") if name in body}
    for chunk in openai_client(proxy.url).chat.completions.create(**body, stream=True, extra_body=extra_body):
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            assert "<" not in extra["reasoning_content"] and ">" not in extra["reasoning_content"]
            reasoning = (reasoning or "") + extra["reasoning_content"]
        if delta.content:
            assert "think>" not in delta.content
            content = (content or "") + delta.content
        calls += delta.tool_calls or []
    return reasoning, content, {"tool_calls": calls}


@pytest.mark.parametrize("stream", [False, True])
def test_the_thought_is_split_from_the_answer(proxy, stream):
    reasoning, content, _ = answer_of(proxy, stream)
    assert (reasoning, content) == ("Two plus two is four.", "It is 4.")


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_that_opens_the_thought(fake, proxy, stream):
    fake.tokens = ["Two plus", " two is four.</think>", "\n\nIt is 4."]
    reasoning, content, _ = answer_of(proxy, stream, chat_template_kwargs={"open_thought": True})
    assert (reasoning, content) == ("Two plus two is four.", "It is 4.")
    prompt = requests.post(
        proxy.url + "/v1/internal/chat-prompt",
        timeout=30,
        json={"messages": QUESTION, "chat_template_kwargs": {"open_thought": True}},
    ).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_format_none_keeps_the_thought_inline(proxy, stream):
    reasoning, content, _ = answer_of(proxy, stream, reasoning_format="none")
    assert reasoning is None
    assert content == "".join(THOUGHT_TOKENS)


def test_thinking_switched_off_through_chat_template_kwargs(fake, proxy):
    fake.tokens = ["It is 4."]
    prompt = requests.post(
        proxy.url + "/v1/internal/chat-prompt",
        timeout=30,
        json={"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}},
    ).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert answer_of(proxy, False, chat_template_kwargs={"enable_thinking": False})[:2] == (None, "It is 4.")


def test_history_reasoning_content_reaches_the_template(proxy):
    history = [
        *QUESTION,
        {"role": "assistant", "content": "4", "reasoning_content": "add them"},
        {"role": "user", "content": "And 3 + 3?"},
    ]
    prompt = requests.post(proxy.url + "/v1/internal/chat-prompt", json={"messages": history}, timeout=30).json()
    assert "<|im_start|>assistant\n<think>add them</think>4<|im_end|>" in prompt["prompt"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_thought_followed_by_a_tool_call(fake, proxy, stream):
    fake.tokens = [
        "<think>I need",
        " the weather.</think>",
        "\n<tool_call>",
        '{"name": "get_weather", ',
        '"arguments": {"city": "Oslo"}}',
        "</tool_call>",
    ]
    reasoning, content, rest = answer_of(proxy, stream, tools=[WEATHER])
    assert (reasoning, content) == ("I need the weather.", None)
    calls = rest["tool_calls"]
    name = calls[0]["function"]["name"] if not stream else calls[0].function.name
    assert name == "get_weather"


def test_n_choices_usage_and_logprobs_with_reasoning(proxy):
    chunks = list(
        openai_client(proxy.url).chat.completions.create(
            model="m", messages=QUESTION, n=2, stream=True, logprobs=True, stream_options={"include_usage": True}
        )
    )
    by_choice: dict[int, list[str]] = {0: [], 1: []}
    for chunk in chunks:
        for choice in chunk.choices:
            by_choice[choice.index].append((choice.delta.model_extra or {}).get("reasoning_content") or "")
    assert ["".join(parts) for parts in by_choice.values()] == ["Two plus two is four."] * 2
    assert chunks[-1].usage.completion_tokens == 2 * len(THOUGHT_TOKENS)
