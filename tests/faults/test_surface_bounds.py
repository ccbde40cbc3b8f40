"""What a caller sends is bounded before any work (issue 48): a web page of a foreign origin is refused
whatever its content type, a chunked body past the limit is a 413 (it was cut and read as broken JSON),
and llama.cpp's native fields whose cost grows without bound are capped, against a scripted upstream."""

from __future__ import annotations

import json

import pytest
import requests

PROXY_FLAGS = ("--max-body-bytes", "4096", "--cors-origins", "http://allowed.example")
CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'


def chunked(body: bytes, pieces: int = 8):
    """The body sent with Transfer-Encoding: chunked (requests does so for a generator), in `pieces`."""
    step = max(1, len(body) // pieces)
    return (body[start : start + step] for start in range(0, len(body), step))


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/json", None])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/models/load", "/v1/messages", "/completion"])
def test_a_page_of_a_foreign_origin_is_refused_before_any_work(proxy, fake, path, content_type):
    sent_before = len(fake.requests)
    headers = {"Origin": "http://page.example"} | ({"Content-Type": content_type} if content_type else {})
    answer = requests.post(proxy.url + path, data=CHAT_BODY, headers=headers, timeout=30)
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert "page.example" in error["message"] and error["type"] in ("permission_error", "permission_denied_error")
    preflight = requests.options(
        proxy.url + path, headers={"Origin": "http://page.example", "Access-Control-Request-Method": "POST"}, timeout=10
    )
    assert preflight.status_code == 403 and "Access-Control-Allow-Origin" not in preflight.headers
    assert len(fake.requests) == sent_before


def test_an_allowed_origin_and_a_client_without_one_are_served(proxy):
    allowed = requests.post(
        proxy.url + "/v1/chat/completions",
        data=CHAT_BODY,
        headers={"Origin": "http://allowed.example", "Content-Type": "application/json"},
        timeout=30,
    )
    assert allowed.status_code == 200 and allowed.headers["Access-Control-Allow-Origin"] == "http://allowed.example"
    plain = requests.post(proxy.url + "/v1/chat/completions", data=CHAT_BODY, timeout=30)  # curl -d, no content type
    assert plain.status_code == 200, plain.text


@pytest.mark.parametrize(
    ("path", "error_of"),
    [
        ("/v1/chat/completions", lambda body: body["error"]["code"]),
        ("/completion", lambda body: body["error"]["code"]),
        ("/v1/messages", lambda body: body["error"]["type"]),
    ],
)
def test_a_chunked_body_past_the_limit_is_a_413_not_a_cut_body(proxy, path, error_of):
    big = CHAT_BODY.replace(b'"hi"', b'"' + b"a" * 5000 + b'"')
    answer = requests.post(proxy.url + path, data=chunked(big), headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 413 and error_of(answer.json()) == "request_too_large", answer.text


def test_a_chunked_body_within_the_limit_is_read_whole(proxy):
    answer = requests.post(
        proxy.url + "/v1/chat/completions", data=chunked(CHAT_BODY), headers={"Content-Type": "application/json"}, timeout=30
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"prompt": "hi", "n_probs": 100000000, "n_predict": 40}', "n_probs"),
        (b'{"prompt": "hi", "n_cmpl": 100000}', "n_cmpl"),
        (b'{"prompt": ' + b"[" * 1500 + b"]" * 1500 + b"}", None),
    ],
)
def test_a_native_request_that_would_cost_without_bound_is_a_400_and_never_sent(proxy, fake, body, param):
    sent_before = len(fake.requests)
    answer = requests.post(proxy.url + "/completion", data=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    assert len(fake.requests) == sent_before


ADMIN = "sk-admin-surface"


@pytest.fixture(scope="module")
def keyed(fake, start_proxy, tmp_path_factory):
    """The proxy over the same fake with managed keys: (proxy, the admin's headers, a tenant's headers)."""
    store = tmp_path_factory.mktemp("surface") / "store.db"
    proxy = start_proxy("--llama-api", fake.url, "--admin-key", ADMIN, "--store", f"sqlite:///{store}")
    admin = {"Authorization": f"Bearer {ADMIN}"}
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": "tenant"}, headers=admin, timeout=10)
    return proxy, admin, {"Authorization": f"Bearer {created.json()['key']}"}


@pytest.mark.parametrize(("behaviour", "stream"), [("die_mid_stream", False), ("die_in_prefill", True)])
def test_a_lost_upstream_is_named_to_the_operator_and_not_to_a_tenant(keyed, replay, behaviour, stream):
    proxy, admin, tenant = keyed
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream}
    messages = {}
    for who, headers in (("admin", admin), ("tenant", tenant)):
        replay.behaviour = behaviour
        answer = requests.post(proxy.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        if stream:  # the upstream had accepted it: the stream began, its loss is the stream's error event
            assert answer.status_code == 200, answer.text
            messages[who] = json.loads(answer.text.split("data: ")[-1])["error"]["message"]
        else:
            assert answer.status_code in (502, 503), answer.text
            messages[who] = answer.json()["error"]["message"]
    assert replay.url in messages["admin"]
    assert replay.url not in messages["tenant"] and "127.0.0.1" not in messages["tenant"] and "<address>" in messages["tenant"]


def test_a_stream_that_fails_after_it_began_names_the_upstream_only_to_the_operator(keyed, replay):
    proxy, admin, tenant = keyed
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    errors = {}
    for who, headers in (("admin", admin), ("tenant", tenant)):
        replay.behaviour = "die_mid_stream"
        answer = requests.post(proxy.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200  # the stream had begun: its error is its last event
        events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: {")]
        errors[who] = json.loads(events[-1])["error"]["message"]
    assert replay.url in errors["admin"]
    assert replay.url not in errors["tenant"] and "127.0.0.1" not in errors["tenant"] and "<address>" in errors["tenant"]
