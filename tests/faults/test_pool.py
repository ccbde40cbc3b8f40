"""Several upstreams behind one model: least in flight, skip and retry, 503 + Retry-After when none is left."""

from __future__ import annotations

import pytest

from api_like_oai.backends.llamacpp import LlamaCppClient
from api_like_oai.backends.pool import UpstreamPool
from api_like_oai.errors import UpstreamUnavailable

from ..servers import free_port

PAYLOAD = {"prompt": "hi", "stream": True, "n_predict": 4}


def text_of(events) -> str:
    return "".join(event.text for event in events)


def test_requests_go_to_the_upstream_with_fewest_in_flight(fakes):
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    held = pool.generate("/completion", PAYLOAD)  # first upstream now has one in flight
    text_of(pool.generate("/completion", PAYLOAD))
    assert [len(f.requests) for f in fakes] == [1, 1]
    text_of(held)
    assert pool.in_flight == {fakes[0].url: 0, fakes[1].url: 0}


def test_a_refused_connection_is_retried_on_the_next_upstream(fakes):
    dead = LlamaCppClient(f"http://127.0.0.1:{free_port()}")
    pool = UpstreamPool([dead, LlamaCppClient(fakes[0].url)])
    chosen = []
    assert text_of(pool.generate("/completion", PAYLOAD, on_chosen=chosen.append)) == " Hello, world!"
    assert chosen == [dead.base_url, fakes[0].url]
    assert pool.healthy[dead.base_url] is False
    assert pool.candidates()[0].base_url == fakes[0].url  # the down one is tried last from now on


def test_a_loading_upstream_is_skipped(fakes):
    fakes[0].behaviour = "loading"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    assert text_of(pool.generate("/completion", PAYLOAD)) == " Hello, world!"
    assert pool.check() == {fakes[0].url: f"llama.cpp at {fakes[0].url}: Loading model", fakes[1].url: "ok"}


def test_none_left_is_503_with_retry_after(fakes):
    for fake in fakes:
        fake.behaviour = "loading"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    with pytest.raises(UpstreamUnavailable) as caught:
        pool.generate("/completion", PAYLOAD)
    assert caught.value.headers == {"Retry-After": "5"}
    assert "Loading model" in caught.value.message
