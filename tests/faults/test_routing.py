"""Routing through the app over two fake upstreams: each API's session keys, a conversation following
its prefix, a dead upstream's session moving, and what the access log and /metrics say of it."""

from __future__ import annotations

import json
import logging

import pytest

from api_like_oai import create_app
from api_like_oai.arguments import parse_settings
from api_like_oai.backends.routing import rendezvous

from .test_anthropic_stream import usage

SYSTEM = "You are a careful assistant. " * 40  # about 1,100 bytes: several routing blocks


def app_over(fakes, tmp_path, routing: str = "prefix"):
    config = tmp_path / "config.yaml"
    config.write_text(f"""models:
  pooled:
    upstreams: [{fakes[0].url}, {fakes[1].url}]
    chat_prompt_model: chatml
    routing: {routing}
""")
    return create_app(parse_settings(["--config", str(config)])).test_client()


def key_ranking_first(url: str, urls: list[str], stem: str) -> str:
    """A session key that rendezvous hashing puts on `url` (the second upstream: least-busy would not)."""
    return next(key for key in (f"{stem}-{n}" for n in range(1000)) if rendezvous(key, urls)[0] == url)


def served_by(fakes) -> list[int]:
    return [len([r for r in fake.requests if "prompt" in r or "input_prefix" in r]) for fake in fakes]


CHAT = {"model": "pooled", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
ANTHROPIC = {"model": "pooled", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
RESPONSES = {"model": "pooled", "input": "Hi"}
COMPLETION = {"model": "pooled", "prompt": "Hi", "max_tokens": 4}


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/v1/chat/completions", CHAT, "prompt_cache_key"),
        ("/v1/chat/completions", CHAT, "user"),
        ("/v1/chat/completions", CHAT, "safety_identifier"),
        ("/v1/chat/completions", CHAT, "header"),
        ("/v1/messages", ANTHROPIC, "metadata.user_id"),
        ("/v1/messages", ANTHROPIC, "header"),
        ("/v1/responses", RESPONSES, "prompt_cache_key"),
        ("/v1/responses", RESPONSES, "user"),
        ("/v1/completions", COMPLETION, "user"),
    ],
)
def test_each_api_s_session_key_places_a_new_conversation(fakes, tmp_path, path, body, where):
    client = app_over(fakes, tmp_path)
    key = key_ranking_first(fakes[1].url, [f.url for f in fakes], where)
    headers = {"X-Claude-Code-Session-Id": key} if where == "header" else {}
    sent = body | ({"metadata": {"user_id": key}} if where == "metadata.user_id" else {where: key} if where != "header" else {})
    for _ in range(2):
        assert client.post(path, json=sent, headers=headers).status_code == 200
    assert served_by(fakes) == [0, 2]


def conversation(turns: int) -> dict:
    messages = [{"role": "system", "content": SYSTEM}]
    for n in range(turns):
        messages += [{"role": "user", "content": f"Question {n}?"}, {"role": "assistant", "content": f"Answer {n}."}]
    return CHAT | {"messages": [*messages, {"role": "user", "content": "And now?"}]}


def test_the_next_turn_follows_the_prompt_prefix_without_a_key(fakes, tmp_path):
    client = app_over(fakes, tmp_path)
    key = key_ranking_first(fakes[1].url, [f.url for f in fakes], "first-turn")
    client.post("/v1/chat/completions", json=conversation(1) | {"user": key})  # placed on the second
    for turns in (2, 3):
        assert client.post("/v1/chat/completions", json=conversation(turns)).status_code == 200
    assert served_by(fakes) == [0, 3]


def test_the_choices_of_one_request_share_the_upstream_that_read_the_prompt(fakes, tmp_path):
    """The prompt is learned as soon as the first choice's upstream answers, so the next choice follows."""
    client = app_over(fakes, tmp_path)
    assert client.post("/v1/chat/completions", json=conversation(2) | {"n": 2}).status_code == 200
    assert sorted(served_by(fakes)) == [0, 2]


def test_least_busy_routing_moves_the_conversation(fakes, tmp_path):
    client = app_over(fakes, tmp_path, routing="least-busy")
    key = key_ranking_first(fakes[1].url, [f.url for f in fakes], "first-turn")
    for turns in (1, 2, 3):
        client.post("/v1/chat/completions", json=conversation(turns) | {"user": key})
    assert served_by(fakes) == [3, 0]


def test_a_dead_upstream_s_session_moves_and_nothing_is_refused(fakes, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    client = app_over(fakes, tmp_path)
    key = key_ranking_first(fakes[1].url, [f.url for f in fakes], "doomed")
    assert client.post("/v1/chat/completions", json=conversation(1) | {"user": key}).status_code == 200
    fakes[1].kill()
    for turns in (2, 3):
        assert client.post("/v1/chat/completions", json=conversation(turns) | {"user": key}).status_code == 200
    assert served_by(fakes) == [2, 1]
    access = [r.getMessage() for r in caplog.records if r.name == "api_like_oai.access"]
    # the choice failed and the next one answered; from then on the conversation's prefix is there
    assert [line.split(" route=")[1].split()[0] for line in access] == ["session", "failover", "prefix"]


def test_the_access_log_and_metrics_tell_the_route_and_the_cached_tokens(fakes, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    for fake in fakes:
        fake.cached_tokens = 2
    client = app_over(fakes, tmp_path)
    key = key_ranking_first(fakes[1].url, [f.url for f in fakes], "logged")
    client.post("/v1/chat/completions", json=conversation(1) | {"user": key})
    client.post("/v1/chat/completions", json=conversation(2))
    access = [r.getMessage() for r in caplog.records if r.name == "api_like_oai.access"]
    assert [line.split(" route=")[1].split()[0] for line in access] == ["session", "prefix"]
    assert all(" cached_tokens=2 " in line for line in access)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'api_like_oai_routing_total{model="pooled",reason="session",result="miss"} 1.0' in metrics
    assert 'api_like_oai_routing_total{model="pooled",reason="prefix",result="hit"} 1.0' in metrics
    assert 'api_like_oai_cached_prompt_tokens_total{model="pooled"} 4.0' in metrics


def test_anthropic_s_message_start_already_knows_the_cache_hit(fakes, tmp_path):
    for fake in fakes:
        fake.cached_tokens = 2
    client = app_over(fakes, tmp_path)
    answer = client.post("/v1/messages", json=ANTHROPIC | {"stream": True}).get_data()
    start = json.loads(answer.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    assert start["message"]["usage"] == usage(0, input_tokens=3, cached_tokens=2)
