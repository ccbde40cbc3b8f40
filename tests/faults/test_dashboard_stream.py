"""The dashboard's event stream against the proxy started through its CLI (a fake llama.cpp behind it):
SIGTERM ends an open stream at once instead of waiting out the grace period, the history is saved as
the worker exits, and the restarted proxy's charts and errors still hold what happened before."""

from __future__ import annotations

import json
import signal
import threading

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@pytest.fixture
def fake():
    upstream = FakeLlamaCpp().start()
    yield upstream
    upstream.stop()


def events(url: str, count: int) -> list[tuple[str, dict]]:
    """The first `count` events of the dashboard's stream."""
    found = []
    with requests.get(url + "/v1/internal/events", stream=True, timeout=30) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        event = None
        for line in response.iter_lines():
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: "):
                found.append((event, json.loads(line[6:])))
                if len(found) == count:
                    return found
    return found


def test_sigterm_ends_open_dashboard_streams_and_the_history_survives_a_restart(fake, start_proxy, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  smol:\n    upstreams: [{fake.url}]\n    chat_prompt_model: chatml\n")
    flags = ("--config", str(config), "--store", f"sqlite:///{tmp_path}/store.sqlite3", "--grace-period", "120")
    proxy = start_proxy(*flags)
    assert requests.post(proxy.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    assert requests.post(proxy.url + "/v1/chat/completions", json={**CHAT, "model": "nope"}, timeout=30).status_code == 404
    ended = threading.Event()

    def watch():
        try:
            with requests.get(proxy.url + "/v1/internal/events", stream=True, timeout=60) as response:
                for _ in response.iter_lines():
                    pass
        except requests.RequestException:
            pass  # the connection closed as the worker exited: the stream ended all the same
        finally:
            ended.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert events(proxy.url, 1)[0][0] == "hello"  # a second stream: the first is open by now
    proxy.process.send_signal(signal.SIGTERM)
    assert ended.wait(30), "the open stream held the shutdown"
    assert proxy.process.wait(timeout=30) == 0  # long before the 120 s grace period

    restarted = start_proxy(*flags)
    history = dict(events(restarted.url, 3))["history"]
    assert history["minute"]["requests"][-1] + history["minute"]["requests"][-2] >= 2
    assert history["hour"]["requests"][-1] + history["hour"]["requests"][-2] >= 2
    assert [(error["status"], error["code"]) for error in history["errors"]] == [(404, "model_not_found")]
