"""Managed keys through the app as the CLI builds it (its upstreams down: every check here happens
before any upstream work): the admin routes, per-key models, limits' 429s and headers, revocation
seen by another instance on the same store, and usage readable per key."""

from __future__ import annotations

import time

import pytest

from api_like_oai import create_app
from api_like_oai.arguments import parse_settings
from api_like_oai.errors import StoreUnavailable
from api_like_oai.routes import state

from ..servers import free_port

ADMIN = {"Authorization": "Bearer admin-secret"}
PLAIN = {"Authorization": "Bearer plain-key"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MESSAGES = {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def make_client(tmp_path):
    """Clients of apps sharing one config and one SQLite store (several instances of one deployment)."""
    config = tmp_path / "config.yaml"
    down = f"http://127.0.0.1:{free_port()}"
    config.write_text(
        f"models:\n  smol:\n    upstreams: [{down}]\n    chat_prompt_model: chatml\n"
        f"    aliases: [smol-alias]\n  other:\n    upstreams: [{down}]\n    chat_prompt_model: chatml\n"
    )
    argv = [
        "--config",
        str(config),
        "--admin-key",
        "admin-secret",
        "--api-key",
        "plain-key",
        "--store",
        f"sqlite:///{tmp_path}/store.sqlite3",
    ]
    return lambda *flags: create_app(parse_settings([*argv, *flags])).test_client()


@pytest.fixture
def client(make_client):
    return make_client()


def new_key(client, **fields) -> dict:
    response = client.post("/v1/internal/keys", json={"name": "team", **fields}, headers=ADMIN)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def bearer(key: dict) -> dict:
    return {"Authorization": f"Bearer {key['key']}"}


@pytest.mark.parametrize("headers", [PLAIN, {"x-api-key": "plain-key"}])
def test_admin_routes_refuse_a_plain_key_with_a_403_in_openai_shape(client, headers):
    response = client.get("/v1/internal/keys", headers=headers)
    assert response.status_code == 403
    assert response.get_json()["error"] == {
        "message": "this route needs an admin key (--admin-key)",
        "type": "permission_error",
        "param": None,
        "code": "permission_denied",
    }
    assert client.get("/v1/internal/keys").status_code == 401


def test_admin_routes_refuse_a_managed_key_too(client):
    key = new_key(client)
    assert client.post("/v1/internal/keys", json={"name": "mine"}, headers=bearer(key)).status_code == 403


def test_an_admin_makes_lists_updates_and_revokes_keys_over_http(client):
    key = new_key(client, models=["smol"], rpm=5, expires="30d")
    assert key["key"].startswith("sk-alo-") and "digest" not in key and key["models"] == ["smol"]
    listed = client.get("/v1/internal/keys", headers=ADMIN).get_json()["data"]
    assert [(k["name"], k["rpm"]) for k in listed] == [("team", 5)] and "key" not in listed[0]
    updated = client.patch("/v1/internal/keys/team", json={"rpm": 0, "tpm": 100}, headers=ADMIN).get_json()
    assert (updated["rpm"], updated["tpm"], updated["models"]) == (None, 100, ["smol"])
    assert client.delete("/v1/internal/keys/team", headers=ADMIN).get_json()["revoked"] is True
    assert client.get("/v1/models", headers=bearer(key)).status_code == 401


def test_bad_key_requests_get_400_404_and_409(client):
    new_key(client)
    taken = client.post("/v1/internal/keys", json={"name": "team"}, headers=ADMIN)
    assert taken.status_code == 409 and taken.get_json()["error"]["code"] == "name_taken"
    assert client.post("/v1/internal/keys", json={"name": "x", "rpm": -2}, headers=ADMIN).status_code == 400
    assert client.post("/v1/internal/keys", json={"name": "x", "owner": 1}, headers=ADMIN).status_code == 400
    assert client.delete("/v1/internal/keys/nobody", headers=ADMIN).status_code == 404


def test_a_revoked_key_is_refused_at_once_by_another_instance(make_client):
    first, second = make_client(), make_client()
    key = new_key(first)
    assert second.get("/v1/models", headers=bearer(key)).status_code == 200
    first.delete("/v1/internal/keys/team", headers=ADMIN)
    refused = second.get("/v1/models", headers=bearer(key))
    assert refused.status_code == 401 and "revoked" in refused.get_json()["error"]["message"]


def test_the_model_list_shows_only_the_keys_models(client):
    key = new_key(client, models=["smol"])
    names = [card["id"] for card in client.get("/v1/models", headers=bearer(key)).get_json()["data"]]
    assert names == ["smol", "smol-alias"]
    assert client.get("/v1/models/other", headers=bearer(key)).status_code == 404
    everything = client.get("/v1/models", headers=PLAIN).get_json()["data"]
    assert [card["id"] for card in everything] == ["smol", "smol-alias", "other"]


def test_a_model_outside_the_key_is_a_404_as_if_it_did_not_exist(client):
    key = new_key(client, models=["smol"])
    response = client.post("/v1/chat/completions", json={**CHAT, "model": "other"}, headers=bearer(key))
    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "model_not_found"
    assert "'other' does not exist; known models: smol, smol-alias" in response.get_json()["error"]["message"]
    anthropic = client.post("/v1/messages", json={**MESSAGES, "model": "other"}, headers={"x-api-key": key["key"]})
    assert anthropic.status_code == 404
    assert anthropic.get_json()["type"] == "error" and anthropic.get_json()["error"]["type"] == "not_found_error"
    allowed = client.post("/v1/chat/completions", json={**CHAT, "model": "smol-alias"}, headers=bearer(key))
    assert allowed.status_code == 503  # admitted; only then the (down) upstream is tried


def test_over_the_requests_per_minute_a_429_says_which_limit_and_when(client):
    key = new_key(client, rpm=1)
    first = client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))
    assert first.headers["x-ratelimit-limit-requests"] == "1" and first.headers["x-ratelimit-remaining-requests"] == "0"
    refused = client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))
    assert refused.status_code == 429 and 55 <= int(refused.headers["Retry-After"]) <= 60
    error = refused.get_json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "requests per minute (rpm) limit 1" in error["message"]
    anthropic = client.post("/v1/messages", json={**MESSAGES, "model": "smol"}, headers=bearer(key))
    assert anthropic.status_code == 429 and anthropic.get_json()["error"]["type"] == "rate_limit_error"
    assert anthropic.headers["anthropic-ratelimit-requests-limit"] == "1" and "Retry-After" in anthropic.headers
    assert "x-ratelimit-limit-requests" not in anthropic.headers


def test_a_max_tokens_beyond_what_is_left_is_refused_before_generation(client):
    key = new_key(client, tpm=100)
    refused = client.post("/v1/chat/completions", json={**CHAT, "model": "smol", "max_tokens": 100}, headers=bearer(key))
    assert refused.status_code == 503  # 100 fits a fresh minute: admitted, then the upstream is down
    assert refused.headers["x-ratelimit-remaining-tokens"] == "100"


def test_usage_is_read_by_an_admin_for_all_and_by_a_key_for_itself(client):
    key = new_key(client)
    other = client.post("/v1/internal/keys", json={"name": "ops"}, headers=ADMIN).get_json()
    client.get("/v1/models", headers=bearer(key))  # no model asked for: not usage
    client.post("/v1/chat/completions", json={**CHAT, "model": "other"}, headers=bearer(other))
    for model in ("smol", "smol", "other"):
        client.post("/v1/chat/completions", json={**CHAT, "model": model}, headers=bearer(key))
    mine = client.get("/v1/internal/usage?by=key,model", headers=bearer(key)).get_json()["data"]
    assert [(row["key"], row["model"], row["requests"], row["errors"]) for row in mine] == [
        ("team", "other", 1, 1),
        ("team", "smol", 2, 2),
    ]  # the upstream is down: each an error
    everyone = client.get("/v1/internal/usage?by=key", headers=ADMIN).get_json()["data"]
    assert [(row["key"], row["requests"]) for row in everyone] == [("ops", 1), ("team", 3)]
    assert client.get("/v1/internal/usage", headers=PLAIN).status_code == 403
    assert client.get("/v1/internal/usage?by=colour", headers=ADMIN).status_code == 400


def test_usage_reads_in_openais_usage_api_shape(client):
    key = new_key(client)
    for model in ("smol", "smol", "other"):
        client.post("/v1/chat/completions", json={**CHAT, "model": model}, headers=bearer(key))
    today = int(time.time()) // 86400 * 86400
    page = client.get(
        f"/v1/organization/usage/completions?start_time={today - 86400}&group_by=model", headers=bearer(key)
    ).get_json()
    assert page["object"] == "page" and [bucket["start_time"] for bucket in page["data"]] == [today - 86400, today]
    assert page["data"][0]["results"] == []
    results = page["data"][1]["results"]
    assert [(r["model"], r["num_model_requests"], r["api_key_id"]) for r in results] == [("other", 1, None), ("smol", 2, None)]
    assert results[0]["object"] == "organization.usage.completions.result"
    by_key = client.get(f"/v1/organization/usage/completions?start_time={today}&group_by=api_key_id", headers=ADMIN).get_json()[
        "data"
    ][0]["results"]
    assert [(r["api_key_id"], r["num_model_requests"]) for r in by_key] == [("team", 3)]
    bad = client.get("/v1/organization/usage/completions?start_time=0&bucket_width=1h", headers=ADMIN)
    assert bad.status_code == 400 and bad.get_json()["error"]["param"] == "bucket_width"


@pytest.fixture
def failing_store(monkeypatch):
    """Make the key book of `client` fail as an unreachable store does."""

    def fail(client) -> None:
        book = state(client.application).gate.book

        def unreachable(*args, **kwargs):
            raise StoreUnavailable("the key store (Redis) failed: Connection refused")

        for method in ("by_digest", "admit", "finish"):
            monkeypatch.setattr(book, method, unreachable)

    return fail


def test_with_the_store_down_a_limited_key_is_refused_by_default(client, failing_store):
    key = new_key(client, rpm=100)
    failing_store(client)
    refused = client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))
    assert refused.status_code == 503 and refused.get_json()["error"]["code"] == "store_unavailable"
    assert client.get("/v1/models", headers=PLAIN).status_code == 200  # keys from the config still work


def test_with_limits_open_on_store_errors_a_known_key_runs_unchecked_and_metrics_say_so(make_client, failing_store, caplog):
    client = make_client("--limits-on-store-error", "open", "--metrics-per-key")
    key = new_key(client, rpm=100)
    client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))  # read while up
    failing_store(client)
    let_run = client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))
    assert let_run.status_code == 503 and let_run.get_json()["error"]["code"] == "upstream_unavailable"
    assert "limits of key 'team' not checked" in caplog.text and key["key"] not in caplog.text
    metrics = client.get("/metrics", headers=ADMIN).text
    assert 'api_like_oai_limits_unchecked_total{outcome="open"} 1.0' in metrics
    assert 'api_like_oai_key_requests_total{key="team",model="smol",status="error"} 2.0' in metrics


def test_refusals_are_counted_by_limit(client):
    key = new_key(client, max_parallel=1, rpm=1)
    for _ in range(3):
        client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key))
    metrics = client.get("/metrics", headers=ADMIN).text
    assert 'api_like_oai_limit_refusals_total{limit="rpm"} 2.0' in metrics
    assert "api_like_oai_key_requests_total{" not in metrics  # per key only with --metrics-per-key


def test_admin_keys_come_from_the_flag_and_the_environment(monkeypatch):
    monkeypatch.setenv("API_LIKE_OAI_ADMIN_KEY", "env-admin,other-admin")
    assert parse_settings([]).admin_keys == ("env-admin", "other-admin")
    assert parse_settings(["--admin-key", "flag-admin"]).admin_keys == ("env-admin", "other-admin", "flag-admin")
