"""What a key means at the upstream, through the proxy as users run it (its CLI, gunicorn + gevent),
in front of a scripted llama.cpp with one slot: per-key priority (while that slot is busy, a
high-priority key's request that came last is sent upstream before the low-priority ones that waited
longer; the waiting counted on /metrics by priority), and token limits checked on the rendered
prompt before anything is generated."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp
from ..servers import children_of

ADMIN = {"Authorization": "Bearer admin-priority-secret"}


@pytest.fixture(scope="module")
def one_slot():
    """A fake llama.cpp with one slot; a prompt saying "hold" is answered only once `release` is set."""
    release = threading.Event()

    def script(body: dict) -> list[str]:
        if "hold" in body["prompt"]:
            release.wait(30)
        return [" done"]

    upstream = FakeLlamaCpp(props_extra={"total_slots": 1}, script=script).start()
    upstream.release = release
    yield upstream
    release.set()
    upstream.stop()


@pytest.fixture(scope="module")
def proxy(one_slot, start_proxy, tmp_path_factory):
    store = tmp_path_factory.mktemp("priority") / "store.sqlite3"
    return start_proxy(
        "--llama-api",
        one_slot.url,
        "--chat-prompt-model",
        "chatml",
        "--store",
        f"sqlite:///{store}",
        "--admin-key",
        ADMIN["Authorization"].split()[1],
    )


def key_of(proxy, name: str, priority: str) -> str:
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": name, "priority": priority}, headers=ADMIN, timeout=10)
    assert created.status_code == 201 and created.json()["priority"] == priority, created.text
    return created.json()["key"]


def waiting(proxy, priority: str) -> float:
    metrics = requests.get(proxy.url + "/metrics", headers=ADMIN, timeout=10).text
    found = re.search(rf'^api_like_oai_slot_waiting{{priority="{priority}"}} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_high_priority_request_waiting_for_the_busy_slot_is_served_before_earlier_low_ones(proxy, one_slot):
    low, high = key_of(proxy, "batch", "low"), key_of(proxy, "interactive", "high")
    statuses: dict[str, int] = {}

    def ask(key: str, words: str) -> None:
        statuses[words] = requests.post(
            proxy.url + "/v1/chat/completions",
            timeout=60,
            headers={"Authorization": f"Bearer {key}"},
            json={"messages": [{"role": "user", "content": words}], "max_tokens": 4},
        ).status_code

    askers = [threading.Thread(target=ask, args=(low, "hold the slot"))]
    askers[0].start()
    wait_for(lambda: len(one_slot.requests) == 1, "the first request to hold the slot upstream")
    for n in range(1, 4):
        askers.append(threading.Thread(target=ask, args=(low, f"low {n}")))
        askers[-1].start()
        wait_for(lambda n=n: waiting(proxy, "low") == n, f"{n} low requests waiting")
    askers.append(threading.Thread(target=ask, args=(high, "high 1")))
    askers[-1].start()
    wait_for(lambda: waiting(proxy, "high") == 1, "the high request waiting")
    assert len(one_slot.requests) == 1  # nothing else was sent while the slot was busy

    one_slot.release.set()
    for asker in askers:
        asker.join(60)
    sent = [re.search(r"(hold the slot|low \d|high \d)", body["prompt"]).group(1) for body in one_slot.requests]
    assert sent == ["hold the slot", "high 1", "low 1", "low 2", "low 3"]
    assert set(statuses.values()) == {200} and len(statuses) == 5
    assert waiting(proxy, "low") == waiting(proxy, "high") == 0


def test_a_prompt_whose_tokens_and_max_tokens_do_not_fit_what_is_left_is_refused_before_generation(proxy, one_slot):
    key = requests.post(proxy.url + "/v1/internal/keys", json={"name": "small", "tpm": 60}, headers=ADMIN, timeout=10).json()[
        "key"
    ]
    sent_before = len(one_slot.requests)
    long_prompt = " ".join(f"word{n}" for n in range(80))  # the fake counts a prompt's tokens as its words
    refused = requests.post(
        proxy.url + "/v1/chat/completions",
        timeout=60,
        headers={"Authorization": f"Bearer {key}"},
        json={"messages": [{"role": "user", "content": long_prompt}], "max_tokens": 10},
    )
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "tokens"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    asked = one_slot.requests[sent_before:]
    assert asked and all("content" in body and "prompt" not in body for body in asked)  # counted, not generated
    short = requests.post(
        proxy.url + "/v1/chat/completions",
        timeout=60,
        headers={"Authorization": f"Bearer {key}"},
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
    )
    assert short.status_code == 200 and int(short.headers["x-ratelimit-remaining-tokens"]) <= 60


def test_a_worker_killed_mid_stream_leaves_what_the_upstream_reported_counted_and_usage_survives_a_restart(start_proxy, tmp_path):
    """The tokens of a running request are written as the upstream reports them (every second), so a
    worker killed with SIGKILL mid-stream leaves them in the key's usage and its limits, with what is
    left of its reservation (max_tokens) counted until its lease runs out; the usage is in the store."""
    # The fake streams what it is given whatever max_tokens says: 1500 tokens (30 s) for the stream the
    # worker is killed in, a few for the request after it (which, given the 1500, took those 30 s).
    long_answer, short_answer = [f" t{n}" for n in range(1500)], [f" t{n}" for n in range(8)]
    upstream = FakeLlamaCpp(
        behaviour="slow_tokens", token_interval=0.02, script=lambda body: short_answer if "hi" in body["prompt"] else long_answer
    ).start()
    try:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"store: sqlite://{tmp_path}/store.sqlite3\nadmin_key: [{ADMIN['Authorization'].split()[1]}]\n"
            f"models:\n  smol:\n    upstreams: [{upstream.url}]\n    chat_prompt_model: chatml\n"
        )
        proxy = start_proxy("--config", str(config))
        key = requests.post(
            proxy.url + "/v1/internal/keys", json={"name": "killed", "tpm": 100_000}, headers=ADMIN, timeout=10
        ).json()["key"]
        stream = requests.post(
            proxy.url + "/v1/chat/completions",
            stream=True,
            timeout=60,
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "smol", "messages": [{"role": "user", "content": "go"}], "stream": True, "max_tokens": 2000},
        )
        started, received = time.monotonic(), 0
        # Held until the kill: leaving a loop over a temporary iter_lines() closes the connection at once
        # (urllib3 drops it), and a worker that sees its client leave ends the request, freeing its
        # reservation, before the SIGKILL lands: a client that left, not a worker killed mid-stream.
        lines = stream.iter_lines()
        for line in lines:
            received += line.startswith(b'data: {"id"') and b'"content"' in line
            if time.monotonic() - started > 3.5 and received > 20:  # a few checkpoints written
                break
        [worker] = children_of(proxy.process.pid)
        os.kill(worker, signal.SIGKILL)
        stream.close()

        [row] = usage_rows(proxy)  # gunicorn starts another worker, which reads the store
        assert (row["key"], row["requests"], row["errors"], row["prompt_tokens"]) == ("killed", 1, 0, 3)
        # written at the last checkpoint, a second or less before the kill: most of what was read, at least
        assert received // 2 <= row["completion_tokens"] < 1500
        after = requests.post(
            proxy.url + "/v1/chat/completions",
            timeout=60,
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        )
        assert after.status_code == 200
        # the killed request's 2000 reserved (what it wrote included) still count this minute
        assert int(after.headers["x-ratelimit-remaining-tokens"]) <= 100_000 - 2000
        proxy.stop()
        restarted = start_proxy("--config", str(config))
        answered = after.json()["usage"]
        assert [(r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in usage_rows(restarted)] == [
            (2, 3 + answered["prompt_tokens"], row["completion_tokens"] + answered["completion_tokens"])
        ]
    finally:
        upstream.stop()


def usage_rows(proxy) -> list[dict]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return requests.get(proxy.url + "/v1/internal/usage?since=1d", headers=ADMIN, timeout=10).json()["data"]
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the proxy did not answer again"
            time.sleep(0.2)
