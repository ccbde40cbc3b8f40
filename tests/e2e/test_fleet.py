"""A fleet of real instances: two boxes (127.0.0.2, 127.0.0.3) each starting SmolLM2 on demand within a
budget for one copy, two fronts (127.0.0.4, 127.0.0.5) with no models, one real Redis, driven by the
OpenAI client. The processes are shared by the module's tests, which run in order: a cold start, an
agent session through both fronts, a front killed, then a box killed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import yaml

from ..conftest import openai_client
from ..servers import (
    FLEET_MODEL,
    ROOT,
    Proxy,
    command_line,
    descendants_of,
    eventually,
    fleet_box,
    fleet_redis,
    kill_instance,
    launch_all,
    model_boxes,
    still_running,
    stop,
)

SECRET = "a-fleet-secret-for-the-e2e-tests-0123456789"
MODEL = FLEET_MODEL
# An agent's system prompt: long next to each turn's news, as Claude Code's and Codex's are.
SYSTEM = "You are a terse coding agent. " + " ".join(f"Rule {n}: answer in one short line." for n in range(40))


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-e2e")
    redis_server, common = fleet_redis(directory, SECRET)
    boxes = [_box(directory, index, common, provisioned) for index in range(2)]
    fronts = [Proxy(list(common), host=f"127.0.0.{4 + n}") for n in range(2)]
    try:
        launch_all(boxes + fronts)
        eventually(lambda: all(len(_where(front)) == 2 for front in fronts), "both boxes in the fleet")
        yield {"redis": redis_server, "boxes": boxes, "fronts": fronts}
    finally:
        stop(*(proxy.process for proxy in boxes + fronts if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


def _box(directory, index: int, common: list[str], provisioned: dict) -> Proxy:
    slots = directory / f"slots-{index}"
    slots.mkdir()
    return fleet_box(directory, index, common, provisioned, "--slot-save-dir", str(slots))


def _where(front: Proxy) -> dict[str, dict]:
    """The model's boxes as the front lists them: {box: its status there}."""
    return model_boxes(front, MODEL)


def _llama_servers(proxy: Proxy) -> list[int]:
    return [
        pid
        for pid in descendants_of(proxy.process.pid)
        if command_line(pid)[:1] and command_line(pid)[0].endswith("llama-server")
    ]


def _turn(front: Proxy, messages: list[dict]):
    return openai_client(front.url).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=0
    )


def test_a_cold_model_is_started_once_when_two_fronts_get_its_first_requests_at_once(fleet):
    fronts = fleet["fronts"]
    assert {box["state"] for box in _where(fronts[0]).values()} == {"unloaded"}
    start = threading.Barrier(8)

    def first_request(n: int) -> int:
        start.wait()
        return _turn(fronts[n % 2], [{"role": "user", "content": f"Say hello {n}."}]).http_response.status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(first_request, range(8))) == [200] * 8
    assert sum(len(_llama_servers(box)) for box in fleet["boxes"]) == 1


def test_the_fleet_writes_the_endpoint_pickers_file_of_the_models_boxes(fleet, tmp_path):
    output = tmp_path / "endpoints.yaml"
    command = [sys.executable, "-m", "api_like_oai", "fleet", "endpoints", "--fleet", fleet["redis"].url, "--model", MODEL]
    done = subprocess.run([*command, "--output", str(output)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    listed = [(endpoint["address"], endpoint["port"]) for endpoint in yaml.safe_load(output.read_text())["endpoints"]]
    assert listed == [(box.host, str(box.port)) for box in fleet["boxes"]]


def test_an_agent_session_through_both_fronts_stays_on_one_box_and_in_its_cache(fleet):
    fronts, boxes = fleet["fronts"], fleet["boxes"]
    cold = next(box for box in boxes if not _llama_servers(box))
    requests.post(
        cold.url + "/models/load", json={"model": MODEL}, headers={"X-Fleet-Secret": SECRET}, timeout=120
    ).raise_for_status()
    eventually(lambda: {box["state"] for box in _where(fronts[0]).values()} == {"loaded"}, "loaded on both boxes")
    stayed = prompt_tokens = cached_tokens = later_turns = 0
    for session in range(2):
        messages = [
            {"role": "system", "content": f"Session {session}. {SYSTEM}"},
            {"role": "user", "content": "List three prime numbers."},
        ]
        first_box = None
        for turn in range(1, 9):
            raw = _turn(fronts[turn % 2], messages)
            answer, box = raw.parse(), raw.headers["X-Fleet-Box"]
            if turn == 1:
                first_box = box
            else:
                later_turns += 1
                stayed += box == first_box
                prompt_tokens += answer.usage.prompt_tokens
                cached_tokens += answer.usage.prompt_tokens_details.cached_tokens
            messages += [
                {"role": "assistant", "content": answer.choices[0].message.content},
                {"role": "user", "content": f"And {turn} more."},
            ]
    assert stayed / later_turns >= 0.95
    assert cached_tokens / prompt_tokens >= 0.90


def test_a_killed_front_leaves_the_other_front_serving_and_its_leases_released(fleet):
    killed, other = fleet["fronts"]
    # A story at temperature 0: 400 tokens, seconds of generation (SmolLM2 counts to one hundred in 51
    # and stops within a second, sometimes before the heartbeat that shows the stream shows it).
    story = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
    stream = openai_client(killed.url).chat.completions.create(
        model=MODEL, messages=story, max_tokens=400, temperature=0, stream=True
    )
    next(iter(stream))
    # the box's next heartbeat (1 s) and the front's next read (0.5 s) show it
    eventually(lambda: sum(box["in_flight"] for box in _where(other).values()) >= 1, "the stream in flight")
    leftovers = kill_instance(killed.process)
    for n in range(4):
        assert _turn(other, [{"role": "user", "content": f"Say hi {n}."}]).http_response.status_code == 200
    eventually(lambda: sum(box["in_flight"] for box in _where(other).values()) == 0, "the dead front's lease released")
    eventually(lambda: not still_running(leftovers), "the killed front's processes gone")


def test_a_killed_box_leaves_the_fleet_and_no_llama_server_behind(fleet):
    front = fleet["fronts"][1]
    killed, kept = fleet["boxes"]
    its_llama_servers = _llama_servers(killed)
    assert its_llama_servers
    leftovers = kill_instance(killed.process)
    deadline = time.monotonic() + 7  # past the heartbeat's expiry (5 s)
    answered = 0
    while time.monotonic() < deadline:
        assert _turn(front, [{"role": "user", "content": f"Say hi {answered}."}]).http_response.status_code == 200
        answered += 1
    assert list(_where(front)) == [kept.url]
    eventually(lambda: not still_running(leftovers), "the killed box's supervisor, member and llama-server gone")


def _status_of_a_turn(front: Proxy, n: int) -> int:
    answer = requests.post(
        front.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": f"Say hi {n}."}], "max_tokens": 4},
        timeout=120,
    )
    assert answer.status_code in (200, 503), answer.text[:300]  # never a 404, never gunicorn's 500 page
    if answer.status_code == 503:
        assert answer.headers["Retry-After"] and "127.0.0." not in answer.text
    return answer.status_code


def test_a_box_restarted_serves_again_and_a_model_with_no_box_left_is_a_503(fleet):
    """After the test above: the killed box restarted on its address is back in the fleet and serves
    (the front's dead pooled connections to it retried fresh: no 500); then every box of the model
    killed is a 503 to retry, not a 404 (the front still knows the model)."""
    front = fleet["fronts"][1]
    killed, kept = fleet["boxes"]
    restarted = Proxy(list(killed.args), port=killed.port, host=killed.host)
    fleet["boxes"][0] = restarted
    launch_all([restarted])
    eventually(lambda: killed.url in _where(front), "the restarted box back in the fleet", timeout=30)
    kill_instance(kept.process)
    eventually(lambda: list(_where(front)) == [killed.url], "the other box gone", timeout=15)
    assert _status_of_a_turn(front, 0) == 200  # served by the restarted box (its model started there)
    kill_instance(restarted.process)
    eventually(lambda: _where(front) == {}, "no box left", timeout=15)
    assert _status_of_a_turn(front, 1) == 503
