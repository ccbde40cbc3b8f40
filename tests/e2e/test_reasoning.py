"""Reasoning split against the real llama-server: SmolLM2 held by a grammar to think first."""

from __future__ import annotations

import pytest

THINK_FIRST = 'root ::= "<think>" [a-z ]{8,60} "</think>" [A-Za-z ,.!]{4,60}'
REQUEST = {
    "model": "smollm",
    "messages": [{"role": "user", "content": "Say hello."}],
    "temperature": 0,
    "seed": 3,
    "max_tokens": 80,
}


@pytest.mark.parametrize("reasoning_format, split", [("deepseek", True), ("none", False)])
def test_a_thought_forced_by_grammar_is_split_streamed_and_not(client, reasoning_format, split):
    extra = {"grammar": THINK_FIRST, "reasoning_format": reasoning_format}
    message = client.chat.completions.create(**REQUEST, extra_body=extra).choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    streamed_reasoning, streamed_content = "", ""
    for chunk in client.chat.completions.create(**REQUEST, extra_body=extra, stream=True):
        delta = chunk.choices[0].delta
        streamed_reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        streamed_content += delta.content or ""
    if split:
        assert reasoning and set(reasoning) <= set("abcdefghijklmnopqrstuvwxyz ")
        assert "think>" not in message.content
        assert (streamed_reasoning, streamed_content) == (reasoning, message.content)
    else:
        assert reasoning is None and message.content.startswith("<think>")
        assert streamed_content == message.content
