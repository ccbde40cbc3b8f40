"""The Open Responses compliance suite's requests, the spec's own types to check answers with, and a
scripted upstream that answers the suite as a Hermes-format model would.

The suite is `src/lib/compliance-tests.ts` of the openresponses/openresponses repository on GitHub (Apache-2.0). Its
cases are repeated here as data (the requests it sends and what it checks of each answer); its code
is not copied. Its Zod schemas are generated from the spec's OpenAPI document, and so are the pydantic
models of the `openresponses-types` package (pinned in setup.cfg), which check the answers here: every
response object with ResponseResource, every streamed event with its event type's model.
`scripts/open-responses-suite` runs the suite itself, with Node, from a checkout of that repository.
"""

from __future__ import annotations

import json
import subprocess
import sys

from openresponses_types import types as spec
from pydantic import BaseModel

from .fake_llamacpp import FakeLlamaCpp
from .scripted_model import QWEN_TEMPLATE, offered_tools
from .servers import Proxy

# The suite's version its cases here follow: the last commit before it grew WebSocket mode and
# /responses/compact (2026-03-10), where it sends the requests below.
SUITE_COMMIT = "0e3605e3618080ffc15b732d68dbe63fb3b1db73"

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "required": ["location"],
        "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
    },
}
WEATHER_QUESTION = "What's the weather like in San Francisco?"
WEATHER_ARGUMENTS = {"location": "San Francisco, CA"}
IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
PLAIN_ANSWER = "Hello there, friend!"


def _message(role: str, content) -> dict:
    return {"type": "message", "role": role, "content": content}


# id -> (the request's input and tools, streamed, the output item type the answer must hold)
CASES = {
    "basic-response": ({"input": [_message("user", "Say hello in exactly 3 words.")]}, False, "message"),
    "streaming-response": ({"input": [_message("user", "Count from 1 to 5.")]}, True, "message"),
    "system-prompt": (
        {"input": [_message("system", "You are a pirate. Always respond in pirate speak."), _message("user", "Say hello.")]},
        False,
        "message",
    ),
    "tool-calling": ({"input": [_message("user", WEATHER_QUESTION)], "tools": [WEATHER_TOOL]}, False, "function_call"),
    "tool-calling-streaming": ({"input": [_message("user", WEATHER_QUESTION)], "tools": [WEATHER_TOOL]}, True, "function_call"),
    "multi-turn": (
        {
            "input": [
                _message("user", "My name is Alice."),
                _message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
                _message("user", "What is my name?"),
            ]
        },
        False,
        "message",
    ),
}
# The suite's image case: answered once images land (issue 27); until then refused with a 400.
IMAGE_CASE = {
    "input": [
        _message(
            "user",
            [
                {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
                {"type": "input_image", "image_url": IMAGE},
            ],
        )
    ]
}


def request_of(case: dict, streamed: bool, model: str = "gpt-4o-mini") -> dict:
    """The body the suite posts: its case, the model it was given, and `stream`."""
    return {"model": model, **case, "stream": streamed}


def weather_turn(body: dict) -> list[str]:
    """A Hermes-format model's tokens: a get_weather call when the tool is offered and not yet answered,
    else a plain greeting."""
    prompt = body.get("prompt", "")
    prompt = prompt if isinstance(prompt, str) else ""
    if "get_weather" in offered_tools(prompt) and "<tool_response>" not in prompt:
        call = json.dumps({"name": "get_weather", "arguments": WEATHER_ARGUMENTS})
        return ["<tool", "_call>\n", call[:15], call[15:30], call[30:], "\n</tool_call>"]
    return ["Hello", " there,", " friend!"]


def scripted_weather(**props) -> dict:
    """The fields of a fake llama-server (FakeLlamaCpp's) with Qwen2.5's template (Hermes tool calls)
    answering with `weather_turn`; `props` join what its /props reports."""
    return {"chat_template": QWEN_TEMPLATE, "props_extra": {"build_info": "b7000-scripted", **props}, "script": weather_turn}


# --- the spec's types --------------------------------------------------------------------------

# Each streamed event type the spec defines, and its model.
SPEC_EVENTS: dict[str, type[BaseModel]] = {
    next(iter(model.model_fields["type"].annotation)).value: model
    for model in (getattr(spec, name) for name in dir(spec) if name.endswith("StreamingEvent"))
}


def resource(response: dict) -> spec.ResponseResource:
    """`response` read as the spec's ResponseResource, from its JSON and strictly (a string is no number,
    a missing nullable field is missing), as the suite's Zod schema reads it; ValidationError if not."""
    return spec.ResponseResource.model_validate_json(json.dumps(response), strict=True)


def spec_event(event: dict) -> BaseModel | None:
    """`event` read as its type's model in the spec, strictly; None for a type the spec does not define."""
    model = SPEC_EVENTS.get(event["type"])
    return None if model is None else model.model_validate_json(json.dumps(event), strict=True)


# --- the suite itself (scripts/open-responses-suite) ---------------------------------------------


def run_suite(suite_dir: str, options: list[str]) -> int:
    """The suite's runner in `suite_dir` (set up by scripts/open-responses-suite) against a proxy in front
    of the scripted upstream; its exit status."""
    upstream = FakeLlamaCpp(**scripted_weather(modalities={"vision": True}, media_marker="<__media_scripted__>")).start()
    proxy = Proxy(["--llama-api", upstream.url]).start()
    try:
        command = ["npx", "tsx", "bin/compliance-test.ts", "--base-url", proxy.url + "/v1", "--api-key", "unused"]
        return subprocess.run([*command, *options], cwd=suite_dir, check=False).returncode
    finally:
        proxy.stop()
        upstream.stop()


if __name__ == "__main__":
    sys.exit(run_suite(sys.argv[1], sys.argv[2:]))
