"""Claude Code 2.1.327's own requests, as recorded (benchmarks/fixtures/claude_code_turn*.json: its first
turn and its third, after two tool rounds), replayed with their headers to the proxy in front of a
scripted Qwen2.5: each is answered, nothing is refused, and the later turn's prompt extends the first
turn's, so llama.cpp reuses its cache instead of reading the 20 kB system prompt again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

FIXTURES = Path(__file__).parents[2] / "benchmarks" / "fixtures"
TURNS = ("claude_code_turn.json", "claude_code_turn_tools.json")
BASH_CALL = ["I will", " look.", " <tool_call>\n", '{"name": "Bash", "arguments": {"command": "ls"}}', "\n</tool_call>"]
# The fake's context holds Claude Code's prompt (some 7,000 words).
FAKE_PROPS = {"default_generation_settings": {"n_ctx": 262144}}


def replay_recorded(qwen_proxy, name: str) -> requests.Response:
    recorded = json.loads((FIXTURES / name).read_text())
    headers = {key: value for key, value in recorded["headers"].items() if key.lower() != "accept-encoding"}
    return requests.request(
        recorded["method"], qwen_proxy.url + recorded["path"], json=recorded["body"], headers=headers, timeout=30
    )


def events_of(response: requests.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    return [json.loads(line.removeprefix("data: ")) for line in response.text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("name", TURNS)
def test_a_recorded_claude_code_request_is_answered(replay, qwen_proxy, name):
    replay.tokens = BASH_CALL
    events = events_of(replay_recorded(qwen_proxy, name))
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    (call,) = [
        event["content_block"]
        for event in events
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use"
    ]
    assert call["name"] == "Bash"
    prompt = replay.requests[-1]["prompt"]
    assert "x-anthropic-billing-header" not in prompt
    assert prompt.startswith("<|im_start|>system\nYou are a Claude agent, built on Anthropic's Claude Agent SDK.\n")
    assert '"name": "DeferredToolPlaceholder"' in prompt  # defer_loading: offered like the others
    assert "<|im_end|>\n<|im_start|>system\n# Environment\n" in prompt  # the late system turn, in its place


def test_the_later_turn_extends_the_first_turns_prompt(replay, qwen_proxy):
    prompts = []
    for name in TURNS:
        events_of(replay_recorded(qwen_proxy, name))
        prompts.append(replay.requests[-1]["prompt"])
    first_turn = prompts[0].removesuffix("<|im_start|>assistant\n")
    assert prompts[1].startswith(first_turn)
    assert len(prompts[1]) > len(first_turn) + 100
