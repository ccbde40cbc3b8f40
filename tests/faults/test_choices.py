"""`n` > 1: several generations per request, started together and ended together, whatever ends them."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

PROXY_FLAGS = ("--chat-prompt-model", "chatml")
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100, "n": 3}


@pytest.fixture(autouse=True)
def reset(fake):
    yield
    fake.behaviour, fake.tokens, fake.token_interval = "ok", (" Hello", ",", " world", "!"), 0.3
    fake.first_token_gate, fake.gate_broken = None, 0


def wait_for(condition, timeout: float = 10.0) -> bool:
    """Whether `condition()` became true within `timeout` (the fake's streams would run 100 s)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def streams_in_flight(proxy) -> float:
    metrics = requests.get(proxy.url + "/metrics", timeout=5).text
    return float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith("api_like_oai_streams_in_flight ")))


def chunks_of(lines) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith(b"data: {")]


@pytest.mark.parametrize("ended_by", ["stop-generation", "client leaving"])
def test_ending_three_choices_early_frees_every_upstream_and_counts_the_request(proxy, fake, ended_by):
    fake.behaviour, fake.token_interval, fake.tokens = "slow_tokens", 0.05, (" a",) * 2000
    logged = proxy.log().count("endpoint=/v1/chat/completions")
    with requests.post(proxy.url + "/v1/chat/completions", json={**CHAT, "stream": True}, stream=True, timeout=30) as response:
        lines = response.iter_lines()
        while len(chunks_of([next(lines)])) == 0 or fake.streaming < 3:
            pass  # until tokens flow and all three generations run upstream
        if ended_by == "stop-generation":
            requests.post(proxy.url + "/v1/internal/stop-generation", timeout=10)
            rest = list(lines)
            finishes = {
                c["choices"][0]["index"]: c["choices"][0]["finish_reason"]
                for c in chunks_of(rest)
                if c["choices"] and c["choices"][0]["finish_reason"]
            }
            assert finishes == {0: "stop", 1: "stop", 2: "stop"} and b"data: [DONE]" in rest
    assert wait_for(lambda: fake.streaming == 0), "an upstream generation was left running"
    assert wait_for(lambda: streams_in_flight(proxy) == 0)
    assert wait_for(lambda: proxy.log().count("endpoint=/v1/chat/completions") == logged + 1), "no access-log line"


def test_three_choices_are_started_together(proxy, fake):
    """Each request waits at the fake until all three were sent: one sent after another's first token would not come."""
    fake.first_token_gate = threading.Barrier(3, timeout=5)
    response = requests.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert response.status_code == 200 and len(response.json()["choices"]) == 3
    assert fake.gate_broken == 0
