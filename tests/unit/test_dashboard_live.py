"""The dashboard's live frame in its two steps: `payload` (pure) from a Collected made by hand, the
collector's I/O against stand-in sources, and the workers' channel (siblings.py) that carries every
worker's requests and stops, with two channels in one process."""

from __future__ import annotations

import os

import pytest

from api_like_oai import siblings as siblings_module
from api_like_oai.dashboard.live import Collected, Collector, LiveRequest, ModelUpstreams, Sources, payload
from api_like_oai.errors import UpstreamUnavailable


def shown(request_id: str, upstream: str, phase: str, key: str | None = None) -> dict:
    return {"request_id": request_id, "upstream": upstream, "phase": phase, "key": key}


STATUS = {
    "memory_budget_mib": 4000,
    "models": {"started": {"value": "loaded", "memory_mib": 300, "upstreams": ["http://s:1"], "stage": None}},
}


def collected(**fields) -> Collected:
    defaults = {
        "time": 1.5,
        "requests": [],
        "health": {"http://a:1": "ok", "http://a:2": "connection refused"},
        "models": [ModelUpstreams("a", ("http://a:1", "http://a:2"), True), ModelUpstreams("o", ("http://o:1",), False)],
    }
    return Collected(**(defaults | fields))


def test_the_upstream_rows_add_up_every_workers_requests_on_them():
    requests = [
        LiveRequest(shown("r1", "http://a:1", "generating"), generated_tps=10.0),
        LiveRequest(shown("r2", "http://a:1", "prefill"), prompt_tps=250.04),
        LiveRequest(shown("r3", "http://a:1", "queued")),
        LiveRequest(shown("r4", "http://a:2", "generating"), generated_tps=4.26),
    ]
    frame = payload(collected(requests=requests, slots={"http://a:1": 4, "http://o:1": 9}, cache_shares={"http://a:1": 0.5}))
    assert [row["request_id"] for row in frame["requests"]] == ["r1", "r2", "r3", "r4"]
    first, second, other = frame["upstreams"]
    assert (first["slots_busy"], first["slots_total"], first["prompt_tps"], first["generated_tps"]) == (2, 4, 250.0, 10.0)
    assert first["cache_share"] == 0.5 and first["health"] == "ok"
    assert (second["slots_busy"], second["slots_total"], second["generated_tps"]) == (1, None, 4.3)
    assert other["slots_total"] is None and other["health"] == "unknown"  # an OpenAI upstream says no slots


def test_a_model_started_elsewhere_is_loaded_while_one_upstream_answers_and_failed_with_the_first_reason():
    frame = payload(collected())
    assert frame["models"][0] == {
        "name": "a",
        "started": False,
        "status": "loaded",
        "stage": None,
        "memory_mib": None,
        "error": None,
    }
    assert frame["models"][1]["status"] == "failed" and frame["models"][1]["error"] is None
    down = payload(collected(health={"http://a:1": "timed out", "http://a:2": "refused"}))
    assert down["models"][0]["status"] == "failed" and down["models"][0]["error"] == "timed out"


def test_a_started_model_shows_the_supervisors_status_and_the_memory_line():
    frame = payload(collected(models=[ModelUpstreams("started", ("http://s:1",), True)], status=STATUS))
    assert frame["models"] == [
        {
            "name": "started",
            "started": True,
            "status": "loaded",
            "stage": None,
            "memory_mib": 300,
            "error": None,
            "devices": None,
            "draft": None,
        }
    ]
    assert frame["memory"] == {"budget_mib": 4000, "used_mib": 300, "devices": []}
    assert payload(collected())["memory"] is None and payload(collected())["fleet"] is None


def test_the_fleet_line_is_its_boxes_or_why_they_are_unknown():
    record = {
        "address": "10.0.0.2:8080",
        "budget_mib": 1000,
        "in_flight": 2,
        "queued": 1,
        "models": {"m": {"state": "loaded", "memory_mib": 400, "in_flight": 2, "queued": 1, "pinned": False}},
    }
    assert payload(collected(fleet=[record]))["fleet"] == {
        "boxes": [
            {
                "box": "10.0.0.2:8080",
                "budget_mib": 1000,
                "used_mib": 400,
                "in_flight": 2,
                "queued": 1,
                "models": [{"name": "m", "state": "loaded"}],
            }
        ],
        "error": None,
    }
    assert payload(collected(fleet="redis is down"))["fleet"] == {"boxes": [], "error": "redis is down"}


class Client:
    def __init__(self, url: str, slots: int | None = 4):
        self.base_url, self.slots, self.asked = url, slots, 0

    def props(self):
        self.asked += 1
        return type("Props", (), {"total_slots": self.slots})()


class Model:
    """A llama.cpp model's stand-in: its upstream's servers say their slots (capabilities.props)."""

    def __init__(self, name: str, clients: list[Client], health: dict[str, str]):
        self.name, self.health, self.checks = name, health, 0
        self.upstream = type(
            "Upstream", (), {"capabilities": type("Capabilities", (), {"props": True})(), "servers": lambda _self: clients}
        )()

    def check_health(self) -> dict[str, str]:
        self.checks += 1
        return self.health


def test_the_collector_asks_health_every_few_seconds_and_slots_once_healthy():
    client = Client("http://a:1")
    model = Model("a", [client], {"http://a:1": "ok"})
    started = Model("started", [Client("http://s:1")], {})

    def fleet():
        raise UpstreamUnavailable("the fleet's Redis is unreachable")

    collector = Collector(
        Sources(lambda: [LiveRequest(shown("r", "http://a:1", "generating"))], lambda: [model, started], lambda: STATUS, fleet)
    )
    first = collector.collect(100.0, {"http://a:1": 0.25})
    assert first.health == {"http://a:1": "ok", "http://s:1": "ok"} and first.slots["http://a:1"] == 4
    assert first.cache_shares == {"http://a:1": 0.25} and first.fleet == "the fleet's Redis is unreachable"
    assert started.checks == 0  # a started model's health is the supervisor's word
    collector.collect(101.0, {})
    assert (model.checks, client.asked) == (1, 1)
    collector.collect(106.0, {})
    assert (model.checks, client.asked) == (2, 1)  # slots again only after PROPS_SECONDS


@pytest.fixture
def two_workers(tmp_path, monkeypatch):
    """This process's channel and another 'worker's' (a second channel under another pid)."""
    stopped = []
    rows = [
        {"shown": shown(f"r{n}", "http://a:1", "generating"), "prompt_tps": 0.0, "generated_tps": 1.0}
        for n in range(siblings_module.PART_ITEMS * 2 + 5)
    ]  # three datagrams
    monkeypatch.setattr(os, "getpid", lambda: 1)
    other = siblings_module.Siblings(
        str(tmp_path),
        {"requests": lambda _: rows, "stop": lambda _: 3, "stop_one": lambda request_id: stopped.append(request_id) or "x"},
    )
    monkeypatch.setattr(os, "getpid", lambda: 2)
    own = siblings_module.Siblings(str(tmp_path), {})
    yield own, rows, stopped
    other.listener.close()
    own.listener.close()


def test_a_worker_gets_the_others_requests_in_parts_and_stops_theirs(two_workers):
    own, rows, stopped = two_workers
    assert own.ask("requests") == [rows]
    assert own.ask("stop_one", "r7") == ["x"] and stopped == ["r7"]
    assert own.stop_all() == 3


def test_an_unknown_ask_is_logged_and_left_unanswered(two_workers, monkeypatch, caplog):
    own, _, _ = two_workers
    monkeypatch.setattr(siblings_module, "REPLY_TIMEOUT", 0.3)
    assert own.ask("no such question") == []
    assert "could not be answered" in caplog.text
