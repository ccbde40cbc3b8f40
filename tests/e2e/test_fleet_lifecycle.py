"""The models' status stream and their logs through a fleet front, as one proxy answers them: two boxes
(127.0.0.2, 127.0.0.3) starting SmolLM2 on demand, as `smol-a` on the first and `smol-b` on the second, one
front (127.0.0.4) with an admin key and the keys in one real Redis. The tests run in order: the last two
stop a box, then the front."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from ..servers import Proxy, box_config, eventually, fleet_box, fleet_redis, launch_all, stop

SECRET = "a-fleet-secret-for-the-lifecycle-tests-0123456789"
ADMIN = "sk-admin-of-the-lifecycle-fleet"
ARGS = '--ctx-size, "512", --parallel, "1", --threads, "1"'
MODELS = ("smol-a", "smol-b")  # the first box's, the second's


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-lifecycle")
    redis_server, common = fleet_redis(directory, SECRET)
    boxes = [fleet_box(directory, n, common, provisioned, config=box_config(MODELS[n], 300, ARGS)) for n in range(2)]
    front = Proxy([*common, "--admin-key", ADMIN, "--store", redis_server.url], host="127.0.0.4")
    try:
        launch_all([*boxes, front])
        eventually(lambda: {card["id"] for card in _cards(front)} == set(MODELS), "both boxes' models at the front")
        yield {"boxes": boxes, "front": front}
    finally:
        stop(*(proxy.process for proxy in [*boxes, front] if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


@pytest.fixture(scope="module")
def tenant(fleet) -> str:
    """A managed key of smol-b only, made at the front."""
    made = requests.post(
        fleet["front"].url + "/v1/internal/keys", json={"name": "of-b", "models": ["smol-b"]}, headers=_key(ADMIN), timeout=10
    )
    assert made.status_code == 201, made.text
    return made.json()["key"]


def _key(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _cards(front: Proxy) -> list[dict]:
    return requests.get(front.url + "/v1/models", headers=_key(ADMIN), timeout=10).json()["data"]


def _stream(front: Proxy, key: str | None) -> requests.Response:
    return requests.get(front.url + "/v1/internal/models/events", headers=_key(key), stream=True, timeout=60)


def _events(answer: requests.Response):
    for line in answer.iter_lines():
        if line.startswith(b"data: "):
            yield json.loads(line[len(b"data: ") :])


def _first(front: Proxy, key: str | None) -> dict:
    with _stream(front, key) as answer:
        assert answer.status_code == 200, answer.text
        return next(_events(answer))


def _admin_does(front: Proxy, op: str, model: str) -> requests.Response:
    return requests.post(f"{front.url}/models/{op}", json={"model": model}, headers=_key(ADMIN), timeout=120)


def _until_loaded(events, model: str) -> list[dict]:
    """The events up to `model`'s status `loaded`."""
    seen = []
    for event in events:
        seen.append(event)
        if event.get("model") == model and event["status"]["value"] == "loaded":
            return seen
    raise AssertionError(f"the stream ended before {model} was loaded: {seen}")


def test_a_fronts_status_stream_has_the_fleets_models_then_a_load_on_a_box_as_it_happens(fleet):
    front, boxes = fleet["front"], fleet["boxes"]
    with _stream(front, ADMIN) as answer, ThreadPoolExecutor(1) as pool:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        events = _events(answer)
        first = next(events)
        assert first["models"].keys() == set(MODELS) and first["boxes"].keys() == {box.url for box in boxes}
        assert first["models"]["smol-a"]["boxes"] == {boxes[0].url: "unloaded"}
        assert first["models"]["smol-a"]["upstreams"][0].startswith("http://127.0.0.1:")  # the admin sees addresses
        loading = pool.submit(_admin_does, front, "load", "smol-a")
        seen = _until_loaded(events, "smol-a")
        assert loading.result().status_code == 200
    assert {event["box"] for event in seen} == {boxes[0].url} and {event["model"] for event in seen} == {"smol-a"}
    values = [(event["status"]["value"], event["status"].get("stage")) for event in seen]
    assert values[0] == ("loading", "starting") and values[-1] == ("loaded", None)


def test_a_managed_keys_stream_through_a_front_has_only_its_models_and_no_address(fleet, tenant):
    front = fleet["front"]
    with _stream(front, tenant) as answer, ThreadPoolExecutor(1) as pool:
        events = _events(answer)
        first = next(events)
        assert first["models"].keys() == {"smol-b"} and first["boxes"].keys() == {"box 1", "box 2"}
        assert "upstreams" not in first["models"]["smol-b"] and first["models"]["smol-b"]["boxes"] == {"box 2": "unloaded"}
        changes = pool.submit(lambda: (_admin_does(front, "unload", "smol-a"), _admin_does(front, "load", "smol-b")))
        seen = _until_loaded(events, "smol-b")  # smol-a's unload came first: not shown
        assert [answer.status_code for answer in changes.result()] == [200, 200]
    assert {event["model"] for event in seen} == {"smol-b"} and {event["box"] for event in seen} == {"box 2"}
    assert all("upstreams" not in event["status"] for event in seen)
    assert "127.0.0." not in json.dumps([first, *seen])


def test_the_admin_reads_a_boxs_model_logs_through_a_front_and_no_one_else_does(fleet, tenant):
    front, box = fleet["front"], fleet["boxes"][1]
    assert _admin_does(front, "load", "smol-b").status_code == 200
    logs = requests.get(front.url + "/v1/internal/model/logs", params={"model": "smol-b"}, headers=_key(ADMIN), timeout=30)
    assert logs.status_code == 200 and logs.json()["model"] == "smol-b"
    assert any("llama" in line or "server" in line for line in logs.json()["lines"])
    own = requests.get(box.url + "/v1/fleet/logs", params={"model": "smol-b"}, headers={"X-Fleet-Secret": SECRET}, timeout=30)
    assert logs.json()["lines"][-1] in own.json()["lines"]  # the box's own lines (more of them since, maybe)
    asked = {"model": "smol-b"}
    assert requests.get(front.url + "/v1/internal/model/logs", params=asked, headers=_key(tenant), timeout=10).status_code == 403
    assert requests.get(front.url + "/v1/internal/model/logs", params=asked, timeout=10).status_code == 401
    assert requests.get(box.url + "/v1/fleet/logs", params=asked, timeout=10).status_code == 401  # the box: fleet calls only
    wrong = requests.get(box.url + "/v1/fleet/logs", params=asked, headers={"X-Fleet-Secret": "not-it"}, timeout=10)
    assert wrong.status_code == 401
    missing = requests.get(front.url + "/v1/internal/model/logs", params={"model": "nowhere"}, headers=_key(ADMIN), timeout=10)
    assert missing.status_code == 404 and "smol-a, smol-b" in missing.json()["error"]["message"]


def test_a_box_leaving_ends_its_part_of_the_stream_and_the_rest_goes_on(fleet):
    front, boxes = fleet["front"], fleet["boxes"]
    with _stream(front, ADMIN) as answer, ThreadPoolExecutor(1) as pool:
        events = _events(answer)
        assert next(events)["models"].keys() == set(MODELS)
        boxes[1].process.send_signal(signal.SIGTERM)  # drains: its stream to the front ends
        assert boxes[1].process.wait(timeout=30) == 0
        loading = pool.submit(_admin_does, front, "load", "smol-a")
        seen = _until_loaded(events, "smol-a")
        assert loading.result().status_code == 200
    assert {event["box"] for event in seen if event["model"] == "smol-a"} == {boxes[0].url}


def test_sigterm_ends_a_fronts_open_status_stream_rather_than_wait_out_the_grace_period(fleet):
    front = fleet["front"]
    with _stream(front, ADMIN) as answer:
        lines = answer.iter_lines()
        assert next(line for line in lines if line).startswith(b"data: ")
        asked = time.monotonic()
        front.process.send_signal(signal.SIGTERM)
        assert [line for line in lines if line] == []  # ended, with nothing more
        assert front.process.wait(timeout=20) == 0
    assert time.monotonic() - asked < 10
