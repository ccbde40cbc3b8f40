"""A real typed client built on the Open Responses spec, the Vercel AI SDK's `@ai-sdk/open-responses`
(pinned in tests/node/open-responses/package-lock.json, installed by scripts/setup), run with Node
against the proxy in front of the scripted Hermes-format model of tests/open_responses.py: plain,
streamed, with a system prompt, a tool call (streamed and not), an image and several turns. Each case
must succeed in the SDK and mean what the application asked for; the raw answers the SDK kept are read
with the spec's types as well (the provider itself only types them, it does not validate them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ..open_responses import IMAGE, PLAIN_ANSWER, WEATHER_ARGUMENTS, resource, scripted_weather

CLIENT_DIR = Path(__file__).resolve().parents[1] / "node" / "open-responses"
CASES = ["generate-text", "stream-text", "system-prompt", "tool-call", "tool-call-streaming", "image-input", "multi-turn"]


@pytest.fixture(scope="module")
def fake(start_fake):
    """The scripted model, which the conftest's `proxy` stands in front of."""
    return start_fake(**scripted_weather(modalities={"vision": True}, media_marker="<__media_scripted__>"))


@pytest.fixture(scope="module")
def results(proxy) -> dict[str, dict]:
    """Each case's line from client-cases.mjs, by case name; the prompts the upstream got, by case."""
    assert (CLIENT_DIR / "node_modules" / "@ai-sdk" / "open-responses").is_dir(), (
        "the AI SDK is not installed: run scripts/setup (npm ci in tests/node/open-responses)"
    )
    run = subprocess.run(
        ["node", "client-cases.mjs", proxy.url], cwd=CLIENT_DIR, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    return {line["case"]: line for line in map(json.loads, run.stdout.splitlines())}


def prompt_text(request: dict) -> str:
    """The text of the prompt the upstream got (a string, or the object of a prompt with images)."""
    prompt = request.get("prompt", "")
    return prompt["prompt_string"] if isinstance(prompt, dict) else prompt


def test_every_case_succeeds_in_the_sdk(results):
    failed = {name: line.get("error") for name, line in results.items() if not line["ok"]}
    assert not failed
    assert sorted(results) == sorted(CASES)


@pytest.mark.parametrize("case", ["generate-text", "stream-text", "system-prompt", "image-input", "multi-turn"])
def test_a_text_answer_is_the_models_text_and_a_stop(results, case):
    line = results[case]
    assert line["text"] == PLAIN_ANSWER and line["finishReason"] == "stop" and line["toolCalls"] == []
    assert line["usage"]["outputTokens"] == 3 and line["usage"]["inputTokens"] > 0
    assert line["modelId"] == "gpt-4o-mini"


@pytest.mark.parametrize("case", ["tool-call", "tool-call-streaming"])
def test_a_tool_call_is_get_weather_with_the_models_arguments(results, case):
    line = results[case]
    assert line["finishReason"] == "tool-calls" and line["text"] == ""
    [call] = line["toolCalls"]
    assert call["toolName"] == "get_weather" and call["input"] == WEATHER_ARGUMENTS
    assert call["toolCallId"].startswith("call_")


def test_streamed_cases_arrive_in_parts(results):
    assert results["stream-text"]["parts"].count("text-delta") == 3  # the model's three tokens, as they came
    assert "tool-call" in results["tool-call-streaming"]["parts"]
    assert "error" not in results["stream-text"]["parts"] + results["tool-call-streaming"]["parts"]


@pytest.mark.parametrize("case", ["generate-text", "system-prompt", "tool-call", "image-input", "multi-turn"])
def test_the_raw_answer_the_sdk_read_is_the_specs_response_resource(results, case):
    body = results[case]["body"]
    resource(body)
    assert body["id"] == results[case]["responseId"] and body["status"] == "completed"


def test_the_model_got_what_the_sdk_sent(results, fake):
    """The system prompt, the image and the earlier turns reached the model's prompt."""
    prompts = [request for request in fake.requests if "prompt" in request]
    texts = [prompt_text(request) for request in prompts]
    assert any("You are a pirate. Always respond in pirate speak." in text and "Say hello." in text for text in texts)
    assert any(
        "My name is Alice." in text and "How can I help you today?" in text and "What is my name?" in text for text in texts
    )
    with_image = [request["prompt"] for request in prompts if isinstance(request["prompt"], dict)]
    assert [prompt["multimodal_data"] for prompt in with_image] == [[IMAGE.split(",", 1)[1]]]
    assert [tool["name"] for tool in results["tool-call"]["body"]["tools"]] == ["get_weather"]
