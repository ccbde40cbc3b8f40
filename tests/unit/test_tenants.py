"""Keys that hold against their holders (issue 43), through the app as the CLI builds it (its upstreams
down: everything here is decided before upstream work): the usage API bounded and counted, writes to
the store counted against a key's request limit and its storage quota, and a key seeing only its own
models, requests and errors."""

from __future__ import annotations

import time

import pytest

from api_like_oai.access import limits, manage
from api_like_oai.arguments import StartupError, parse_settings
from api_like_oai.routes import state

from . import test_keys_app
from .test_keys_app import ADMIN, CHAT, bearer, new_key

make_client, client = test_keys_app.make_client, test_keys_app.client  # the same app and store as there

DAY = 86400
USAGE = "/v1/organization/usage/completions"


def test_a_usage_read_of_a_huge_range_makes_only_its_page(client, monkeypatch):
    key = new_key(client)
    days_made = []
    monkeypatch.setattr(manage, "day_of", lambda now: days_made.append(now) or limits.day_of(now))
    page = client.get(f"{USAGE}?start_time=0&end_time=100000000000&limit=3", headers=bearer(key))
    assert len(days_made) == 3  # not the range's 1.16 million days (4.8-6.2 s of a worker's CPU)
    body = page.get_json()
    assert page.status_code == 200 and [bucket["start_time"] for bucket in body["data"]] == [0, DAY, 2 * DAY]
    assert body["has_more"] is True and body["next_page"] == str(3 * DAY)


@pytest.mark.parametrize("end_time", ["253402300800", "100000000000000", "-1", "soon"])
def test_an_end_time_past_the_year_9999_or_not_a_time_is_a_400_naming_it(client, end_time):
    answer = client.get(f"{USAGE}?start_time=0&end_time={end_time}", headers=ADMIN)
    assert answer.status_code == 400 and answer.get_json()["error"]["param"] == "end_time"


def test_paging_by_has_more_loses_no_day(client):
    today = int(time.time()) // DAY * DAY
    query, days = f"{USAGE}?start_time={today - 9 * DAY}&limit=4", []
    while True:
        page = client.get(query, headers=ADMIN).get_json()
        days += [bucket["start_time"] for bucket in page["data"]]
        if not page["has_more"]:
            break
        query = f"{USAGE}?start_time={today - 9 * DAY}&limit=4&page={page['next_page']}"
    assert days == [today - n * DAY for n in range(9, -1, -1)]


def test_usage_reads_count_against_the_keys_request_limit(client):
    key = new_key(client, rpm=2)
    assert client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key)).status_code == 503
    assert client.get(f"{USAGE}?start_time=0", headers=bearer(key)).status_code == 200
    refused = client.get(f"{USAGE}?start_time=0", headers=bearer(key))
    assert refused.status_code == 429 and refused.get_json()["error"]["code"] == "rate_limit_exceeded"
    assert client.get("/v1/internal/usage", headers=bearer(key)).status_code == 429
    rows = client.get("/v1/internal/usage", headers=ADMIN).get_json()["data"]
    assert [(row["model"], row["requests"]) for row in rows] == [("smol", 1)]  # reads are not usage


def test_a_rate_limited_key_cannot_write_conversations_or_items(client):
    key = new_key(client, rpm=3)
    created = client.post("/v1/conversations", json={"items": []}, headers=bearer(key))
    assert created.status_code == 200
    conversation = created.get_json()["id"]
    item = {"items": [{"type": "message", "role": "user", "content": "hello " * 1000}]}
    assert client.post(f"/v1/conversations/{conversation}/items", json=item, headers=bearer(key)).status_code == 200
    assert client.post("/v1/chat/completions", json={**CHAT, "model": "smol"}, headers=bearer(key)).status_code == 503
    for path, body in [("/v1/conversations", {"items": []}), (f"/v1/conversations/{conversation}/items", item)]:
        refused = client.post(path, json=body, headers=bearer(key))
        assert refused.status_code == 429 and "rpm" in refused.get_json()["error"]["message"]
    assert client.get(f"/v1/conversations/{conversation}", headers=bearer(key)).status_code == 429
    assert client.delete("/v1/responses/resp_x", headers=bearer(key)).status_code == 429


def test_an_action_frees_its_place_in_flight(client):
    key = new_key(client, max_parallel=1)
    for _ in range(3):
        assert client.post("/v1/conversations", json={}, headers=bearer(key)).status_code == 200


def test_an_unknown_model_lists_only_the_keys_models(client):
    key = new_key(client, models=["smol"])
    for path, body in [("/v1/chat/completions", CHAT), ("/v1/internal/encode", {"text": "hi"})]:
        answer = client.post(path, json={**body, "model": "nothing-like-it"}, headers=bearer(key))
        assert answer.status_code == 404
        assert answer.get_json()["error"]["message"].endswith("known models: smol, smol-alias")
    native = client.post("/completion", json={"model": "nothing-like-it", "prompt": "hi"}, headers=bearer(key))
    assert native.status_code == 404 and "other" not in native.get_json()["error"]["message"]


def test_a_key_gets_no_server_logs_metrics_or_other_keys_requests(client):
    key = new_key(client, models=["smol"])
    for path in ("/v1/internal/model/logs?model=smol", "/metrics"):
        assert client.get(path, headers=bearer(key)).status_code == 403
    assert client.post("/v1/internal/stop-generation", headers=bearer(key)).status_code == 403
    assert client.get("/v1/internal/model/logs?model=smol", headers=ADMIN).status_code == 400  # starts no models
    assert client.get("/v1/internal/requests", headers=bearer(key)).get_json()["data"] == []


def test_health_shows_addresses_to_the_admin_only(client):
    public, admin = client.get("/health"), client.get("/health", headers=ADMIN)
    assert public.status_code == admin.status_code == 503
    assert "upstreams" not in public.get_json() and "127.0.0.1" not in public.get_data(as_text=True)
    assert public.get_json()["error"]["message"] == (
        "upstream not ready (1 of 1): 1 llama.cpp at <upstream> is unreachable (ConnectionRefusedError)"
    )
    served = state(client.application).registry.models["smol"]
    assert list(admin.get_json()["upstreams"]) == [served.upstream.servers()[0].base_url]


def test_model_info_shows_no_address_to_a_key(client):
    key = new_key(client, models=["smol"])
    info = client.get("/v1/internal/model/info?model=smol", headers=bearer(key)).get_json()
    assert [upstream["url"] for upstream in info["upstreams"]] == [None]


def test_admin_keys_come_from_a_file_and_its_environment_variable(tmp_path, monkeypatch):
    key_file = tmp_path / "admin-keys"
    key_file.write_text("file-admin\n\nsecond-admin\n")
    assert parse_settings(["--admin-key-file", str(key_file)]).admin_keys == ("file-admin", "second-admin")
    monkeypatch.setenv("API_LIKE_OAI_ADMIN_KEY_FILE", str(key_file))
    assert parse_settings(["--admin-key", "flag"]).admin_keys == ("flag", "file-admin", "second-admin")
    with pytest.raises(StartupError, match="--admin-key-file"):
        parse_settings(["--admin-key-file", str(tmp_path / "missing")])


def big_items(kib: int) -> dict:
    return {"items": [{"type": "message", "role": "user", "content": "x" * 1024 * kib}]}


def test_a_key_over_its_storage_quota_is_refused_with_a_429(client):
    key = new_key(client, max_stored_mib=1)
    first = client.post("/v1/conversations", json=big_items(600), headers=bearer(key))
    assert first.status_code == 200
    conversation = first.get_json()["id"]
    assert client.post(f"/v1/conversations/{conversation}/items", json=big_items(600), headers=bearer(key)).status_code == 200
    for path, body in [
        ("/v1/conversations", big_items(1)),
        (f"/v1/conversations/{conversation}/items", big_items(1)),
        ("/v1/responses", {"model": "smol", "input": "hi"}),
    ]:
        refused = client.post(path, json=body, headers=bearer(key))
        assert refused.status_code == 429, (path, refused.get_json())
        assert refused.get_json()["error"]["code"] == "storage_quota_exceeded" and "Retry-After" not in refused.headers
    assert client.delete(f"/v1/conversations/{conversation}", headers=bearer(key)).status_code == 200
    assert client.post("/v1/conversations", json=big_items(1), headers=bearer(key)).status_code == 200


def test_one_write_larger_than_the_quota_is_a_413(make_client):
    quota = make_client("--max-stored-mib", "1")
    key = new_key(quota)
    refused = quota.post("/v1/conversations", json=big_items(1100), headers=bearer(key))
    assert refused.status_code == 413 and refused.get_json()["error"]["code"] == "storage_quota_exceeded"
    assert quota.post("/v1/conversations", json=big_items(1100), headers=ADMIN).status_code == 200  # the admin's: none
