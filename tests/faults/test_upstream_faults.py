"""Upstream faults, injected with the scriptable fake llama.cpp server, seen through the real proxy CLI."""

from __future__ import annotations

import json
import time

import pytest
import requests

PROXY_FLAGS = ("--chat-prompt-model", "chatml", "--read-timeout", "1")
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}


@pytest.fixture(autouse=True)
def reset(fake):
    fake.behaviour = "ok"
    fake.hang_seconds = 3.0
    yield
    fake.behaviour = "ok"


def post(proxy, stream: bool, timeout: float = 30) -> requests.Response:
    return requests.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=timeout)


def events_of(response: requests.Response) -> list[dict]:
    return [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]


def assert_error(response: requests.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


@pytest.mark.parametrize("stream", [False, True])
def test_the_fake_answers_normally(proxy, stream):
    response = post(proxy, stream)
    assert response.status_code == 200
    text = response.text if stream else response.json()["choices"][0]["message"]["content"]
    assert "Hello" in text


@pytest.mark.parametrize("stream", [False, True])
def test_refused_connection_is_503_naming_the_upstream(start_proxy, stream):
    from ..servers import free_port

    dead_url = f"http://127.0.0.1:{free_port()}"
    proxy = start_proxy("--llama-api", dead_url, "--chat-prompt-model", "chatml")
    assert dead_url in assert_error(post(proxy, stream), 503, "upstream_unavailable")["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_hanging_upstream_is_504_after_the_read_timeout(proxy, fake, stream):
    fake.behaviour = "hang"
    started = time.monotonic()
    assert_error(post(proxy, stream), 504, "upstream_timeout")
    assert time.monotonic() - started < fake.hang_seconds


def test_malformed_json_is_502(proxy, fake):
    fake.behaviour = "malformed"
    assert "malformed" in assert_error(post(proxy, False), 502, "bad_upstream_response")["message"]


def test_a_malformed_event_after_the_upstream_accepted_a_stream_is_its_error_event(proxy, fake):
    """llama.cpp's 200 head starts the proxy's stream (issue 54: its head goes out while the prompt is
    read), so what fails after it ends that stream with the API's error event, as llama.cpp's own would."""
    fake.behaviour = "malformed"
    response = post(proxy, True)
    assert response.status_code == 200
    error = events_of(response)[-1]["error"]
    assert error["code"] == "bad_upstream_response" and "malformed" in error["message"]
    assert "[DONE]" not in response.text


@pytest.mark.parametrize("stream", [False, True])
def test_unexpected_status_is_502_with_its_message(proxy, fake, stream):
    fake.behaviour = "status_500"
    assert "Internal Server Error" in assert_error(post(proxy, stream), 502, "bad_upstream_response")["message"]


def test_loading_model_is_503(proxy, fake):
    fake.behaviour = "loading"
    assert "Loading model" in assert_error(post(proxy, False), 503, "upstream_unavailable")["message"]
    assert requests.get(proxy.url + "/health", timeout=10).status_code == 503


HI = [{"role": "user", "content": "Hi"}]
STREAMED = {
    "/v1/completions": {"prompt": "Hi", "max_tokens": 8, "stream": True},
    "/v1/chat/completions": {"messages": HI, "max_tokens": 8, "stream": True},
    "/v1/messages": {"model": "claude-sonnet-4-5", "messages": HI, "max_tokens": 8, "stream": True},
    "/v1/responses": {"model": "gpt-5", "input": "Hi", "max_output_tokens": 8, "stream": True, "store": False},
    "/api/chat": {"model": "llama3", "messages": HI},
}


@pytest.mark.parametrize("path", sorted(STREAMED))
def test_a_stream_begins_when_the_upstream_accepts_it_not_at_its_first_token(proxy, fake, path):
    """Issue 54: llama.cpp sends its 200 head as it queues the request, long before the first token; the
    proxy's answer starts then (backends.events.Accepted), so the app's work on its response and its head
    are done while the prompt is read, not between the first token and the client. Here the prompt is
    read for 0.9 s (under the module's --read-timeout): the head comes within the worker's hold on it
    (the kernel's 200 ms), the text after."""
    fake.behaviour, fake.hang_seconds = "slow_prefill", 0.9
    started = time.monotonic()
    with requests.post(proxy.url + path, json=STREAMED[path], stream=True, timeout=30) as response:
        began = time.monotonic() - started  # requests returns once the head is read
        body = response.content.decode()
    assert response.status_code == 200 and began < 0.6, (response.status_code, began)
    assert time.monotonic() - started >= 0.9 and "Hello" in body


def test_upstream_dying_mid_stream_ends_the_stream_with_an_error_event(proxy, fake):
    fake.behaviour = "die_mid_stream"
    response = post(proxy, True, timeout=10)
    assert response.status_code == 200  # the stream had begun: the error comes as an event
    events = events_of(response)
    assert "error" in events[-1] and events[-1]["error"]["code"] == "upstream_unavailable"
    assert "[DONE]" not in response.text


def test_upstream_stalling_mid_stream_times_out_with_an_error_event(proxy, fake):
    fake.behaviour = "hang_mid_stream"
    response = post(proxy, True, timeout=10)
    assert events_of(response)[-1]["error"]["code"] == "upstream_timeout"


def test_events_are_relayed_as_they_arrive(fake, start_proxy):
    """Arrival times, not just content: nothing between upstream and client buffers the stream."""
    proxy = start_proxy("--llama-api", fake.url, "--chat-prompt-model", "chatml")
    fake.behaviour, fake.token_interval = "slow_tokens", 0.3
    arrivals = []
    with requests.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True}, stream=True, timeout=30) as response:
        for line in response.iter_lines(chunk_size=None):
            if b'"content":"' in line and b'"content":""' not in line:
                arrivals.append(time.monotonic())
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]
    assert len(arrivals) == len(fake.tokens)
    assert all(gap > 0.2 for gap in gaps), gaps


@pytest.mark.parametrize("stream", [False, True])
def test_the_read_timeout_is_per_token_not_per_stream(proxy, fake, stream):
    """--read-timeout 1 here: a stream of tokens 0.3 s apart runs past 1 s and still completes."""
    fake.behaviour, fake.token_interval = "slow_tokens", 0.3
    fake.tokens = (" a", " b", " c", " d", " e", " f")
    try:
        response = post(proxy, stream)
        assert response.status_code == 200
        if stream:
            assert '"error"' not in response.text and response.text.endswith("data: [DONE]\n\n")
        else:
            assert response.json()["choices"][0]["message"]["content"] == " a b c d e f"
    finally:
        fake.tokens = (" Hello", ",", " world", "!")
