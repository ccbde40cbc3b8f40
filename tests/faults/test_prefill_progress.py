"""Prefill progress end to end, against a fake llama.cpp playing the pinned llama-server's
`prompt_progress` events: the proxy asks for them, shows the request's phase while the prompt is read,
keeps a waiting stream alive (an SSE comment for OpenAI, `ping` for Anthropic), counts the prefill's
seconds in /metrics, and nothing of it reaches the answer."""

from __future__ import annotations

import json
import re
import threading
import time

import anthropic
import pytest
import requests

from api_like_oai import sse
from api_like_oai.answers import LiveRequest

# 100 tokens, 20 of them cached: the second event is half of the work, the third all of it.
PROGRESS = (
    {"total": 100, "cache": 20, "processed": 20, "time_ms": 0},
    {"total": 100, "cache": 20, "processed": 60, "time_ms": 2000},
    {"total": 100, "cache": 20, "processed": 100, "time_ms": 4000},
)
PAUSE = 2.8  # between progress events: the third ends a silence past sse.KEEPALIVE_SECONDS
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
MESSAGES = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
def slow_prompt(replay):
    replay.prompt_progress, replay.progress_pause = PROGRESS, PAUSE
    yield replay
    replay.prompt_progress, replay.progress_pause = (), 0.0


def streamed_while_watching(proxy, path: str, body: dict) -> tuple[bytes, list[dict]]:
    """The whole stream of `body`, and /v1/internal/requests as seen while the prompt was half read."""
    seen: list[dict] = []

    def watch():
        time.sleep(PAUSE * 1.4)  # between the second progress event and the third
        seen.extend(requests.get(proxy.url + "/v1/internal/requests", timeout=10).json()["data"])

    watcher = threading.Thread(target=watch)
    watcher.start()
    response = requests.post(proxy.url + path, json={**body, "stream": True}, timeout=60)
    watcher.join()
    assert response.status_code == 200, response.text
    return response.content, seen


def prefill_count(proxy) -> float:
    text = requests.get(proxy.url + "/metrics", timeout=10).text
    match = re.search(r'^api_like_oai_prefill_seconds_count\{model="[^"]*"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def test_openai_stream_is_kept_alive_while_the_prompt_is_read(qwen_proxy, slow_prompt):
    before = prefill_count(qwen_proxy)
    body, seen = streamed_while_watching(qwen_proxy, "/v1/chat/completions", CHAT)
    assert slow_prompt.requests[-1]["return_progress"] is True
    frames = body.split(b"\n\n")
    assert b'"role":"assistant"' in frames[0]
    assert frames[1] + b"\n\n" == sse.KEEPALIVE_COMMENT  # after the silence, before the first token
    assert body.count(sse.KEEPALIVE_COMMENT) == 1
    deltas = [json.loads(frame[6:])["choices"][0]["delta"] for frame in frames[2:] if frame.startswith(b"data: {")]
    assert "".join(delta.get("content", "") for delta in deltas) == " Hello, world!"
    [request] = seen
    LiveRequest.model_validate(request)  # as /openapi.json documents it
    assert (request["endpoint"], request["phase"], request["prefill_percent"], request["prompt_tokens"]) == (
        "/v1/chat/completions",
        "prefill",
        50.0,
        100,
    )
    assert prefill_count(qwen_proxy) == before + 1


def test_anthropic_stream_gets_pings_while_the_prompt_is_read(qwen_proxy, slow_prompt):
    body, seen = streamed_while_watching(qwen_proxy, "/v1/messages", MESSAGES)
    events = body.split(b"\n\n")[:-1]
    assert events[0] + b"\n\n" == sse.KEEPALIVE_PING  # the ping comes first: message_start waits for a token
    names = [json.loads(event.split(b"\ndata: ")[1])["type"] for event in events[1:]]
    assert names[0] == "message_start" and names[-1] == "message_stop" and "ping" not in names
    assert [request["phase"] for request in seen] == ["prefill"]


def test_a_quick_prompt_gets_no_keepalive_and_the_same_answer(qwen_proxy, replay):
    replay.prompt_progress = PROGRESS
    try:
        streamed = requests.post(qwen_proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30)
        whole = requests.post(qwen_proxy.url + "/v1/chat/completions", json=CHAT, timeout=30).json()
    finally:
        replay.prompt_progress = ()
    assert b"keep-alive" not in streamed.content and b"progress" not in streamed.content
    assert whole["choices"][0]["message"]["content"] == " Hello, world!"
    assert whole["usage"]["prompt_tokens"] == 3


def test_finished_requests_leave_the_live_list(qwen_proxy, replay):
    requests.post(qwen_proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30).close()
    deadline = time.monotonic() + 5  # the stream's record closes once the server finished writing it
    while (listed := requests.get(qwen_proxy.url + "/v1/internal/requests", timeout=10).json())[
        "data"
    ] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listed == {"object": "list", "data": []}


def test_anthropics_sdk_reads_through_the_pings(qwen_proxy, slow_prompt):
    client = anthropic.Anthropic(base_url=qwen_proxy.url, api_key="unused")
    with client.messages.stream(**MESSAGES) as stream:
        assert "".join(stream.text_stream) == " Hello, world!"
        assert stream.get_final_message().stop_reason == "end_turn"
