"""A reasoning model through the Responses API, replayed by a scripted fake llama.cpp whose template is
Qwen2.5's with Qwen3's <think> history: the thought as a reasoning item before the message (content,
summary, sealed encrypted_content), streamed in OpenAI's event order, read by the official SDK; and the
thought handed back on the next turn reaching the prompt, with no server state."""

from __future__ import annotations

import pytest
import requests

from api_like_oai.prompts.shipped import load

from ..conftest import openai_client
from .conftest import HERMES_ARGUMENTS, HERMES_CALL
from .test_responses_stream import WEATHER, events_of, without_numbers

# Qwen2.5's template, whose assistant turns also show the thought they had (as Qwen3's do); /props reports it.
THINK = "{% if message.reasoning_content %}{{ '<think>' + message.reasoning_content + '</think>\\n' }}{% endif %}"
CHAT_TEMPLATE = (
    load("qwen2.5")
    .replace(
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
        "{{- '<|im_start|>' + message.role + '\\n' }}" + THINK + "{{- message.content + '<|im_end|>' + '\\n' }}",
    )
    .replace("{{- '<|im_start|>' + message.role }}", "{{- '<|im_start|>' + message.role + '\\n' }}" + THINK)
)
THOUGHT_TOKENS = ["<th", "ink>", "\nTwo", " plus two", " is four.", "\n</th", "ink>", "\n\nIt", " is 4."]
THOUGHT = "Two plus two is four."
BODY = {
    "model": "qwen3",
    "input": "What is 2 + 2?",
    "reasoning": {"summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
}


@pytest.fixture(autouse=True)
def reset(fake):
    fake.tokens = THOUGHT_TOKENS
    yield


def post(proxy, body: dict) -> requests.Response:
    return requests.post(proxy.url + "/v1/responses", json=body, timeout=30)


def test_the_thought_is_a_reasoning_item_before_the_message(proxy):
    response = post(proxy, BODY).json()
    reasoning, message = response["output"]
    assert reasoning == {
        "id": reasoning["id"],
        "type": "reasoning",
        "status": "completed",
        "summary": [{"type": "summary_text", "text": THOUGHT}],
        "content": [{"type": "reasoning_text", "text": THOUGHT}],
        "encrypted_content": reasoning["encrypted_content"],
    }
    assert message["content"][0]["text"] == "It is 4."
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}  # <think> to "is four."
    assert response["reasoning"] == {"effort": None, "summary": "auto"}
    plain = post(proxy, {"model": "m", "input": "What is 2 + 2?"}).json()["output"][0]
    assert plain["summary"] == [] and "encrypted_content" not in plain


def test_the_stream_is_openais_event_order(proxy):
    events = events_of(post(proxy, {**BODY, "stream": True}))
    reasoning, message = events[-1]["response"]["output"]
    where = {"item_id": reasoning["id"], "output_index": 0}
    summary = {**where, "summary_index": 0}
    assert without_numbers(events[2:14]) == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": reasoning["id"], "type": "reasoning", "status": "in_progress", "summary": [], "content": []},
        },
        {"type": "response.content_part.added", **where, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}},
        *[
            {"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": delta}
            for delta in ("Two", " plus two", " is four.")
        ],
        {"type": "response.reasoning_text.done", **where, "content_index": 0, "text": THOUGHT},
        {"type": "response.content_part.done", **where, "content_index": 0, "part": {"type": "reasoning_text", "text": THOUGHT}},
        {"type": "response.reasoning_summary_part.added", **summary, "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **summary, "delta": THOUGHT},
        {"type": "response.reasoning_summary_text.done", **summary, "text": THOUGHT},
        {"type": "response.reasoning_summary_part.done", **summary, "part": {"type": "summary_text", "text": THOUGHT}},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
    ]
    assert [e["type"] for e in events[14:]] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert message["content"][0]["text"] == "It is 4."
    folded = post(proxy, BODY).json()  # the same answer but for ids, time and the seal's token, which is its text's
    assert [item["type"] for item in folded["output"]] == ["reasoning", "message"]
    assert folded["output"][0]["encrypted_content"] == reasoning["encrypted_content"]
    assert folded["usage"] == events[-1]["response"]["usage"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdk_reads_the_reasoning_item(proxy, stream):
    client = openai_client(proxy.url)
    if stream:
        with client.responses.stream(**BODY) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**BODY)
    reasoning, message = response.output
    assert (reasoning.type, [part.text for part in reasoning.content], [part.text for part in reasoning.summary]) == (
        "reasoning",
        [THOUGHT],
        [THOUGHT],
    )
    assert response.output_text == "It is 4." and response.usage.output_tokens_details.reasoning_tokens == 5


def test_a_thought_with_a_tool_call_comes_back_on_the_next_turn(proxy, fake):
    fake.tokens = [*THOUGHT_TOKENS[:7], "\n\n", *HERMES_CALL]
    client = openai_client(proxy.url)
    request = {**BODY, "input": "Weather in Zürich?", "tools": [WEATHER]}
    first = client.responses.create(**request)
    assert [item.type for item in first.output] == ["reasoning", "message", "function_call"]
    assert first.output[2].arguments == HERMES_ARGUMENTS
    # As Codex does (store: false): the output items sent back verbatim, then the call's output.
    history = [
        {"role": "user", "content": "Weather in Zürich?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": first.output[2].call_id, "output": "22 degrees"},
    ]
    fake.tokens = [" Warm."]
    for item in history[1:2]:
        item.pop("content")  # the sealed copy alone carries the thought back
    response = requests.post(proxy.url + "/v1/responses", json={**request, "input": history}, timeout=30)
    assert response.status_code == 200 and "X-Input-Items-Set-Aside" not in response.headers
    prompt = fake.requests[-1]["prompt"]
    assert "<|im_start|>assistant\n<think>" + THOUGHT + "</think>\n\nLet me check. \n<tool_call>" in prompt


@pytest.mark.parametrize("encrypted_content", ["gAAAAB-from-openai", None])
def test_a_thought_this_proxy_cannot_read_is_set_aside(proxy, fake, encrypted_content):
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "A summary."}]}
    if encrypted_content:
        item["encrypted_content"] = encrypted_content
    history = [
        {"role": "user", "content": "What is 2 + 2?"},
        item,
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4."}]},
        {"role": "user", "content": "And 3 + 3?"},
    ]
    response = post(proxy, {**BODY, "input": history})
    assert response.status_code == 200 and response.headers["X-Input-Items-Set-Aside"] == "reasoning"
    assert "<think>" not in fake.requests[-1]["prompt"].split("And 3 + 3?")[0]
