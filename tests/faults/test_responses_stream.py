"""The Responses API against a scripted replay llama.cpp: the exact event sequence of a stream (text, a
tool call as a tool-trained model writes it, the token limit, a failure after the start), the
request sent upstream, and the SDK's view of the same answers."""

from __future__ import annotations

import json

import pytest
import requests

from ..conftest import openai_client
from .conftest import FAKE_CONTEXT, HERMES_ARGUMENTS, HERMES_CALL

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
BODY = {"model": "gpt-5-codex", "input": "Weather in Zürich?"}


def events_of(response: requests.Response) -> list[dict]:
    """Each event's data, after checking it is `event: NAME`, `data: JSON`, a blank line, named as its type,
    and numbered in order from 0."""
    assert response.status_code == 200, response.text
    events = []
    for raw in response.text.split("\n\n")[:-1]:
        event_line, data_line = raw.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}" and data_line.startswith("data: ")
        events.append(data)
    assert response.text.endswith("\n\n")
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return events


def post(qwen_proxy, body: dict, path: str = "/v1/responses") -> requests.Response:
    return requests.post(qwen_proxy.url + path, json=body, timeout=30)


def without_numbers(events: list[dict]) -> list[dict]:
    return [{key: value for key, value in event.items() if key != "sequence_number"} for event in events]


def test_text_stream_is_the_documented_event_sequence(qwen_proxy):
    events = events_of(post(qwen_proxy, {**BODY, "stream": True}))
    response_id = events[0]["response"]["id"]
    item_id = events[2]["item"]["id"]
    assert response_id.startswith("resp_") and item_id.startswith("msg_")
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert all(e["response"]["status"] == "in_progress" and e["response"]["output"] == [] for e in events[:2])
    item = {"item_id": item_id, "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": " Hello, world!", "annotations": [], "logprobs": []}
    message = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
    assert without_numbers(events[2:-1]) == [
        {"type": "response.output_item.added", "output_index": 0, "item": {**message, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", **item, "part": {**part, "text": ""}},
        *[
            {"type": "response.output_text.delta", **item, "delta": text, "logprobs": []}
            for text in (" Hello", ",", " world", "!")
        ],
        {"type": "response.output_text.done", **item, "text": " Hello, world!", "logprobs": []},
        {"type": "response.content_part.done", **item, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
    ]
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert completed["response"]["status"] == "completed" and completed["response"]["output"] == [message]
    assert completed["response"]["usage"]["input_tokens"] == 3 and completed["response"]["usage"]["output_tokens"] == 4
    folded = post(qwen_proxy, BODY).json()  # the same response, but for its id, time and item ids
    made_at = {key: completed["response"][key] for key in ("created_at", "completed_at")}  # a second may pass
    assert completed["response"] == folded | {"id": response_id, **made_at, "output": [message]}


@pytest.mark.parametrize(
    "tool_choice, argument_pieces",
    [
        ("auto", [HERMES_ARGUMENTS]),  # no grammar: the call is given out once complete
        ({"type": "function", "name": "get_weather"}, None),  # a grammar holds it: the arguments stream as written
    ],
)
def test_function_call_stream_is_the_documented_event_sequence(replay, qwen_proxy, tool_choice, argument_pieces):
    replay.tokens = HERMES_CALL
    events = events_of(post(qwen_proxy, {**BODY, "stream": True, "tools": [WEATHER], "tool_choice": tool_choice}))
    types = [e["type"] for e in events]
    text_deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    argument_deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(text_deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * len(argument_deltas),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert "".join(e["delta"] for e in text_deltas) == "Let me check. "
    added = events[types.index("response.output_item.added", 3)]
    call_item = added["item"]
    assert added["output_index"] == 1 and call_item["id"].startswith("fc_")
    assert call_item == {
        "id": call_item["id"],
        "type": "function_call",
        "status": "in_progress",
        "call_id": call_item["call_id"],
        "name": "get_weather",
        "arguments": "",
    }
    pieces = [e["delta"] for e in argument_deltas]
    assert all(e["item_id"] == call_item["id"] and e["output_index"] == 1 for e in argument_deltas)
    assert "".join(pieces) == HERMES_ARGUMENTS
    assert pieces == argument_pieces if argument_pieces else len(pieces) > 1
    assert events[-3]["arguments"] == HERMES_ARGUMENTS
    assert events[-2]["item"] == {**call_item, "status": "completed", "arguments": HERMES_ARGUMENTS}
    assert events[-1]["response"]["output"][1] == events[-2]["item"]


def test_the_sdk_reads_calls_and_text_streamed_and_not(replay, qwen_proxy):
    replay.tokens = HERMES_CALL
    client = openai_client(qwen_proxy.url)
    request = {**BODY, "tools": [WEATHER]}
    response = client.responses.create(**request)
    assert response.output_text == "Let me check. "
    [call] = [item for item in response.output if item.type == "function_call"]
    assert (call.name, call.arguments, call.status) == ("get_weather", HERMES_ARGUMENTS, "completed")
    with client.responses.stream(**request) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Let me check. "
    assert [(i.type, getattr(i, "arguments", None)) for i in final.output] == [
        ("message", None),
        ("function_call", HERMES_ARGUMENTS),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_the_token_limit_makes_an_incomplete_response(replay, qwen_proxy, stream):
    replay.stop_type = "limit"
    body = {**BODY, "max_output_tokens": 4, "stream": stream}
    if stream:
        events = events_of(post(qwen_proxy, body))
        assert events[-2]["item"]["status"] == "incomplete"
        assert events[-1]["type"] == "response.incomplete"
        response = events[-1]["response"]
    else:
        response = post(qwen_proxy, body).json()
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert response["output"][0]["status"] == "incomplete"
    assert response["max_output_tokens"] == 4


def test_a_failure_after_the_start_is_response_failed(replay, qwen_proxy):
    replay.behaviour = "die_mid_stream"
    events = events_of(post(qwen_proxy, {**BODY, "stream": True}))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.failed",
    ]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert "llama.cpp" in failed["error"]["message"]


def test_the_request_sent_upstream(replay, qwen_proxy):
    history = [
        {"type": "message", "role": "developer", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Zürich?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Zürich"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "22 degrees"},
    ]
    body = {
        "model": "m",
        "input": history,
        "instructions": "Be brief.",
        "tools": [WEATHER],
        "max_output_tokens": 100000,
        "temperature": 0.5,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_object"}, "verbosity": "low"},
    }
    assert post(qwen_proxy, body).status_code == 200
    sent = replay.requests[-1]
    prompt = sent["prompt"]
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nAnswer in French.\n\n# Tools")
    assert 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>' in prompt
    assert "<tool_response>\n22 degrees\n</tool_response>" in prompt and "opaque" not in prompt
    assert sent["temperature"] == 0.5 and sent["json_schema"] == {"type": "object"}
    assert sent["n_predict"] == FAKE_CONTEXT - len(prompt.split())  # max_output_tokens is an upper bound


def test_input_tokens_is_the_rendered_prompts(replay, qwen_proxy):
    body = {**BODY, "tools": [WEATHER], "instructions": "Be brief."}
    counted = post(qwen_proxy, body, "/v1/responses/input_tokens").json()
    assert post(qwen_proxy, body).status_code == 200
    assert counted == {"object": "response.input_tokens", "input_tokens": len(replay.requests[-1]["prompt"].split())}
