"""Ollama's `think` and `thinking` through the one reasoning split (issue 38), replayed by the scripted
fake llama.cpp with a reasoning model's template (tests/faults/test_reasoning.py's): the thought in
`message.thinking` (`thinking` on /api/generate), the answer alone in `content`, streamed and not."""

from __future__ import annotations

import ollama
import pytest

from .test_reasoning import CHAT_TEMPLATE, QUESTION, THOUGHT_TOKENS

__all__ = ["CHAT_TEMPLATE"]  # the conftest's `fake` reports it in /props


@pytest.fixture
def client(proxy, fake):
    fake.tokens = THOUGHT_TOKENS
    return ollama.Client(host=proxy.url)


@pytest.mark.parametrize("stream", [False, True])
def test_the_thought_is_in_thinking(client, stream):
    answer = client.chat(model="qwen3", messages=QUESTION, think=True, stream=stream)
    parts = list(answer) if stream else [answer]
    thinking = "".join(part.message.thinking or "" for part in parts)
    content = "".join(part.message.content for part in parts)
    assert thinking.strip() == "Two plus two is four." and content.strip() == "It is 4."
    assert "think>" not in content


def test_generate_gives_thinking_too(client):
    answer = client.generate(model="qwen3", prompt="What is 2 + 2?", think="high")
    assert answer.thinking.strip() == "Two plus two is four." and answer.response.strip() == "It is 4."


def test_think_false_closes_the_thought_in_the_template(client, fake):
    client.chat(model="qwen3", messages=QUESTION, think=False)
    assert fake.requests[-1]["prompt"].endswith("<think>\n\n</think>\n\n")
    client.chat(model="qwen3", messages=QUESTION, think=True)
    assert not fake.requests[-1]["prompt"].endswith("</think>\n\n")


def test_show_says_thinking(client):
    assert "thinking" in client.show("qwen3").capabilities
