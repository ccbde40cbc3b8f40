"""A front's models' status stream made of its boxes' (fleet/watch.py): the merged first status and the
SSE reading, without a server (tests/e2e/test_fleet_lifecycle.py runs it over a real fleet)."""

from __future__ import annotations

from api_like_oai.fleet.watch import data_events, merged_status

A, B = "http://127.0.0.2:8081", "http://127.0.0.3:8081"


def _status(value: str, **counts) -> dict:
    return {"value": value, "replicas": 1, "ready": int(value == "loaded"), "in_flight": 0, "queued": 0, "upstreams": []} | counts


def test_a_model_on_two_boxes_is_its_best_boxs_status_with_the_counts_of_both():
    firsts = {
        B: {"models": {"m": _status("loaded", in_flight=2, upstreams=["b1"])}, "memory_budget_mib": 100, "max_loaded": None},
        A: {
            "models": {"m": _status("unloaded", queued=1, upstreams=["a1"]), "n": _status("loading")},
            "memory_budget_mib": 50,
            "max_loaded": 2,
            "devices": {"cpu": {"budget_mib": 50, "used_mib": 10}},
        },
    }
    merged = merged_status(firsts)
    assert merged["models"]["m"] == {
        "value": "loaded",
        "replicas": 2,
        "ready": 1,
        "in_flight": 2,
        "queued": 1,
        "upstreams": ["a1", "b1"],
        "boxes": {A: "unloaded", B: "loaded"},
    }
    assert merged["models"]["n"]["boxes"] == {A: "loading"}
    assert (merged["memory_budget_mib"], merged["max_loaded"]) == (150, None)  # a box without a bound: none
    assert merged["devices"] == {"cpu": {"budget_mib": 50, "used_mib": 10}}
    assert list(merged["boxes"]) == [A, B] and merged["boxes"][A]["max_loaded"] == 2


def test_no_box_is_an_empty_status_of_one_proxys_shape():
    assert merged_status({}) == {"models": {}, "memory_budget_mib": 0, "max_loaded": 0, "devices": {}, "boxes": {}}


def test_sse_frames_cut_anywhere_are_read_whole_and_a_keep_alive_is_a_none():
    body = b'data: {"models": {}}\n\n: keep-alive\n\ndata: {"model": "m", "status": {"value": "loaded"}}\n\n'
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
    assert list(data_events(iter(pieces))) == [{"models": {}}, None, {"model": "m", "status": {"value": "loaded"}}]
