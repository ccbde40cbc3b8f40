"""The Responses API's tool kinds against a scripted replay llama.cpp (Qwen2.5's template, Hermes calls):
Codex's requests as recorded, answered; calls of namespaced functions, custom tools and the local
shell written as a tool-trained model writes them and answered as the API's items, through the official
SDK streamed and not; what is set aside named in headers; max_tool_calls held."""

from __future__ import annotations

import json
import pathlib

import pytest
import requests

from ..conftest import openai_client
from .test_responses_stream import BODY, WEATHER, events_of, post

FIXTURES = pathlib.Path(__file__).parents[2] / "benchmarks" / "fixtures"
TARGET = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}
AGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for sub-agents.",
    "tools": [
        {"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": False, "parameters": TARGET},
        {"type": "function", "name": "wait_agent", "description": "Wait for an agent.", "parameters": TARGET},
    ],
}
PATCH_TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files. A FREEFORM tool.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" LF hunk+ "*** End Patch"'},
}
TOOLS = [WEATHER, AGENTS, PATCH_TOOL, {"type": "local_shell"}, {"type": "web_search", "external_web_access": False}]
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+say "alpha" \\ done\n*** End Patch\n'


# The replaying fake's context is as large as a current model's: Codex's prompt is 20k words.
FAKE_PROPS = {"default_generation_settings": {"n_ctx": 262144}}


def hermes_call(name: str, arguments: dict, pieces: int = 4, preface: str = "Sure. ") -> list[str]:
    """A Hermes call as tokens after a `preface`: the markers, and the JSON cut into `pieces` parts
    (inside strings too)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    cuts = [len(body) * n // pieces for n in range(pieces + 1)]
    return [
        *([preface] if preface else []),
        "<tool_call>\n",
        *(body[cuts[n] : cuts[n + 1]] for n in range(pieces)),
        "\n</tool_call>",
    ]


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("codex_turn*.json")), ids=lambda path: path.stem)
def test_codex_requests_as_recorded_are_answered(replay, qwen_proxy, fixture):
    recorded = json.loads(fixture.read_text())
    response = requests.post(
        qwen_proxy.url + recorded["path"],
        json=recorded["body"],
        timeout=30,
        headers={"Originator": recorded["headers"].get("originator", "codex_exec")},
    )
    events = events_of(response)
    assert events[-1]["type"] == "response.completed"
    assert response.headers["X-Tools-Set-Aside"] == "web_search"
    prompt = replay.requests[-1]["prompt"]
    for tool in recorded["body"]["tools"]:
        names = (
            [f"{tool['name']}.{inner['name']}" for inner in tool.get("tools", ())]
            if tool["type"] == "namespace"
            else [tool.get("name", tool["type"])]
            if tool["type"] != "web_search"
            else []
        )
        assert all(f'"name": "{name}"' in prompt for name in names), names
    assert "web_search" not in prompt.split("</tools>")[0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_call_is_a_function_call_with_its_namespace(replay, qwen_proxy, stream):
    replay.tokens = hermes_call("multi_agent_v1.close_agent", {"target": "agent_1"})
    client = openai_client(qwen_proxy.url)
    request = {**BODY, "input": "Close agent_1.", "tools": TOOLS}
    if stream:
        with client.responses.stream(**request) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**request)
    message, call = response.output
    assert (message.type, response.output_text) == ("message", "Sure. ")
    assert (call.type, call.name, call.namespace, call.arguments, call.status) == (
        "function_call",
        "close_agent",
        "multi_agent_v1",
        '{"target": "agent_1"}',
        "completed",
    )
    # The call and its output sent back: the model sees the call under the name it was offered.
    history = [
        {"role": "user", "content": "Close agent_1."},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "closed"},
    ]
    replay.tokens = [" Closed."]
    assert client.responses.create(**{**request, "input": history}).output_text == " Closed."
    prompt = replay.requests[-1]["prompt"]
    assert '<tool_call>\n{"name": "multi_agent_v1.close_agent", "arguments": {"target": "agent_1"}}\n</tool_call>' in prompt
    assert "<tool_response>\nclosed\n</tool_response>" in prompt


@pytest.mark.parametrize("tool_choice", ["auto", {"type": "custom", "name": "apply_patch"}])
def test_a_custom_tool_call_is_answered_with_its_input(replay, qwen_proxy, tool_choice):
    replay.tokens = hermes_call("apply_patch", {"input": PATCH}, pieces=9, preface="")
    body = {**BODY, "input": "Add a.txt.", "tools": TOOLS, "tool_choice": tool_choice, "stream": True}
    events = events_of(post(qwen_proxy, body))
    call = events[-2]["item"]
    assert call == {
        "id": call["id"],
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": call["call_id"],
        "name": "apply_patch",
        "input": PATCH,
    }
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.custom_tool_call_input.delta"] * (len(events) - 6),
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH
    if tool_choice != "auto":  # a grammar holds the call: its input streams as the model writes it
        assert len(deltas) > 1
    replay.tokens = hermes_call("apply_patch", {"input": PATCH}, preface="")
    [parsed] = openai_client(qwen_proxy.url).responses.create(**{**body, "stream": False}).output
    assert (parsed.type, parsed.name, parsed.input) == ("custom_tool_call", "apply_patch", PATCH)


def test_custom_tool_calls_and_outputs_sent_back_reach_the_prompt(replay, qwen_proxy):
    recorded = json.loads((FIXTURES / "codex_turn_gpt55_custom_tool.json").read_text())["body"]
    assert post(qwen_proxy, {**recorded, "stream": False}).status_code == 200
    prompt = replay.requests[-1]["prompt"]
    call = next(item for item in recorded["input"] if item["type"] == "custom_tool_call")
    assert json.dumps({"name": "apply_patch", "arguments": {"input": call["input"]}}, ensure_ascii=False) in prompt
    assert "Success. Updated the following files:\nA a.txt" in prompt


def test_a_local_shell_call_is_answered_with_its_action(replay, qwen_proxy):
    replay.tokens = hermes_call("local_shell", {"command": ["ls", "-la"], "working_directory": "/w"})
    client = openai_client(qwen_proxy.url)
    _, call = client.responses.create(**{**BODY, "input": "List.", "tools": TOOLS}).output
    assert call.type == "local_shell_call" and call.status == "completed"
    assert call.action.model_dump() == {
        "type": "exec",
        "command": ["ls", "-la"],
        "env": {},
        "timeout_ms": None,
        "user": None,
        "working_directory": "/w",
    }
    history = [
        {"role": "user", "content": "List."},
        call.model_dump(exclude_none=True),
        {"type": "local_shell_call_output", "id": call.call_id, "output": '{"output": "a.txt"}'},
    ]
    assert post(qwen_proxy, {**BODY, "input": history, "tools": TOOLS}).status_code == 200
    prompt = replay.requests[-1]["prompt"]
    assert '{"name": "local_shell", "arguments": {"command": ["ls", "-la"], "env": {}, "working_directory": "/w"}}' in prompt


def test_what_is_set_aside_is_named_in_headers(replay, qwen_proxy):
    body = {
        **BODY,
        "tools": [*TOOLS, {"type": "code_interpreter", "container": "auto"}],
        "tool_choice": {"type": "file_search"},
        "input": [{"role": "user", "content": "Hi"}, {"type": "web_search_call", "id": "ws_1", "status": "completed"}],
    }
    response = post(qwen_proxy, body)
    assert response.status_code == 200
    assert (
        response.headers["X-Tools-Set-Aside"],
        response.headers["X-Tool-Choice-Set-Aside"],
        response.headers["X-Input-Items-Set-Aside"],
    ) == ("web_search, code_interpreter", "file_search", "web_search_call")
    assert response.json()["tool_choice"] == {"type": "file_search"}


def test_a_set_aside_kind_that_is_no_plain_word_is_named_other_not_written_into_a_header(replay, qwen_proxy):
    """An item's kind is the client's text: one with a line break (or anything a header may not hold) was a
    gunicorn 500 when echoed; it is named `other`."""
    odd = [{"type": "x\r\nSet-Cookie: a=b", "id": "1"}, {"type": "\u00e9t\u00e9"}, {"type": "item_reference", "id": "r"}]
    response = post(qwen_proxy, {**BODY, "input": [{"role": "user", "content": "Hi"}, *odd]})
    assert response.status_code == 200 and "Set-Cookie" not in response.headers
    assert response.headers["X-Input-Items-Set-Aside"] == "other, item_reference"


@pytest.mark.parametrize("max_tool_calls, calls", [(None, 2), (2, 2), (1, 1)])
def test_max_tool_calls_ends_the_answer_after_that_many(replay, qwen_proxy, max_tool_calls, calls):
    first, second = (hermes_call("get_weather", {"city": city}) for city in ("Oslo", "Rome"))
    replay.tokens = [*first, "\n", *second[1:]]  # two calls in one answer
    body = {**BODY, "tools": TOOLS, "max_tool_calls": max_tool_calls}
    for stream in (False, True):
        response = post(qwen_proxy, {**body, "stream": stream})
        output = events_of(response)[-1]["response"]["output"] if stream else response.json()["output"]
        assert [json.loads(item["arguments"])["city"] for item in output if item["type"] == "function_call"] == ["Oslo", "Rome"][
            :calls
        ]
