"""The dashboard with --workers 2 against a real llama-server: its live list shows the streams of both
workers, and its stop action ends a stream the other worker serves (siblings.py carries both).

Streams are opened until each worker holds some (the kernel hands connections to either); the dashboard's
stream is one connection, so one worker; the stop actions all go over one kept-alive connection, so one
worker too: some of the streams they stop are necessarily the other worker's."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from ..faults.test_workers import client_connections, wait_for, workers_of
from ..servers import LlamaServer

# Room for the streams opened until the kernel has handed some to each worker: two at a time, usually
# 2-4 in all, but a loaded machine's busy worker can take eight in a row (seen once in a full run).
SLOTS = 16


@pytest.fixture(scope="module")
def enough_slots(provisioned):
    server = LlamaServer(provisioned["LLAMA_SERVER"], provisioned["MODEL"], slots=SLOTS, context_size=SLOTS * 2048).start()
    yield server
    server.stop()


class Stream(threading.Thread):
    """A long streamed chat read to its end in the background; its finish reasons."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.finish_reasons, self.error = url, [], None
        self.start()

    def run(self) -> None:
        body = {
            "model": "smollm",
            "stream": True,
            "max_tokens": 1900,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "Count to a thousand, one number a line."}],
        }
        with requests.post(self.url + "/v1/chat/completions", json=body, stream=True, timeout=300) as answer:
            for line in answer.iter_lines():
                if line.startswith(b"data: {"):
                    chunk = json.loads(line[6:])
                    self.finish_reasons += [c["finish_reason"] for c in chunk["choices"] if c.get("finish_reason")]


def live_frames(url: str):
    """The dashboard stream's `live` payloads, one a second, over one connection (one worker)."""
    with requests.get(url + "/v1/internal/events", stream=True, timeout=60) as answer:
        event = None
        for line in answer.iter_lines():
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: ") and event == "live":
                yield json.loads(line[6:])


def test_the_live_list_and_the_stop_action_reach_every_workers_streams(enough_slots, start_proxy):
    proxy = start_proxy(
        "--llama-api", enough_slots.url, "--model-name", "smollm", "--chat-prompt-model", "chatml", "--workers", "2"
    )
    streams: list[Stream] = []
    while not all(client_connections(pid, proxy.port) for pid in workers_of(proxy)):
        assert len(streams) < SLOTS, "the kernel never handed a stream to the second worker"
        streams += [Stream(proxy.url), Stream(proxy.url)]
        wait_for(lambda: sum(client_connections(pid, proxy.port) for pid in workers_of(proxy)) == len(streams))  # noqa: B023

    deadline = time.monotonic() + 120
    for live in live_frames(proxy.url):  # every stream listed, each generating, by a worker that serves some
        if len(live["requests"]) == len(streams) and all(row["phase"] == "generating" for row in live["requests"]):
            break
        assert time.monotonic() < deadline, f"the live list never showed all {len(streams)} streams: {live['requests']}"
    assert all(row["stoppable"] for row in live["requests"])
    upstream = live["upstreams"][0]
    assert upstream["slots_busy"] == len(streams) and upstream["generated_tps"] > 0

    with requests.Session() as one_worker:
        for row in live["requests"]:
            answer = one_worker.post(f"{proxy.url}/v1/internal/requests/{row['request_id']}/stop", timeout=30)
            assert answer.status_code == 200 and answer.json() == {"stopped": row["request_id"]}
        missing = one_worker.post(f"{proxy.url}/v1/internal/requests/no-such-request/stop", timeout=30)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for stream in streams:
        stream.join(120)
        assert not stream.is_alive() and stream.finish_reasons == ["stop"]
