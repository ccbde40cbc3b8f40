"""SIGTERM: stop accepting, let streams finish within the grace period, end the rest with an error, exit 0."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}


@pytest.fixture
def slow_fake():
    upstream = FakeLlamaCpp(behaviour="slow_tokens", token_interval=0.25).start()
    yield upstream
    upstream.stop()


def stream_in_background(proxy) -> dict:
    result: dict = {}

    def read():
        response = requests.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=30)
        result["text"] = response.text

    thread = threading.Thread(target=read)
    thread.start()
    result["thread"] = thread
    return result


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
@pytest.mark.parametrize("tokens, grace, ends_with", [(4, "5", "done"), (40, "1", "error")])
def test_sigterm_lets_streams_finish_within_the_grace_period(slow_fake, start_proxy, tokens, grace, ends_with, worker_class):
    slow_fake.tokens = tuple(f" t{n}" for n in range(tokens))
    proxy = start_proxy(
        "--llama-api", slow_fake.url, "--chat-prompt-model", "chatml", "--grace-period", grace, "--worker-class", worker_class
    )
    stream = stream_in_background(proxy)
    time.sleep(0.5)
    proxy.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    with pytest.raises(requests.ConnectionError):
        requests.get(proxy.url + "/v1/models", timeout=2)  # no longer accepting
    stream["thread"].join(timeout=20)
    assert proxy.process.wait(timeout=20) == 0
    if ends_with == "done":
        assert stream["text"].endswith("data: [DONE]\n\n")
        assert " t3" in stream["text"]
    else:
        last_event = json.loads(stream["text"].strip().split("\n\n")[-1][6:])
        assert "shutting down" in last_event["error"]["message"]
