"""The event-driven worker and several workers: more streams than threads, /metrics and
stop-generation for the whole server, not one process."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}


@pytest.fixture
def slow_fake():
    """Streams that last ten minutes unless stopped: however slowly a loaded machine opens a hundred of
    them, the first is still streaming when the last one starts (the tests stop them all)."""
    upstream = FakeLlamaCpp(behaviour="slow_tokens", token_interval=0.05, tokens=tuple(f" t{n}" for n in range(12_000))).start()
    upstream.server.request_queue_size = 256
    yield upstream
    upstream.stop()


def metric(proxy, name: str, labels: str = "") -> float:
    text = requests.get(proxy.url + "/metrics", timeout=5).text
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def open_streams(proxy, count: int) -> list[dict]:
    """`count` streams read in background threads; each result gets the stream's text."""
    results = [{} for _ in range(count)]

    def read(result):
        result["text"] = requests.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=60).text

    for result in results:
        result["thread"] = threading.Thread(target=read, args=(result,))
        result["thread"].start()
    return results


def wait_for(condition, timeout: float = 120.0) -> None:
    """Until `condition()`: the timeout only bounds a hang, it is no expectation of speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def workers_of(proxy) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == proxy.process.pid]


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def client_connections(pid: int, port: int) -> int:
    """Established TCP connections on `port` (the proxy's) whose socket `pid` holds open."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inodes.add(fields[9])
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        held += target.startswith("socket:[") and target[8:-1] in inodes
    return held


def finish_reasons(stream_text: str) -> list[str]:
    chunks = [json.loads(line[6:]) for line in stream_text.split("\n\n") if line.startswith("data: {")]
    return [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]


def test_one_worker_holds_more_streams_than_threads(slow_fake, start_proxy):
    proxy = start_proxy("--llama-api", slow_fake.url, "--chat-prompt-model", "chatml", "--threads", "4")
    streams = open_streams(proxy, 100)
    wait_for(lambda: metric(proxy, "api_like_oai_streams_in_flight") == 100)  # all at once, none queued
    assert requests.post(proxy.url + "/v1/internal/stop-generation", timeout=10).json() == {"stopped": 100}
    for stream in streams:
        stream["thread"].join(timeout=120)
        assert finish_reasons(stream["text"]) == ["stop"]


def test_stop_generation_and_metrics_reach_every_worker(slow_fake, start_proxy):
    proxy = start_proxy("--llama-api", slow_fake.url, "--chat-prompt-model", "chatml", "--workers", "2")
    streams = []
    while not all(client_connections(pid, proxy.port) for pid in workers_of(proxy)):
        assert len(streams) < 64, "the kernel never handed a stream to the second worker"
        streams += open_streams(proxy, 4)
        opened = len(streams)
        wait_for(lambda: sum(client_connections(pid, proxy.port) for pid in workers_of(proxy)) == opened)  # noqa: B023
    wait_for(lambda: metric(proxy, "api_like_oai_streams_in_flight") == len(streams))
    assert requests.post(proxy.url + "/v1/internal/stop-generation", timeout=10).json() == {"stopped": len(streams)}
    for stream in streams:
        stream["thread"].join(timeout=120)
        assert finish_reasons(stream["text"]) == ["stop"]
    wait_for(lambda: metric(proxy, "api_like_oai_streams_in_flight") == 0)
    for _ in range(4):  # whichever worker answers, it counts every worker's requests
        assert metric(
            proxy, "api_like_oai_requests_total", 'endpoint="/v1/chat/completions",model="llama.cpp",status="200"'
        ) == len(streams)


def test_debug_serves_streams_with_werkzeug_unpatched(start_fake, start_proxy):
    proxy = start_proxy("--llama-api", start_fake().url, "--chat-prompt-model", "chatml", "--debug")
    text = requests.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=10).text
    assert text.endswith("data: [DONE]\n\n") and finish_reasons(text) == ["stop"]
    assert "Werkzeug" in requests.get(proxy.url + "/health", timeout=5).headers.get("Server", "")
    assert "Using worker" not in proxy.log()  # no gunicorn, hence no gevent
