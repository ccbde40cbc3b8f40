"""The real llama-server dying and coming back, and load: many concurrent streams through the proxy."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

HELLO = {"messages": [{"role": "user", "content": "Tell me about cats."}]}


def stream_chat(url: str, body: dict) -> dict:
    """One streamed chat: its text, finish reasons, whether it ended with [DONE], time to first token."""
    started = time.perf_counter()
    first = None
    text, finishes, errors, done = [], [], [], False
    with requests.post(url + "/v1/chat/completions", json={**body, "stream": True}, stream=True, timeout=300) as response:
        assert response.status_code == 200, response.text
        for line in response.iter_lines(chunk_size=None):
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    errors.append(event["error"])
                    continue
                choice = event["choices"][0]
                if choice["delta"].get("content"):
                    first = first or time.perf_counter()
                    text.append(choice["delta"]["content"])
                if choice["finish_reason"]:
                    finishes.append(choice["finish_reason"])
    return {
        "text": "".join(text),
        "finishes": finishes,
        "errors": errors,
        "done": done,
        "ttft": (first or time.perf_counter()) - started,
        "total": time.perf_counter() - started,
    }


def peak_memory_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def test_killed_llama_server_gives_503_then_serves_again_after_restart(start_llama_server, start_proxy):
    server = start_llama_server(context_size=2048, slots=2)
    proxy = start_proxy("--llama-api", server.url)
    body = {**HELLO, "max_tokens": 900, "ignore_eos": True, "stream": True}
    with requests.post(proxy.url + "/v1/chat/completions", json=body, stream=True, timeout=30) as response:
        lines = response.iter_lines(chunk_size=None)
        for _ in range(5):
            next(lines)
        server.process.send_signal(signal.SIGKILL)
        rest = b"\n".join(lines)  # must end, not hang
    assert b'"error"' in rest and b"[DONE]" not in rest
    down = requests.post(proxy.url + "/v1/chat/completions", json={**HELLO, "max_tokens": 4}, timeout=30)
    assert down.status_code == 503 and down.json()["error"]["code"] == "upstream_unavailable"
    server.start()  # same port
    again = requests.post(proxy.url + "/v1/chat/completions", json={**HELLO, "max_tokens": 4}, timeout=60)
    assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"]


def test_64_concurrent_streams_through_the_real_server(proxy, load_report):
    body = {**HELLO, "max_tokens": 16, "temperature": 0}
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda _: stream_chat(proxy.url, body), range(64)))
    assert all(r["done"] and not r["errors"] for r in results)
    assert all(len(r["finishes"]) == 1 and r["text"] for r in results)
    ttfts = sorted(r["ttft"] for r in results)
    load_report(
        f"64 streams via real llama-server (4 slots): TTFT p50 {ttfts[32] * 1000:.0f} ms, "
        f"max total {max(r['total'] for r in results):.1f} s, proxy peak RSS {peak_memory_mb(proxy.process.pid):.0f} MB"
    )


@pytest.fixture(scope="module")
def fast_fake(start_fake):
    return start_fake(tokens=tuple(f" w{n}" for n in range(16)))


def test_256_concurrent_streams_through_a_fast_fake(fast_fake, start_proxy, load_report):
    proxy = start_proxy("--llama-api", fast_fake.url, "--chat-prompt-model", "chatml", "--threads", "64")
    expected = "".join(fast_fake.tokens)
    started = time.perf_counter()
    with ThreadPoolExecutor(256) as pool:
        results = list(pool.map(lambda _: stream_chat(proxy.url, {**HELLO, "max_tokens": 16}), range(256)))
    elapsed = time.perf_counter() - started
    assert all(r["done"] and not r["errors"] and r["text"] == expected for r in results)
    ttfts = sorted(r["ttft"] for r in results)
    load_report(
        f"256 streams via fast fake: all whole in {elapsed:.1f} s, TTFT p50 {ttfts[128] * 1000:.0f} ms, "
        f"p95 {ttfts[243] * 1000:.0f} ms, proxy peak RSS {peak_memory_mb(proxy.process.pid):.0f} MB"
    )
