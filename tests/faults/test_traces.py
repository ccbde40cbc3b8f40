"""Traces (--otlp-endpoint) received by a real OTLP/HTTP receiver decoding the protobuf: a streamed
chat continuing the client's traceparent, an Anthropic Messages tool turn, and a failed request,
each checked span by span (names, nesting, order, GenAI attributes)."""

from __future__ import annotations

import time

import anthropic
import pytest
import requests

from ..otlp_receiver import OtlpReceiver
from .conftest import HERMES_CALL

TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def receiver():
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def traced_proxy(fake, receiver, start_proxy):
    return start_proxy(
        "--llama-api",
        fake.url,
        "--chat-prompt-model",
        "qwen2.5",
        "--otlp-endpoint",
        receiver.url,
        env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )


@pytest.fixture
def replay(fake):
    yield fake
    fake.tokens, fake.behaviour, fake.prompt_progress = (" Hello", ",", " world", "!"), "ok", ()


def logged(traced_proxy) -> int:
    return traced_proxy.log().count("request_id=")


def request_id(traced_proxy, logged_before: int) -> str:
    """The request id of the proxy's next access-log line after the first `logged_before` (a stream's
    is written once the server finished writing it, which may be after the client read it)."""
    deadline = time.monotonic() + 10
    while logged(traced_proxy) <= logged_before and time.monotonic() < deadline:
        time.sleep(0.05)
    return traced_proxy.log().split("request_id=")[logged_before + 1].split()[0]


def check_tree(spans: list[dict], children: list[str]) -> dict:
    """The root of `spans`, after checking its children are `children` in order of their start, nested in
    it and in its time."""
    root, *rest = spans
    assert [span["name"] for span in rest] == children
    for span in rest:
        assert (span["trace_id"], span["parent_span_id"]) == (root["trace_id"], root["span_id"])
        assert root["start"] <= span["start"] <= span["end"] <= root["end"]
    assert root["schema_url"] == "https://opentelemetry.io/schemas/1.44.0"
    assert root["resource"]["service.name"] == "api-like-oai"
    return root


def test_streamed_chat_is_a_trace_continuing_the_callers(traced_proxy, receiver, replay):
    replay.prompt_progress = (
        {"total": 3, "cache": 0, "processed": 0, "time_ms": 0},
        {"total": 3, "cache": 0, "processed": 3, "time_ms": 5},
    )
    before = logged(traced_proxy)
    response = requests.post(
        traced_proxy.url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        timeout=30,
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )
    assert response.status_code == 200 and b"[DONE]" in response.content
    spans = receiver.trace_of(request_id(traced_proxy, before))
    root = check_tree(spans, ["admission", "render", "upstream queue", "prefill", "generation"])
    assert (root["name"], root["kind"], root["trace_id"], root["parent_span_id"], root["error"]) == (
        "chat m",
        "server",
        TRACE_ID,
        PARENT_ID,
        False,
    )
    attributes = root["attributes"]
    assert {
        key: attributes[key]
        for key in (
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "gen_ai.response.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "http.route",
            "http.response.status_code",
            "server.address",
        )
    } == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llama.cpp",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "llama.cpp",
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 4,
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "server.address": replay.url,
    }
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < (root["end"] - root["start"]) / 1e9
    assert set(receiver.paths) == {"/v1/traces"}


def test_messages_tool_turn_is_traced(traced_proxy, receiver, replay):
    replay.tokens = HERMES_CALL
    client = anthropic.Anthropic(base_url=traced_proxy.url, api_key="unused")
    before = logged(traced_proxy)
    message = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=256, tools=[WEATHER], messages=[{"role": "user", "content": "Weather in Zürich?"}]
    )
    assert message.stop_reason == "tool_use"
    root = check_tree(receiver.trace_of(request_id(traced_proxy, before)), ["admission", "render", "prefill", "generation"])
    assert root["name"] == "chat claude-sonnet-4-5" and not root["error"]
    assert root["trace_id"] != TRACE_ID and root["parent_span_id"] == ""  # no traceparent: a trace of its own
    assert {
        key: root["attributes"][key]
        for key in ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.usage.output_tokens", "http.route")
    } == {
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.model": "llama.cpp",
        "gen_ai.usage.output_tokens": len(HERMES_CALL),
        "http.route": "/v1/messages",
    }


def test_failed_request_is_an_error_span(traced_proxy, receiver, replay):
    replay.behaviour = "status_500"
    before = logged(traced_proxy)
    response = requests.post(traced_proxy.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert response.status_code == 502
    root = check_tree(receiver.trace_of(request_id(traced_proxy, before)), ["admission", "render"])
    assert root["error"] and root["name"] == "chat m"
    assert (root["attributes"]["error.type"], root["attributes"]["http.response.status_code"]) == (
        response.json()["error"]["code"] or "502",
        502,
    )
    assert root["attributes"]["gen_ai.usage.output_tokens"] == 0


def test_stored_response_traces_its_store_reads_and_writes(traced_proxy, receiver, replay):
    first = requests.post(traced_proxy.url + "/v1/responses", json={"model": "m", "input": "Hi"}, timeout=30).json()
    before = logged(traced_proxy)
    response = requests.post(
        traced_proxy.url + "/v1/responses",
        timeout=30,
        json={"model": "m", "input": "Again", "previous_response_id": first["id"], "stream": True},
    )
    assert response.status_code == 200 and b"response.completed" in response.content
    root = check_tree(
        receiver.trace_of(request_id(traced_proxy, before)),
        ["admission", "store", "store", "render", "prefill", "generation", "store"],
    )
    assert root["name"] == "chat m" and root["attributes"]["http.route"] == "/v1/responses"
