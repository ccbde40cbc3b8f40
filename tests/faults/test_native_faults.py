"""llama.cpp's native API through the proxy when upstreams fail: failover, faults mid-stream, statuses."""

from __future__ import annotations

import json
import time

import pytest
import requests

from ..servers import free_port

STREAMED = {"prompt": "Hi", "n_predict": 8, "stream": True}


@pytest.fixture(scope="module")
def fakes(start_fake):
    return [start_fake(), start_fake()]


@pytest.fixture(autouse=True)
def reset(fakes):
    for fake in fakes:
        fake.behaviour, fake.hang_seconds = "ok", 3.0
        fake.requests.clear()


@pytest.fixture(scope="module")
def proxy(fakes, start_proxy, tmp_path_factory):
    dead, also_dead = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    config = tmp_path_factory.mktemp("native-faults") / "config.yaml"
    config.write_text(f"""
read_timeout: 1
models:
  single:
    upstreams: [{fakes[0].url}]
  failover-post:
    upstreams: [{dead}, {fakes[0].url}]
  failover-get:
    upstreams: [{dead}, {fakes[0].url}]
  loading-first:
    upstreams: [{fakes[1].url}, {fakes[0].url}]
  all-down:
    upstreams: [{dead}, {also_dead}]
""")
    return start_proxy("--config", str(config))


def complete(proxy, model: str, body=STREAMED, **options) -> requests.Response:
    return requests.post(proxy.url + "/completion", json={**body, "model": model}, timeout=30, **options)


def events_of(response: requests.Response) -> list[dict]:
    return [json.loads(event[6:]) for event in response.text.split("\n\n") if event.startswith("data: ")]


def test_a_refused_connection_fails_over_to_the_next_upstream(proxy, fakes):
    response = complete(proxy, "failover-post")
    assert response.status_code == 200
    assert "".join(event["content"] for event in events_of(response)) == " Hello, world!"
    assert len(fakes[0].requests) == 1
    props = requests.get(proxy.url + "/props", params={"model": "failover-get"}, timeout=30)
    assert props.status_code == 200 and props.json()["default_generation_settings"]["n_ctx"] == 2048


def test_a_loading_upstream_is_skipped_unless_it_is_the_last(proxy, fakes):
    fakes[1].behaviour = "loading"
    assert complete(proxy, "loading-first").status_code == 200
    assert len(fakes[0].requests) == 1
    fakes[0].behaviour = "loading"
    alone = complete(proxy, "single")
    assert alone.status_code == 503  # llama.cpp's own answer, as it sent it
    assert alone.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def test_no_upstream_left_is_503_in_openai_shape_with_retry_after(proxy):
    response = complete(proxy, "all-down")
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "upstream_unavailable"


def test_an_upstream_status_and_body_are_passed_through(proxy, fakes):
    fakes[0].behaviour = "status_500"
    response = complete(proxy, "single")
    assert response.status_code == 500
    assert response.headers["Content-Type"] == "text/html" and response.text == "<html>Internal Server Error</html>"


def test_an_upstream_dying_mid_stream_ends_it_with_an_error_event(proxy, fakes):
    fakes[0].behaviour = "die_mid_stream"
    response = complete(proxy, "single")
    assert response.status_code == 200  # the stream had begun: the error comes as an event
    events = events_of(response)
    assert [event.get("content") for event in events[:2]] == [" Hello", ","]
    assert events[-1]["error"]["code"] == "upstream_unavailable" and len(events) == 3
    time.sleep(0.2)  # the access line is written when the response is closed
    assert "endpoint=/completion model=single" in proxy.log() and "status=503" in proxy.log()


def test_an_upstream_stalling_mid_stream_times_out_with_an_error_event(proxy, fakes):
    fakes[0].behaviour = "hang_mid_stream"
    assert events_of(complete(proxy, "single"))[-1]["error"]["code"] == "upstream_timeout"


def test_native_events_are_relayed_as_they_arrive(proxy, fakes):
    fakes[0].behaviour, fakes[0].token_interval = "slow_tokens", 0.3
    arrivals = []
    with complete(proxy, "single", stream=True) as response:
        for line in response.iter_lines(chunk_size=None):
            if line.startswith(b"data: ") and b'"stop": false' in line:
                arrivals.append(time.monotonic())
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]
    assert len(arrivals) == len(fakes[0].tokens)
    assert all(gap > 0.2 for gap in gaps), gaps
