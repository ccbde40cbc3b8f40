"""The benchmark's floor app (issue 29) and the fake's OpenAI endpoint, in front of benchmarks/fake_llamacpp.py:
what the ratio rows measure must be a working request, the same answer the proxy gives, streamed one event
per upstream event. The measuring itself is `scripts/bench --quick`."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from benchmarks.processes import Service, free_port
from benchmarks.servers import HERE

BODY = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def fake():
    port = free_port()
    service = Service("fake-llamacpp", [sys.executable, str(HERE / "fake_llamacpp.py"), "--port", str(port)], port).start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def floor(fake):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLOOR_UPSTREAMS", json.dumps({"bench": fake.url}))
        sys.modules.pop("benchmarks.floor_app", None)
        module = importlib.import_module("benchmarks.floor_app")
    yield module.app.test_client()
    sys.modules.pop("benchmarks.floor_app", None)


def frames(body: bytes) -> list[bytes]:
    return [frame for frame in body.split(b"\n\n") if frame]


def test_floor_answers_a_chat_whole(floor):
    answer = floor.post("/v1/chat/completions", json=BODY)
    assert answer.status_code == 200
    assert answer.get_json()["choices"][0]["message"] == {"role": "assistant", "content": " w0 w1 w2 w3"}


def test_floor_streams_one_event_per_upstream_event(floor):
    answer = floor.post("/v1/chat/completions", json={**BODY, "stream": True})
    events = frames(answer.get_data())
    assert answer.status_code == 200 and answer.mimetype == "text/event-stream"
    assert len(events) == 4 + 1 + 1  # the tokens, llama.cpp's final event, [DONE]
    assert [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:4]] == [" w0", " w1", " w2", " w3"]
    assert events[-1] == b"data: [DONE]"


def test_floor_answers_a_completion(floor):
    answer = floor.post("/v1/completions", json={"model": "bench", "prompt": "Once", "max_tokens": 2})
    assert answer.get_json()["choices"][0]["text"] == " w0 w1"


def test_fake_serves_openai_chat_for_litellm(fake):
    import urllib.request

    def post(body: dict) -> bytes:
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(fake.url + "/v1/chat/completions", json.dumps(body).encode(), headers)  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback only
            return response.read()

    whole = json.loads(post(BODY))
    assert whole["choices"][0]["message"]["content"] == " w0 w1 w2 w3" and whole["usage"]["completion_tokens"] == 4
    events = frames(post({**BODY, "stream": True}))
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == " w0 w1 w2 w3"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and events[-1] == b"data: [DONE]"
