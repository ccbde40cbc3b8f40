"""Keys, CORS, limits, the access log and /metrics, through the app as the CLI builds it."""

from __future__ import annotations

import logging
import socket

import pytest

from api_like_oai.arguments import build_parser, settings_from_args

from .conftest import make_app

KEYS = ("--api-key", "key-one", "--api-key", "key-two")
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def keyed_client():
    return make_app("--chat-prompt-model", "chatml", *KEYS, "--cors-origins", "https://editor.example").test_client()


@pytest.mark.parametrize(
    "headers", [{"Authorization": "Bearer key-one"}, {"Authorization": "bearer key-two"}, {"x-api-key": "key-two"}]
)
def test_any_configured_key_in_either_header_is_accepted(keyed_client, headers):
    assert keyed_client.get("/v1/models", headers=headers).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer key-three"},
        {"Authorization": "key-one"},
        {"x-api-key": "key-on"},
        {"Authorization": "Bearer "},
    ],
)
def test_missing_or_wrong_key_is_401_in_openai_shape(keyed_client, headers):
    response = keyed_client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == 401
    assert response.get_json()["error"]["type"] == "authentication_error"
    assert set(response.get_json()["error"]) == {"message", "type", "param", "code"}


def test_health_docs_and_openapi_stay_public(keyed_client):
    assert keyed_client.get("/health").status_code == 503  # public; 503 only because nothing runs upstream
    assert keyed_client.get("/openapi.json").status_code == 200
    assert keyed_client.get("/metrics").status_code == 401


def test_keys_from_a_file_and_the_environment(tmp_path, monkeypatch):
    key_file = tmp_path / "keys"
    key_file.write_text("file-key\n\n  other-file-key \n")
    monkeypatch.setenv("API_LIKE_OAI_API_KEY", "env-key,env-key-2")
    settings = settings_from_args(build_parser().parse_args(["--api-key-file", str(key_file)]))
    assert settings.api_keys == ("env-key", "env-key-2", "file-key", "other-file-key")


def test_cors_preflight_is_answered_before_the_key_check(keyed_client):
    response = keyed_client.options(
        "/v1/chat/completions",
        headers={
            "Origin": "https://editor.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == "https://editor.example"
    assert "authorization" in response.headers["Access-Control-Allow-Headers"]


def test_cors_never_reflects_an_arbitrary_origin(keyed_client):
    response = keyed_client.get("/v1/models", headers={"Origin": "https://evil.example", "Authorization": "Bearer key-one"})
    assert "Access-Control-Allow-Origin" not in response.headers


def test_no_cross_origin_access_by_default():
    response = (
        make_app("--chat-prompt-model", "chatml").test_client().get("/v1/models", headers={"Origin": "https://editor.example"})
    )
    assert "Access-Control-Allow-Origin" not in response.headers


@pytest.mark.parametrize(
    "host, served",
    [
        ("localhost:8081", True),
        ("app.localhost", True),
        ("127.0.0.1:8081", True),
        ("[::1]:8081", True),
        ("192.168.1.5", True),  # an address is never a name a page's DNS controls
        ("rebound.example:8081", False),
        ("Rebound.Example", False),
        ("box.lan:8081", True),  # named by --allowed-hosts (any case)
    ],
)
def test_a_keyless_proxy_on_loopback_answers_only_names_no_page_can_point_at_it(host, served):
    client = make_app("--chat-prompt-model", "chatml", "--allowed-hosts", "Box.lan").test_client()
    answer = client.get("/v1/models", headers={"Host": host})
    assert answer.status_code == (200 if served else 403)


def test_the_machines_own_name_is_served():
    client = make_app("--chat-prompt-model", "chatml").test_client()
    assert client.get("/v1/models", headers={"Host": f"{socket.gethostname()}:8081"}).status_code == 200


def test_a_proxy_with_keys_or_allowing_any_name_answers_any_host():
    keyed = make_app("--chat-prompt-model", "chatml", "--api-key", "key-one").test_client()
    assert keyed.get("/v1/models", headers={"Host": "rebound.example", "Authorization": "Bearer key-one"}).status_code == 200
    any_name = make_app("--chat-prompt-model", "chatml", "--allowed-hosts", "*").test_client()
    assert any_name.get("/v1/models", headers={"Host": "rebound.example"}).status_code == 200


def test_cors_star_when_asked():
    client = make_app("--chat-prompt-model", "chatml", "--cors-origins", "*").test_client()
    assert client.get("/v1/models", headers={"Origin": "https://a.example"}).headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize(
    "args, body, param",
    [
        (("--max-messages", "2"), {"messages": [{"role": "user", "content": "x"}] * 3}, "messages"),
        (("--max-n", "4"), {**CHAT, "n": 5}, "n"),
        (("--max-tokens-limit", "100"), {**CHAT, "max_tokens": 101}, "max_tokens"),
        (("--max-tokens-limit", "100"), {**CHAT, "max_completion_tokens": 101}, "max_tokens"),
    ],
)
def test_limits_refuse_with_a_400(args, body, param):
    response = make_app("--chat-prompt-model", "chatml", *args).test_client().post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"]["param"] == param


def test_body_over_the_limit_is_413():
    client = make_app("--chat-prompt-model", "chatml", "--max-body-bytes", "1000").test_client()
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2000}]})
    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "request_too_large"


def test_access_log_line_without_prompt_or_key(keyed_client, caplog):
    caplog.set_level(logging.INFO)
    keyed_client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "secret prompt"}]},
        headers={"Authorization": "Bearer key-one"},
    )
    access = [r.getMessage() for r in caplog.records if r.name == "api_like_oai.access"]
    assert len(access) == 1
    assert "status=503" in access[0] and "endpoint=/v1/chat/completions" in access[0] and "request_id=" in access[0]
    everything = "\n".join(r.getMessage() for r in caplog.records)
    assert "secret prompt" not in everything and "key-one" not in everything


def test_a_refused_key_is_in_the_access_log_without_the_key(keyed_client, caplog):
    caplog.set_level(logging.INFO)
    keyed_client.post("/v1/messages", json={"messages": []}, headers={"x-api-key": "wrong-key"})
    access = [r.getMessage() for r in caplog.records if r.name == "api_like_oai.access"]
    assert len(access) == 1 and "status=401" in access[0] and "endpoint=/v1/messages" in access[0]
    assert "wrong-key" not in "\n".join(r.getMessage() for r in caplog.records)
    metrics = keyed_client.get("/metrics", headers={"x-api-key": "key-one"}).get_data(as_text=True)
    assert 'endpoint="/v1/messages"' in metrics and 'status="401"' in metrics


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_claude_codes_connectivity_probe_is_answered_without_a_key_and_not_logged(keyed_client, caplog, method):
    caplog.set_level(logging.INFO)
    response = keyed_client.open("/api/hello", method=method)
    assert response.status_code == 200
    assert not [r for r in caplog.records if r.name == "api_like_oai.access"]


def test_json_access_log_and_prompt_logging_on_request(caplog):
    import json

    from ..fake_llamacpp import FakeLlamaCpp

    fake = FakeLlamaCpp().start()
    try:
        caplog.set_level(logging.INFO)
        client = make_app(
            "--llama-api", fake.url, "--chat-prompt-model", "chatml", "--log-format", "json", "--log-prompts"
        ).test_client()
        client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "visible prompt"}]})
    finally:
        fake.stop()
    access = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api_like_oai.access"]
    assert access[0]["status"] == 200 and access[0]["model"] == "llama.cpp"
    assert access[0]["upstream"] == fake.url and access[0]["completion_tokens"] == len(fake.tokens)
    assert access[0]["ttft_ms"] is not None
    assert any("visible prompt" in r.getMessage() for r in caplog.records)


def test_metrics_count_requests_by_endpoint_model_and_status():
    client = make_app("--chat-prompt-model", "chatml").test_client()
    client.post("/v1/chat/completions", json=CHAT)
    client.post("/v1/chat/completions", json={"messages": "bad"})
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'api_like_oai_requests_total{endpoint="/v1/chat/completions",model="llama.cpp",status="503"} 1.0' in metrics
    assert 'api_like_oai_requests_total{endpoint="/v1/chat/completions",model="-",status="400"} 1.0' in metrics
    assert 'api_like_oai_upstream_errors_total{code="upstream_unavailable"' in metrics
    assert "\napi_like_oai_requests_in_flight 0.0\n" in metrics  # both answered: each record opened and closed once
    for name in (
        "api_like_oai_time_to_first_token_seconds",
        "api_like_oai_request_duration_seconds",
        "api_like_oai_tokens_total",
        "api_like_oai_streams_in_flight",
    ):
        assert name in metrics
