"""A fleet of real instances over a real Redis, with fake llama.cpps behind the boxes (the faults; the
models started on demand are tests/e2e/test_fleet.py's): two boxes, each on a loopback address of its
own, and two fronts with no models of their own. The tests run in order: a box is killed, then Redis
is stopped and started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import openai
import pytest
import requests

from api_like_oai.backends.routing import rendezvous

from ..conftest import openai_client
from ..servers import ROOT, Proxy, RedisServer, eventually, free_port, kill_instance, server_processes, still_running, stop

SECRET = "a-fleet-secret-for-the-tests-0123456789"
ADMIN = "sk-admin-of-the-fleet"
MODEL = "fakemodel"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, start_fake):
    """{redis, fakes, boxes, fronts, secret_file}: all started, and stopped when the module ends."""
    directory = tmp_path_factory.mktemp("fleet")
    secret_file = directory / "fleet-secret"
    secret_file.write_text(SECRET + "\n")
    redis_server = RedisServer().start()
    fakes = [start_fake(), start_fake()]
    common = ["--fleet", redis_server.url, "--fleet-secret-file", str(secret_file)]
    boxes = [_box(directory, index, fake.url, common) for index, fake in enumerate(fakes)]
    fronts = [Proxy([*common, "--admin-key", ADMIN, "--store", redis_server.url], host=f"127.0.0.{4 + n}") for n in range(2)]
    started = {"redis": redis_server, "fakes": fakes, "boxes": boxes, "fronts": fronts, "secret_file": secret_file}
    try:
        for proxy in boxes + fronts:
            proxy.launch()
        for proxy in boxes + fronts:
            proxy.ready()
        eventually(lambda: len(_boxes_of(fronts[0])) == 2 and len(_boxes_of(fronts[1])) == 2, "both boxes in the fleet")
        yield started
    finally:
        stop(*(proxy.process for proxy in boxes + fronts if proxy.process))
        started["redis"].stop()


def _box(directory, index: int, upstream: str, common: list[str], model: str = MODEL, port: int | None = None) -> Proxy:
    config = directory / f"box-{index}.yaml"
    config.write_text(f"models:\n  {model}:\n    upstreams: [{upstream}]\n    chat_prompt_model: chatml\n")
    host, port = f"127.0.0.{2 + index}", port or free_port()
    return Proxy([*common, "--config", str(config), "--advertise", f"http://{host}:{port}"], port=port, host=host)


def _boxes_of(front: Proxy, model: str = MODEL) -> list[str]:
    answer = requests.get(front.url + "/v1/models", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5)
    cards = {card["id"]: card for card in answer.json()["data"]} if answer.status_code == 200 else {}
    return sorted(box["box"] for box in cards[model]["status"]["boxes"]) if model in cards else []


def _chat(front: Proxy, messages=HELLO, **options):
    return openai_client(front.url, api_key=ADMIN).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, **options
    )


def test_a_front_answers_for_a_model_only_the_boxes_serve(fleet):
    front = fleet["fronts"][0]
    assert _chat(front).choices[0].message.content == " Hello, world!"
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in _chat(front, stream=True, stream_options={"include_usage": True})
        if chunk.choices
    )
    assert streamed == " Hello, world!"
    relayed = [line for line in front.log().splitlines() if "endpoint=/v1/chat/completions" in line]
    assert all("completion_tokens=4" in line for line in relayed[:2])  # the box's usage counted at the front
    answer = requests.post(
        front.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": HELLO},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=30,
    )
    box, route = answer.headers["X-Fleet-Box"], answer.headers["X-Fleet-Route"]
    assert box in [box.url for box in fleet["boxes"]] and route == "prefix"
    assert f"upstream={box} route=prefix status=200" in front.log()
    metrics = _metrics(front)
    assert f'api_like_oai_fleet_relays_total{{box="{box}",route="prefix",status="200"}}' in metrics
    assert "api_like_oai_fleet_boxes 2.0" in metrics
    assert all(f'api_like_oai_fleet_model_loaded{{box="{b.url}",model="{MODEL}"}} 1.0' in metrics for b in fleet["boxes"])


def _metrics(front: Proxy) -> str:
    return requests.get(front.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5).text


def test_anthropics_api_goes_through_a_front_with_its_own_error_shape(fleet):
    front = fleet["fronts"][1]
    headers = {"x-api-key": ADMIN, "anthropic-version": "2023-06-01"}
    answer = requests.post(
        front.url + "/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": HELLO}, headers=headers, timeout=30
    )
    assert answer.status_code == 200 and answer.json()["content"][0]["text"] == " Hello, world!"
    unknown = requests.post(
        front.url + "/v1/messages", json={"model": "nowhere", "max_tokens": 8, "messages": HELLO}, headers=headers, timeout=30
    )
    assert unknown.status_code == 404 and unknown.json()["type"] == "error"


def test_models_and_fleet_status_list_the_fleets_models_and_boxes(fleet):
    boxes = sorted(box.url for box in fleet["boxes"])
    for front in fleet["fronts"]:
        assert _boxes_of(front) == boxes
    status = subprocess.run(
        [sys.executable, "-m", "api_like_oai", "fleet", "status", "--fleet", fleet["redis"].url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert status.startswith("2 boxes") and all(box in status for box in boxes)
    assert f"{MODEL}: {boxes[0]} loaded, {boxes[1]} loaded" in status


def test_a_fronts_model_list_carries_each_models_metadata_as_its_box_reports_it(fleet):
    box, front = fleet["boxes"][0], fleet["fronts"][0]
    own = requests.get(box.url + "/v1/models", headers={"X-Fleet-Secret": SECRET}, timeout=5).json()["data"]
    at_the_box = next(card for card in own if card["id"] == MODEL)
    at_the_front = openai_client(front.url, api_key=ADMIN).models.retrieve(MODEL).model_dump()
    for field in ("created", "context_length", "max_model_len", "capabilities"):
        assert at_the_front[field] == at_the_box[field], field
    assert at_the_front["created"] > 0


def test_the_dashboard_shows_the_fleets_boxes_and_their_models(fleet):
    with requests.get(
        fleet["fronts"][0].url + "/v1/internal/events", headers={"Authorization": f"Bearer {ADMIN}"}, stream=True, timeout=10
    ) as stream:
        live = _first_event(stream.iter_lines(decode_unicode=True), "live")
    boxes = {box["box"]: box for box in live["fleet"]["boxes"]}
    assert sorted(boxes) == sorted(box.url for box in fleet["boxes"]) and live["fleet"]["error"] is None
    assert all(box["models"] == [{"name": MODEL, "state": "loaded"}] for box in boxes.values())


def _first_event(lines, wanted: str) -> dict:
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: ") and event == wanted:
            return json.loads(line[len("data: ") :])
    raise AssertionError(f"no {wanted} event")


def test_a_sessions_turns_through_both_fronts_stay_on_one_box(fleet):
    fakes, fronts = fleet["fakes"], fleet["fronts"]
    for session in range(3):
        before = [len(fake.requests) for fake in fakes]
        messages = [{"role": "system", "content": f"session {session}"}, {"role": "user", "content": "turn 1"}]
        for turn in range(8):
            answer = _chat(fronts[turn % 2], messages)
            messages += [
                {"role": "assistant", "content": answer.choices[0].message.content},
                {"role": "user", "content": f"turn {turn + 2}"},
            ]
        counts = sorted(len(fake.requests) - count for fake, count in zip(fakes, before, strict=True))
        assert counts == [0, 8]


def test_a_websockets_turns_through_a_front_stay_on_one_box(fleet):
    """A Responses WebSocket at a front: its store: false turns, chained on the socket, are each sent to a
    box as one self-contained request, all to the same box."""
    fakes = fleet["fakes"]
    before = [len(fake.requests) for fake in fakes]
    with openai_client(fleet["fronts"][0].url, api_key=ADMIN).responses.connect() as connection:
        previous = None
        for turn in range(4):
            connection.response.create(model=MODEL, input=f"socket turn {turn}", store=False, previous_response_id=previous)
            response = next(event for event in connection if event.type in ("response.completed", "error")).response
            previous = response.id
    counts = sorted(len(fake.requests) - count for fake, count in zip(fakes, before, strict=True))
    assert counts == [0, 4] and response.previous_response_id is not None
    prompt = next(fake for fake in fakes if len(fake.requests) > before[fakes.index(fake)]).requests[-1]["prompt"]
    assert prompt.index("socket turn 0") < prompt.index("socket turn 3")


def test_stored_turns_live_at_the_fronts_and_a_box_gets_only_self_contained_requests(fleet):
    """A response created at one front is read and continued at the other (the fronts' shared store);
    the box got the earlier turn in the prompt and kept nothing itself (a fleet call finds nothing)."""
    fakes, (one, other) = fleet["fakes"], fleet["fronts"]
    first = openai_client(one.url, api_key=ADMIN).responses.create(model=MODEL, input="stored turn one")
    assert openai_client(other.url, api_key=ADMIN).responses.retrieve(first.id).output_text == " Hello, world!"
    second = openai_client(other.url, api_key=ADMIN).responses.create(
        model=MODEL, input="stored turn two", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id and second.store is True
    prompt = max((fake for fake in fakes if fake.requests), key=lambda fake: fake.requests[-1]["prompt"].count("stored turn"))
    assert prompt.requests[-1]["prompt"].index("stored turn one") < prompt.requests[-1]["prompt"].index("stored turn two")
    for box in fleet["boxes"]:
        direct = requests.get(f"{box.url}/v1/responses/{second.id}", headers={"X-Fleet-Secret": SECRET}, timeout=5)
        assert direct.status_code == 404
    client = openai_client(one.url, strict=False, api_key=ADMIN)  # the SDK's model of compact's output is narrower
    compacted = client.responses.compact(model=MODEL, previous_response_id=second.id)  # over the turns kept here
    said = [item.content[0].text for item in compacted.output if item.type == "message"]
    assert said == ["stored turn one", "stored turn two"] and compacted.output[-1].type == "compaction"
    counted = client.responses.input_tokens.count(model=MODEL, input="and three", previous_response_id=second.id)
    alone = client.responses.input_tokens.count(model=MODEL, input="and three")
    assert counted.input_tokens > alone.input_tokens


def test_the_cold_start_lock_names_one_box_to_every_front(fleet):
    from api_like_oai.fleet import lock
    from api_like_oai.fleet.membership import connect

    connection = connect(fleet["redis"].url)
    first, second = (box.url for box in fleet["boxes"])
    assert lock.claim(connection, "cold-model", first) == first
    assert lock.claim(connection, "cold-model", second) == first  # the later front goes where the first chose
    lock.release(connection, "cold-model", second)  # only the front that chose may take it back
    assert lock.holder(connection, "cold-model") == first
    lock.release(connection, "cold-model", first)
    assert lock.claim(connection, "cold-model", second) == second


def test_a_fleet_call_without_the_secret_is_refused(fleet):
    box = fleet["boxes"][0]
    assert requests.get(box.url + "/v1/fleet/status", timeout=5).status_code == 401
    wrong = requests.get(box.url + "/v1/fleet/status", headers={"X-Fleet-Secret": "guess"}, timeout=5)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    relayed_without = requests.post(
        box.url + "/v1/chat/completions",
        headers={"X-Fleet-Secret": SECRET[:-1]},
        json={"model": MODEL, "messages": HELLO},
        timeout=5,
    )
    assert relayed_without.status_code == 401
    elsewhere = requests.post(
        box.url + "/v1/chat/completions",
        headers={"X-Fleet-Secret": SECRET},
        json={"model": "not-on-this-box", "messages": HELLO},
        timeout=5,
    )
    assert elsewhere.status_code == 503  # a front's stale placement: refused, so that it tries the next box
    right = requests.get(box.url + "/v1/fleet/status", headers={"X-Fleet-Secret": SECRET}, timeout=5)
    assert right.status_code == 200 and len(right.json()["boxes"]) == 2


def test_a_box_without_keys_of_its_own_takes_only_its_fronts_calls(fleet):
    """Boxes closed by default: a direct call without the fleet secret is refused (no chat, no stored
    response, no models), while /health stays open for its member and the orchestrator's probes."""
    box = fleet["boxes"][0]
    direct = requests.post(box.url + "/v1/chat/completions", json={"model": MODEL, "messages": HELLO}, timeout=5)
    assert direct.status_code == 401 and "fronts" in direct.json()["error"]["message"]
    for path in ("/v1/models", "/v1/responses/resp_anything", "/metrics", "/api/tags"):
        assert requests.get(box.url + path, timeout=5).status_code == 401, path
    assert requests.get(box.url + "/health", timeout=5).status_code == 200
    through_the_fleet = requests.post(
        box.url + "/v1/chat/completions", headers={"X-Fleet-Secret": SECRET}, json={"model": MODEL, "messages": HELLO}, timeout=30
    )
    assert through_the_fleet.status_code == 200


def test_a_box_with_a_key_of_its_own_takes_direct_calls_that_bring_it(fleet, tmp_path, start_fake):
    key_file = tmp_path / "box-key"
    key_file.write_text("sk-the-box-own-key\n")
    common = ["--fleet", fleet["redis"].url, "--fleet-secret-file", str(fleet["secret_file"]), "--api-key-file", str(key_file)]
    box = _box(tmp_path, 9, start_fake().url, common)
    box.launch()
    try:
        box.ready()
        chat = {"model": MODEL, "messages": HELLO}
        assert requests.post(box.url + "/v1/chat/completions", json=chat, timeout=5).status_code == 401
        keyed = requests.post(
            box.url + "/v1/chat/completions", json=chat, headers={"Authorization": "Bearer sk-the-box-own-key"}, timeout=30
        )
        assert keyed.status_code == 200
    finally:
        box.stop()


def test_a_client_is_checked_at_the_front(fleet):
    with pytest.raises(openai.AuthenticationError):
        openai_client(fleet["fronts"][0].url, api_key="sk-wrong").chat.completions.create(model=MODEL, messages=HELLO)


def test_a_key_revoked_at_one_front_is_refused_at_every_front_within_2_seconds(fleet):
    first, second = fleet["fronts"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    key = requests.post(first.url + "/v1/internal/keys", json={"name": "fleet-user"}, headers=admin, timeout=10).json()["key"]
    client = openai_client(second.url, api_key=key)
    assert client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8).choices[0].message.content
    requests.delete(first.url + "/v1/internal/keys/fleet-user", headers=admin, timeout=10).raise_for_status()
    revoked_at = time.monotonic()
    for front in (first, second):
        while True:
            try:
                openai_client(front.url, api_key=key).chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)
            except openai.AuthenticationError:
                break
            assert time.monotonic() - revoked_at < 2


def test_a_stopped_box_leaves_the_fleet_and_comes_back_when_resumed(fleet):
    """A partition, as the issue simulates one: the box's server stopped with SIGSTOP (its fleet member
    goes on, and finds that the box does not answer at its address)."""
    front, stopped = fleet["fronts"][0], fleet["boxes"][1]
    server = server_processes(stopped.process)
    for pid in server:
        os.kill(pid, signal.SIGSTOP)
    try:
        eventually(lambda: _boxes_of(front) == [fleet["boxes"][0].url], "the stopped box out of the fleet", timeout=15)
        for n in range(4):  # placed on the box that answers, none waiting on the stopped one
            assert _chat(front, [{"role": "user", "content": f"partitioned {n}"}]).choices
    finally:
        for pid in server:
            os.kill(pid, signal.SIGCONT)
    eventually(lambda: len(_boxes_of(front)) == 2, "the resumed box back in the fleet", timeout=15)


def test_a_killed_box_leaves_the_fleet_and_no_request_is_refused(fleet):
    front, killed = fleet["fronts"][0], fleet["boxes"][1]
    slow = fleet["fakes"][1]
    slow.behaviour, slow.token_interval, slow.tokens = "slow_tokens", 0.2, tuple(f" t{n}" for n in range(50))
    on_killed = next(
        key
        for key in (f"session-{n}" for n in range(200))
        if rendezvous(key, [box.url for box in fleet["boxes"]])[0] == killed.url
    )
    running = _chat(front, stream=True, extra_body={"prompt_cache_key": on_killed})
    next(iter(running))
    its_processes = kill_instance(killed.process)
    with pytest.raises(openai.APIError, match="the box serving the request went away"):
        for _ in running:  # the stream already running there ends with an error event, not a hang
            pass
    deadline = time.monotonic() + 7  # past the heartbeat's expiry (5 s)
    answered = 0
    while time.monotonic() < deadline:
        assert _chat(fleet["fronts"][answered % 2], [{"role": "user", "content": f"after {answered}"}]).choices
        answered += 1
    assert _boxes_of(front) == [fleet["boxes"][0].url]
    passed_over = [f'api_like_oai_fleet_passed_over_total{{box="{killed.url}"}}' in _metrics(f) for f in fleet["fronts"]]
    assert any(passed_over)  # the killed box was tried, and passed over, before its record expired
    eventually(lambda: not still_running(its_processes), "the killed box's processes gone")


def test_redis_stopped_and_started_again_is_never_a_500(fleet):
    front = fleet["fronts"][0]
    redis_server = fleet["redis"]
    redis_server.stop()
    stopped_at = time.monotonic()
    statuses = []
    while time.monotonic() - stopped_at < 7:  # past the last known membership's expiry (5 s)
        try:
            _chat(front)
            statuses.append(200)
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            assert exc.status_code == 503 and "Redis" in exc.message
            assert exc.body["code"] == "fleet_unavailable"
    # placed by the last known membership first, then a 503 naming Redis: never a 500
    assert statuses[0] == 200 and statuses[-1] == 503 and set(statuses) == {200, 503}
    fleet["redis"] = RedisServer(port=redis_server.port).start()
    eventually(lambda: len(_boxes_of(front)) == 1, "the box back in the fleet")
    assert _chat(front).choices[0].message.content == " Hello, world!"


def test_a_box_restarted_on_its_address_is_no_500_through_a_front(fleet, tmp_path, start_fake):
    """The front keeps idle connections to a box; once the box restarted they are dead, and the next
    request through the front is retried on a fresh connection before anything reaches the client."""
    common = ["--fleet", fleet["redis"].url, "--fleet-secret-file", str(fleet["secret_file"])]
    fake, front = start_fake(), fleet["fronts"][0]
    box = _box(tmp_path, 10, fake.url, common, model="restarted")
    chat = {"model": "restarted", "messages": HELLO, "max_tokens": 8}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    box.launch()
    try:
        box.ready()
        eventually(lambda: _boxes_of(front, "restarted") == [box.url], "the box in the fleet")
        for _ in range(3):  # its connections pooled at the front
            assert requests.post(front.url + "/v1/chat/completions", json=chat, headers=admin, timeout=30).status_code == 200
        kill_instance(box.process)
        box = _box(tmp_path, 10, fake.url, common, model="restarted", port=box.port)
        box.launch()
        box.ready()
        eventually(lambda: _boxes_of(front, "restarted") == [box.url], "the restarted box in the fleet")
        for _ in range(3):
            answer = requests.post(front.url + "/v1/chat/completions", json=chat, headers=admin, timeout=30)
            assert answer.status_code == 200, answer.text[:300]
    finally:
        box.stop()


def test_a_box_stopped_gracefully_leaves_at_once_without_a_fatal_error(fleet):
    """SIGTERM: the member withdraws the box's record (no wait for its expiry) and ends quietly; its
    thread reading the box's pipe was Python's "Fatal Python error: _enter_buffered_busy" at exit."""
    front, box = fleet["fronts"][1], fleet["boxes"][0]
    eventually(lambda: _boxes_of(front) == [box.url], "the box in the fleet")
    box.stop()
    assert box.process.returncode is not None
    eventually(lambda: _boxes_of(front) == [], "the stopped box withdrawn", timeout=3)
    assert "Fatal Python error" not in box.log()


def test_a_model_whose_boxes_are_all_gone_is_a_503_to_retry_not_a_404(fleet):
    """Every box gone (the last one stopped above): the fleet still knows the model, so a client is told
    to retry (503, Retry-After), with no box address; a name the fleet never had is a 404 listing the
    models the caller may use."""
    front = fleet["fronts"][0]
    key = requests.post(
        front.url + "/v1/internal/keys",
        json={"name": "after-the-boxes"},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    ).json()["key"]
    for client_key in (ADMIN, key):
        with pytest.raises(openai.APIStatusError) as gone:
            openai_client(front.url, api_key=client_key).chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)
        assert gone.value.status_code == 503 and gone.value.response.headers["Retry-After"] == "5"
        assert MODEL in gone.value.message and "127.0.0." not in gone.value.message
    with pytest.raises(openai.NotFoundError) as unknown:
        openai_client(front.url, api_key=key).chat.completions.create(model="nowhere", messages=HELLO, max_tokens=8)
    assert "known models: " in unknown.value.message and MODEL in unknown.value.message.split("known models: ")[1]
    listed = {model.id for model in openai_client(front.url, api_key=key).models.list().data}
    assert MODEL in listed  # still the fleet's, on no box now
