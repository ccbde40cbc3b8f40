"""The dashboard's routes in the app as the CLI builds it (upstream down): the page is served under a
strict Content Security Policy and never builds HTML from data; its stream needs a key when keys are
configured, and shows another key's name only to an admin; its stop action needs the admin key once
one is configured. Its history adds up in the store's buckets and survives a new process (restart)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from api_like_oai import create_app
from api_like_oai.access.keys import Caller, KeyRecord
from api_like_oai.arguments import parse_settings
from api_like_oai.dashboard import history as h
from api_like_oai.dashboard.buckets import MemoryBuckets, RedisBuckets, SQLiteBuckets
from api_like_oai.dashboard.live import for_viewer
from api_like_oai.observability import Metrics, RequestRecord
from api_like_oai.store.redis import RedisStore
from api_like_oai.store.sqlite import SQLiteStore

from ..servers import free_port

UI = Path(h.__file__).resolve().parents[1] / "ui"
ADMIN = {"Authorization": "Bearer admin-secret"}
PLAIN = {"Authorization": "Bearer plain-key"}
MARKUP = '<img src=x onerror="alert(1)">'


def make_client(tmp_path, *flags: str):
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  smol:\n    upstreams: [http://127.0.0.1:{free_port()}]\n    chat_prompt_model: chatml\n")
    return create_app(
        parse_settings(["--config", str(config), "--store", f"sqlite:///{tmp_path}/store.sqlite3", *flags])
    ).test_client()


@pytest.fixture
def keyed(tmp_path):
    return make_client(tmp_path, "--admin-key", "admin-secret", "--api-key", "plain-key")


def frames(response, count: int) -> list[tuple[str, dict]]:
    """The first `count` events of a dashboard stream, then the stream closed."""
    found, text, chunks = [], "", iter(response.response)
    while len(found) < count:
        text += next(chunks).decode()
        while "\n\n" in text and len(found) < count:
            frame, text = text.split("\n\n", 1)
            event, data = (line.split(": ", 1)[1] for line in frame.split("\n"))
            found.append((event, orjson.loads(data)))
    response.close()
    return found


# --- the page --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/vendor/uplot/uPlot.iife.min.js"])
def test_the_page_and_its_files_need_no_key_and_come_under_a_strict_policy(keyed, path):
    response = keyed.get(path)
    assert response.status_code == 200
    policy = dict(part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_no_file_outside_the_page_folder_is_served(keyed):
    assert keyed.get("/ui/../app.py").status_code == 404
    assert keyed.get("/ui/%2e%2e/app.py").status_code == 404


def test_the_page_has_no_inline_script_or_style_and_never_writes_html():
    page = (UI / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", page) == [
        '<script src="/ui/vendor/uplot/uPlot.iife.min.js" defer>',
        '<script src="/ui/app.js" defer>',
    ]
    assert "<style" not in page and " style=" not in page
    assert re.findall(r"<[^>]*\son[a-z]+\s*=", page, re.IGNORECASE) == []  # no inline event handler
    script = (UI / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script


def test_the_vendored_chart_library_ships_with_its_licence():
    assert "MIT License" in (UI / "vendor" / "uplot" / "LICENSE").read_text()
    assert "1.6.32" in (UI / "vendor" / "uplot" / "VERSION").read_text()


# --- the stream ------------------------------------------------------------------------------------


def test_the_stream_needs_a_key_and_says_what_the_caller_may_do(keyed):
    assert keyed.get("/v1/internal/events").status_code == 401
    assert keyed.get("/v1/internal/events", headers={"Authorization": "Bearer wrong"}).status_code == 401
    plain = frames(keyed.get("/v1/internal/events", headers=PLAIN), 3)
    assert [event for event, _ in plain] == ["hello", "live", "history"]
    assert plain[0][1] == {"key": "config-key", "can_act": False, "log_prompts": False}
    admin = frames(keyed.get("/v1/internal/events", headers=ADMIN), 1)
    assert admin[0][1]["can_act"] is True


def test_the_stream_shows_models_upstreams_and_no_request_of_its_own(keyed):
    _, live = frames(keyed.get("/v1/internal/events", headers=ADMIN), 2)[1]
    assert live["requests"] == []  # the stream is a request in flight too, but not one to show
    assert [(model["name"], model["status"], model["started"]) for model in live["models"]] == [("smol", "failed", False)]
    assert live["upstreams"][0]["health"] != "ok" and live["upstreams"][0]["slots_busy"] == 0
    assert live["memory"] is None


def test_a_refused_request_reaches_the_recent_errors_with_its_reason_as_plain_data(keyed):
    keyed.post(
        "/v1/chat/completions", json={"model": MARKUP, "messages": [{"role": "user", "content": "secret prompt"}]}, headers=PLAIN
    )
    keyed.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    _, history = frames(keyed.get("/v1/internal/events", headers=ADMIN), 3)[2]
    newest, older = history["errors"][:2]
    assert (newest["status"], newest["code"], newest["key"]) == (401, "invalid_api_key", None)
    assert older["status"] == 404 and older["key"] == "config-key" and MARKUP in older["reason"]
    assert all("secret prompt" not in orjson.dumps(entry).decode() for entry in history["errors"])
    assert history["minute"]["errors"][-1] == 2 and history["minute"]["requests"][-1] == 2


def test_the_stop_action_needs_the_admin_key_once_configured(keyed, tmp_path):
    assert keyed.post("/v1/internal/requests/abc/stop").status_code == 401
    assert keyed.post("/v1/internal/requests/abc/stop", headers=PLAIN).status_code == 403
    missing = keyed.post("/v1/internal/requests/abc/stop", headers=ADMIN)
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "not_found"
    (tmp_path / "no-admin").mkdir()
    without_admin = make_client(tmp_path / "no-admin", "--api-key", "plain-key")  # then any key may act
    assert without_admin.post("/v1/internal/requests/abc/stop", headers=PLAIN).status_code == 404


def test_without_keys_configured_the_stream_is_open(tmp_path):
    client = make_client(tmp_path)
    assert frames(client.get("/v1/internal/events"), 1)[0][1] == {"key": None, "can_act": True, "log_prompts": False}


def test_a_key_sees_only_its_own_requests_errors_models_and_no_addresses():
    team_a = Caller("team-a", KeyRecord("team-a", "digest", models=("a",)))
    live = {
        "requests": [{"key": "team-a", "upstream": "http://127.0.0.1:1"}, {"key": "team-b", "upstream": "x"}],
        "models": [{"name": "a"}, {"name": "b"}],
        "upstreams": [
            {"model": "a", "url": "http://127.0.0.1:1", "cache_share": 0.5},
            {"model": "b", "url": "http://127.0.0.1:2", "cache_share": 0.1},
        ],
    }
    history = {
        "errors": [{"key": "team-b", "message": "known models: b"}],
        "cache_shares": {"http://127.0.0.1:1": 1},
        "minute": {"keys": {"team-a": [1], "team-b": [2]}},
        "hour": {"keys": {"team-b": [3]}},
    }
    assert for_viewer(live, team_a, sees_all=True) is live
    shown_live = for_viewer(live, team_a, sees_all=False)
    assert shown_live["requests"] == [{"key": "team-a", "upstream": None}] and shown_live["models"] == [{"name": "a"}]
    assert shown_live["upstreams"] == [{"model": "a", "url": "a #0", "cache_share": None}]
    shown = for_viewer(history, team_a, sees_all=False)
    assert shown["errors"] == [] and shown["cache_shares"] == {}
    assert shown["minute"]["keys"] == {"team-a": [1]} and shown["hour"]["keys"] == {}


# --- the history -----------------------------------------------------------------------------------


def closed_record(status=200, ttft=0.5, key="team", prompt=100, cached=40, completion=20) -> RequestRecord:
    record = RequestRecord(
        "/v1/chat/completions",
        Metrics(),
        model="smol",
        upstream="http://u:1",
        status=status,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        key_name=key,
    )
    record.first_token = record.started + ttft if ttft is not None else None
    return record


def test_charts_count_requests_tokens_and_ttft_percentiles_per_bucket():
    history = h.History(MemoryBuckets())
    for ttft in (0.1, 0.2, 0.4, 0.8, 8.0):
        history.add(closed_record(ttft=ttft))
    history.add(closed_record(status=503, ttft=None, key=None, prompt=0, cached=0, completion=0), "upstream down")
    charts = history.charts()
    minute = charts["minute"]
    assert len(minute["time"]) == 15 and len(charts["hour"]["time"]) == 168
    assert (minute["requests"][-1], minute["errors"][-1]) == (6, 1)
    assert minute["ttft_p50"][-1] == pytest.approx(0.4, rel=0.25) and minute["ttft_p95"][-1] == pytest.approx(8, rel=0.25)
    assert minute["keys"] == {"team": [0] * 14 + [600]}
    assert charts["cache_shares"] == {"http://u:1": 0.4}
    assert charts["errors"][0]["reason"] == "upstream down" and charts["errors"][0]["status"] == 503


def test_percentile_of_an_empty_histogram_is_none():
    assert h.percentile({}, 0.5) is None


def test_the_sqlite_history_adds_up_and_survives_a_restart(tmp_path):
    def process():
        return h.History(SQLiteBuckets(SQLiteStore(tmp_path / "store.sqlite3", 3600, 1 << 20)))

    first, second = process(), process()  # two workers on one file
    first.add(closed_record())
    second.add(closed_record(status=429, key="other"), "over the key's rpm")
    first.flush()
    second.flush()
    after_restart = process().charts()
    assert after_restart["minute"]["requests"][-1] == 2 and after_restart["hour"]["requests"][-1] == 2
    assert set(after_restart["hour"]["keys"]) == {"team", "other"}
    assert [entry["reason"] for entry in after_restart["errors"]] == ["over the key's rpm"]


def test_the_sqlite_history_keeps_the_last_hundred_errors(tmp_path):
    history = h.History(SQLiteBuckets(SQLiteStore(tmp_path / "store.sqlite3", 3600, 1 << 20)))
    for number in range(h.KEPT_ERRORS + 5):
        history.add(closed_record(status=400), f"error {number}")
    history.flush()
    errors = history.recent_errors()
    assert len(errors) == h.KEPT_ERRORS and errors[0]["reason"] == f"error {h.KEPT_ERRORS + 4}"


def test_the_redis_history_is_shared_by_instances(redis_server):
    store = RedisStore(redis_server.url, 3600, 1 << 20)
    store.client.flushdb()
    one, two = h.History(RedisBuckets(store)), h.History(RedisBuckets(RedisStore(redis_server.url, 3600, 1 << 20)))
    one.add(closed_record())
    two.add(closed_record(status=500), "upstream failed")
    one.flush()
    two.flush()
    charts = h.History(RedisBuckets(store)).charts()
    assert charts["minute"]["requests"][-1] == 2 and charts["hour"]["errors"][-1] == 1
    assert charts["cache_shares"] == {"http://u:1": 0.4} and charts["errors"][0]["reason"] == "upstream failed"


def test_the_stop_action_ends_one_generating_request_and_refuses_one_still_queued(tmp_path):
    client = make_client(tmp_path, "--admin-key", "admin-secret")
    state = client.application.extensions["api_like_oai"]
    generating, queued = (
        RequestRecord("/v1/chat/completions", Metrics(), live_requests=state.inflight.requests) for _ in range(2)
    )
    with state.inflight.track(generating) as stop_event:
        answer = client.post(f"/v1/internal/requests/{generating.request_id}/stop", headers=ADMIN)
        assert answer.status_code == 200 and answer.get_json() == {"stopped": generating.request_id}
        assert stop_event.is_set()
    refused = client.post(f"/v1/internal/requests/{queued.request_id}/stop", headers=ADMIN)
    assert refused.status_code == 400 and "not generating yet" in refused.get_json()["error"]["message"]


def test_the_memory_line_carries_each_devices_budget_and_use():
    from api_like_oai.dashboard.live import _memory

    status = {
        "memory_budget_mib": 3000,
        "models": {"a": {"value": "loaded", "memory_mib": 500}},
        "devices": {"gpu0": {"budget_mib": 1000, "used_mib": 404}, "cpu": {"budget_mib": 2000, "used_mib": 96}},
    }
    assert _memory(status) == {
        "budget_mib": 3000,
        "used_mib": 500,
        "devices": [
            {"device": "gpu0", "budget_mib": 1000, "used_mib": 404},
            {"device": "cpu", "budget_mib": 2000, "used_mib": 96},
        ],
    }


def test_a_requests_detail_shows_its_mcp_steps_while_it_runs_and_in_its_error():
    record = closed_record(status=502)
    assert "mcp" not in record.live() and "mcp" not in h.error_entry(record, None, 0.0)  # none: nothing added
    listing = record.mcp_step("files", "tools/list", "tools/list")
    listing.ended = listing.started + 0.25
    failed = record.mcp_step("files", "fail", "tools/call")
    failed.ended, failed.error_type, failed.error = failed.started + 0.5, "mcp_tool_execution_error", "x" * 400
    record.mcp_step("files", "slow", "tools/call")  # still running
    steps = record.live()["mcp"]
    assert steps[:2] == [
        {"server": "files", "tool": "tools/list", "seconds": 0.25, "running": False, "error": None},
        {"server": "files", "tool": "fail", "seconds": 0.5, "running": False, "error": "x" * 300},
    ]
    assert (steps[2]["tool"], steps[2]["running"], steps[2]["error"]) == ("slow", True, None)
    entry = h.error_entry(record, "the upstream failed", 0.0)
    assert [step["tool"] for step in entry["mcp"]] == ["tools/list", "fail", "slow"]
    history = h.History(MemoryBuckets())
    history.add(record)
    assert history.recent_errors()[0]["mcp"][1]["error"] == "x" * 300
