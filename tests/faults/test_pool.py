"""Several upstreams behind one model: least in flight, skip and retry, 503 + Retry-After when none is left."""

from __future__ import annotations

import pytest

from api_like_oai.backends.events import Accepted, GenerationEvent
from api_like_oai.backends.llamacpp import LlamaCppClient
from api_like_oai.backends.pool import UpstreamPool
from api_like_oai.backends.routing import RoutingPolicy
from api_like_oai.backends.upstream import UpstreamRequest
from api_like_oai.errors import UpstreamUnavailable

from ..servers import free_port

PAYLOAD = {"prompt": "hi", "stream": True, "n_predict": 4}
REQUEST = UpstreamRequest.of("/completion", PAYLOAD)


def text_of(events) -> str:
    """The answer's text (the events before it, Accepted and the waits, carry none)."""
    return "".join(event.text for event in events if isinstance(event, GenerationEvent))


def test_requests_go_to_the_upstream_with_fewest_in_flight(fakes):
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    held = pool.generate(REQUEST)  # first upstream now has one in flight
    text_of(pool.generate(REQUEST))
    assert [len(f.requests) for f in fakes] == [1, 1]
    text_of(held)
    assert pool.in_flight == {fakes[0].url: 0, fakes[1].url: 0}


def test_a_refused_connection_is_retried_on_the_next_upstream(fakes):
    dead = LlamaCppClient(f"http://127.0.0.1:{free_port()}")
    pool = UpstreamPool([dead, LlamaCppClient(fakes[0].url)])
    chosen = []
    assert text_of(pool.generate(REQUEST, on_chosen=chosen.append)) == " Hello, world!"
    assert chosen == [dead.base_url, fakes[0].url]
    assert pool.healthy[dead.base_url] is False
    assert pool.candidates()[0].base_url == fakes[0].url  # the down one is tried last from now on


def test_a_server_lost_while_reading_the_prompt_is_left_for_the_next(fakes):
    progress = (
        {"total": 3, "cached": 0, "processed": 1, "time_ms": 1.0},
        {"total": 3, "cached": 0, "processed": 3, "time_ms": 2.0},
    )
    for fake in fakes:
        fake.prompt_progress = progress
    fakes[0].behaviour = "die_in_prefill"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes], routing=RoutingPolicy("least-busy"))
    events = list(pool.generate(UpstreamRequest.of("/completion", PAYLOAD | {"return_progress": True})))
    text = "".join(getattr(event, "text", "") or "" for event in events)
    assert text == " Hello, world!"  # all of it from the second server: the first gave out no answer
    assert [len(f.requests) for f in fakes] == [1, 1]
    assert pool.healthy[fakes[0].url] is False
    assert pool.in_flight == {fakes[0].url: 0, fakes[1].url: 0}


def test_a_server_lost_after_its_first_token_is_not_left_for_another(fakes):
    fakes[0].behaviour = "die_mid_stream"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes], routing=RoutingPolicy("least-busy"))
    with pytest.raises(UpstreamUnavailable):
        text_of(pool.generate(REQUEST))
    assert len(fakes[1].requests) == 0  # the answer had begun: moving it would repeat or garble it


def test_a_loading_upstream_is_skipped(fakes):
    fakes[0].behaviour = "loading"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    assert text_of(pool.generate(REQUEST)) == " Hello, world!"
    assert pool.check() == {fakes[0].url: f"llama.cpp at {fakes[0].url}: Loading model", fakes[1].url: "ok"}


def test_none_left_is_503_with_retry_after(fakes):
    for fake in fakes:
        fake.behaviour = "loading"
    pool = UpstreamPool([LlamaCppClient(f.url) for f in fakes])
    with pytest.raises(UpstreamUnavailable) as caught:
        pool.generate(REQUEST)
    assert caught.value.headers == {"Retry-After": "5"}
    assert "Loading model" in caught.value.message


def pool_app(tmp_path, fakes):
    from api_like_oai import create_app
    from api_like_oai.arguments import parse_settings

    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  m:\n    upstreams: [{fakes[0].url}, {fakes[1].url}]\n    chat_prompt_model: chatml\n")
    return create_app(parse_settings(["--config", str(config)]))


def test_a_pool_whose_servers_serve_different_models_is_unhealthy_naming_the_odd_one(tmp_path, fakes, caplog):
    fakes[0].props_extra = {"model_path": "/models/qwen2.5-7b.gguf"}
    fakes[1].props_extra = {"model_path": "/srv/llama-3.1-8b.gguf"}
    health = pool_app(tmp_path, fakes).test_client().get("/health")
    assert health.status_code == 503
    assert "llama-3.1-8b.gguf" in health.get_json()["upstreams"][fakes[1].url]
    assert health.get_json()["upstreams"][fakes[0].url] == "ok"
    assert any(fakes[1].url in record.getMessage() for record in caplog.records if record.levelname == "WARNING")


def test_a_pool_serving_one_model_from_different_directories_is_healthy(tmp_path, fakes):
    fakes[0].props_extra = {"model_path": "/models/qwen2.5-7b.gguf"}
    fakes[1].props_extra = {"model_path": "/srv/qwen2.5-7b.gguf"}
    assert pool_app(tmp_path, fakes).test_client().get("/health").status_code == 200
    assert [f.get_paths.count("/props") for f in fakes] == [1, 1]  # asked once per server


@pytest.mark.parametrize("dead_first", [True, False], ids=["dead-first", "dead-last"])
def test_every_call_of_a_request_fails_over_from_a_dead_upstream(tmp_path, fakes, dead_first):
    """Not only the generation: /props (the template), /tokenize (the count) and the native API too."""
    from api_like_oai import create_app
    from api_like_oai.arguments import parse_settings

    dead = f"http://127.0.0.1:{free_port()}"
    upstreams = [dead, fakes[0].url] if dead_first else [fakes[0].url, dead]
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  m:\n    upstreams: [{', '.join(upstreams)}]\n    chat_prompt_model: chatml\n")
    client = create_app(parse_settings(["--config", str(config)])).test_client()
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
        assert client.post("/v1/internal/encode", json={"model": "m", "text": "a b c"}).get_json()["tokens"] == [0, 1, 2]
        assert client.post("/v1/messages/count_tokens", json=chat).status_code == 200
        assert client.get("/props", query_string={"model": "m"}).status_code == 200
    if dead_first:  # tried first, then marked down (last, it may never be tried: nothing needs it)
        assert client.get("/v1/internal/model/info", query_string={"model": "m"}).get_json()["upstreams"] == [
            {"url": url, "healthy": url != dead} for url in upstreams
        ]


def test_a_started_model_whose_replicas_all_fail_to_start_renews_its_lease_and_is_sent_again(fakes):
    """`renew` (a request for a model the proxy starts, given by its door): when no replica starts the
    generation, the lease is renewed naming them (the supervisor restarts a crashed model), and the
    generation goes to the replicas given back; a request given no renewal fails as before."""
    crashed = fakes[0]
    crashed.behaviour = "loading"  # answers 503 before any byte, as an unreachable one fails
    pool = UpstreamPool([LlamaCppClient(crashed.url)])
    asked, restarts = [], ["ok", "loading"]  # restarted; then failing again

    def renew(unreachable: list[str]):
        asked.append(unreachable)
        crashed.behaviour = restarts.pop(0)
        return lambda timeout: [crashed.url]

    assert text_of(pool.generate(REQUEST, renew=renew)) == " Hello, world!"
    assert asked == [[crashed.url]] and pool.healthy[crashed.url]
    other = UpstreamPool([LlamaCppClient(f"http://127.0.0.1:{free_port()}")])
    with pytest.raises(UpstreamUnavailable):
        text_of(other.generate(REQUEST))
    crashed.behaviour = "loading"  # renewed once a request: one failing again is the 503 it was
    with pytest.raises(UpstreamUnavailable):
        text_of(pool.generate(UpstreamRequest.of("/completion", {**PAYLOAD, "again": True}), renew=renew))
    assert len(asked) == 2


def test_a_generation_waiting_for_its_restart_says_so_until_it_is_ready(fakes):
    """While the supervisor restarts a crashed model (the renewal's wait times out), the generation's
    first events are UpstreamWait (a stream's keep-alives), then the answer, its prompt sent as it was;
    a refusal while waiting is the generation's error."""
    from api_like_oai.backends.events import UpstreamWait

    crashed = fakes[0]
    crashed.behaviour = "loading"
    pool = UpstreamPool([LlamaCppClient(crashed.url)])
    answers = [None, None, [crashed.url]]
    timeouts = []

    def wait(timeout):
        timeouts.append(timeout)
        if answers[0] is not None:
            crashed.behaviour = "ok"
        return answers.pop(0)

    routes = []
    events = list(pool.generate(REQUEST, renew=lambda unreachable: wait, on_routed=routes.append))
    assert [type(event) for event in events[:2]] == [UpstreamWait, UpstreamWait]
    assert type(events[2]) is Accepted and text_of(events[3:]) == " Hello, world!"
    assert timeouts == [0, 5.0, 5.0]  # a keep-alive at once, then one per interval
    assert [(route.order, route.reason) for route in routes] == [((crashed.url,), "restart")]  # the log's and /metrics' reason
    crashed.behaviour = "loading"

    def refused(timeout):
        raise UpstreamUnavailable("model m failed to start")

    with pytest.raises(UpstreamUnavailable, match="failed to start"):
        list(pool.generate(REQUEST, renew=lambda unreachable: refused))
    assert pool.in_flight[crashed.url] == 0
