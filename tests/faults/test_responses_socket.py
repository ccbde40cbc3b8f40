"""The Responses API's WebSocket mode against the fake upstream, driven by the official `openai` SDK's
`responses.connect()`: the events of a turn are the SSE stream's, `store: false` turns chain on the
socket, a bad event is an `error` event and the socket goes on, one response in flight, steering, keys
at the handshake, and a client that goes away ending its generation."""

from __future__ import annotations

import json
import signal

import openai
import pytest
import requests
import websockets.sync.client

from ..conftest import openai_client
from ..servers import eventually

PROXY_FLAGS = ("--chat-prompt-model", "chatml", "--api-key", "sk-socket")
KEY = {"Authorization": "Bearer sk-socket"}


@pytest.fixture
def client(proxy):
    return openai_client(proxy.url, api_key="sk-socket")


def socket_url(proxy) -> str:
    return proxy.url.replace("http://", "ws://") + "/v1/responses"


def events_of_one_response(connection) -> list:
    """The events the connection receives up to the response's last one."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the socket closed before the response ended")


def without_ids(event) -> dict:
    """An event as JSON without what differs between two responses (ids, times) or is the socket's own."""
    dumped = event.model_dump(exclude={"stream_id", "item_id"}, exclude_none=True)
    for holder in (dumped.get("response"), dumped.get("item")):
        for name in ("id", "created_at", "completed_at"):
            (holder or {}).pop(name, None)
    for item in (dumped.get("response") or {}).get("output", ()):
        item.pop("id", None)
    return dumped


def test_a_turn_streams_the_same_events_as_sse(client, replay):
    body = {"model": "fake", "input": "Say hello.", "store": False}
    sse = [without_ids(event) for event in client.responses.create(**body, stream=True)]
    with client.responses.connect() as connection:
        connection.response.create(**body)
        events = events_of_one_response(connection)
    assert [without_ids(event) for event in events] == sse
    assert events[-1].type == "response.completed" and events[-1].response.output_text == " Hello, world!"


def test_store_false_turns_chain_on_the_socket(client, replay):
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="My name is Ada.", store=False)
        first = events_of_one_response(connection)[-1].response
        replay.tokens = (" You", " are", " Ada", ".")
        connection.response.create(model="fake", input="What is my name?", store=False, previous_response_id=first.id)
        second = events_of_one_response(connection)[-1].response
        live = requests.get(str(client.base_url.join("internal/requests")), headers=KEY, timeout=10).json()["data"]
        assert live == []  # an idle socket is no request in flight (its handshake's record closed at the upgrade)
    assert second.status == "completed" and second.previous_response_id == first.id
    prompt = replay.requests[-1]["prompt"]
    assert prompt.index("My name is Ada.") < prompt.index("Hello, world!") < prompt.index("What is my name?")
    with pytest.raises(openai.NotFoundError):  # nothing stored: only the socket held it
        client.responses.retrieve(first.id)


def test_an_unknown_previous_response_is_an_error_event_and_the_socket_goes_on(client, replay):
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="Hi", store=False, previous_response_id="resp_nowhere")
        [error] = events_of_one_response(connection)
        assert error.type == "error" and error.status == 404 and error.error.param == "previous_response_id"
        connection.send_raw("{not json")
        [error] = events_of_one_response(connection)
        assert error.type == "error" and error.status == 400 and error.error.code == "invalid_json"
        connection.response.create(model="fake", input="Hi", store=False)
        assert events_of_one_response(connection)[-1].type == "response.completed"


def test_a_second_create_while_one_streams_is_an_error_event(client, replay):
    replay.behaviour, replay.token_interval = "slow_tokens", 0.2
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="Hi", store=False)
        assert connection.recv().type == "response.created"
        connection.response.create(model="fake", input="Again", store=False)
        events = events_of_one_response(connection)
        errors = [event for event in events if event.type == "error"]
        assert errors and errors[0].error.code == "response_in_progress" and errors[0].status == 400
        rest = events_of_one_response(connection) if events[-1].type == "error" else events
        assert rest[-1].type == "response.completed" and rest[-1].response.output_text == " Hello, world!"


def test_the_key_is_checked_at_the_handshake(proxy):
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        websockets.sync.client.connect(socket_url(proxy), additional_headers={"Authorization": "Bearer sk-wrong"})
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        websockets.sync.client.connect(socket_url(proxy), additional_headers={**KEY, "Origin": "https://elsewhere.example"})
    assert refused.value.response.status_code == 403


def test_a_plain_get_is_told_to_upgrade(proxy):
    answer = requests.get(proxy.url + "/v1/responses", headers=KEY, timeout=10)
    assert answer.status_code == 400 and "WebSocket" in answer.json()["error"]["message"]
    half = requests.get(proxy.url + "/v1/responses", headers={**KEY, "Upgrade": "websocket", "Connection": "Upgrade"}, timeout=10)
    assert half.status_code == 400 and "not a WebSocket handshake" in half.json()["error"]["message"]


def test_a_client_that_goes_away_ends_its_generation(proxy, replay):
    replay.behaviour, replay.token_interval = "slow_tokens", 0.3
    replay.tokens = tuple(f" w{n}" for n in range(40))
    with websockets.sync.client.connect(socket_url(proxy), additional_headers=KEY) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "fake", "input": "Hi", "store": False}))
        assert json.loads(socket.recv())["type"] == "response.created"
        eventually(lambda: replay.streaming == 1, "the generation to start")
    eventually(lambda: replay.streaming == 0, "the upstream stream to end with the socket")


@pytest.mark.parametrize("store", [False, True])
def test_steering_ends_the_response_steered_and_continues_with_the_input(client, replay, store):
    replay.behaviour, replay.token_interval = "slow_tokens", 0.2
    replay.tokens = tuple(f" w{n}" for n in range(30))
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="Count.", store=store)
        created = connection.recv()
        assert created.type == "response.created"
        while connection.recv().type != "response.output_text.delta":  # steered once it has begun to write
            pass  # (a steer that comes before any token ends it with nothing written: a race, not this test)
        connection.response.steer(previous_response_id=created.response.id, input="Stop counting, say done.")
        events = events_of_one_response(connection)
        replay.behaviour, replay.tokens = "ok", (" Done", ".")
        successor = events_of_one_response(connection)
    [accepted] = [event for event in events if event.type == "response.steer.accepted"]
    assert accepted.steer.previous_response_id == created.response.id and accepted.steer.id.startswith("steer_")
    steered = events[-1].response
    assert events[-1].type == "response.incomplete" and steered.incomplete_details.reason == "steered"
    assert steered.status == "incomplete" and 0 < len(steered.output_text.split()) < 30  # stopped early
    assert successor[0].type == "response.created" and successor[0].response.previous_response_id == steered.id
    assert successor[-1].type == "response.completed" and successor[-1].response.output_text == " Done."
    prompt = replay.requests[-1]["prompt"]
    assert prompt.index("Count.") < prompt.index(steered.output_text.strip()) < prompt.index("Stop counting, say done.")
    if store:  # kept as it ended
        kept = client.responses.retrieve(steered.id)
        assert kept.status == "incomplete" and kept.incomplete_details.reason == "steered"


def test_a_steer_for_another_response_fails(client, replay):
    replay.behaviour, replay.token_interval = "slow_tokens", 0.2
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="Hi", store=False)
        assert connection.recv().type == "response.created"
        connection.response.steer(previous_response_id="resp_other", input="x")
        connection.send_raw(json.dumps({"type": "response.steer", "previous_response_id": "resp_other", "input": []}))
        events = events_of_one_response(connection)
    failed = [event for event in events if event.type == "response.steer.failed"]
    assert [event.error.code for event in failed] == ["response_not_found", "response_not_found"]
    assert events[-1].type == "response.completed" and events[-1].response.output_text == " Hello, world!"


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_a_steer_during_a_function_call_waits_for_its_output(qwen_proxy, replay):
    """The call is written whole; the input stays queued (response.steer.pending) and comes before the
    output the client sends next."""
    arguments = json.dumps({"name": "get_weather", "arguments": {"city": "Zurich in Switzerland"}})
    replay.behaviour, replay.token_interval = "slow_tokens", 0.1
    replay.tokens = ["<tool_call>\n", *(arguments[n : n + 6] for n in range(0, len(arguments), 6)), "\n</tool_call>"]
    choice = {"type": "function", "name": "get_weather"}
    with openai_client(qwen_proxy.url).responses.connect() as connection:
        connection.response.create(model="fake", input="Weather?", tools=[WEATHER], tool_choice=choice, store=False)
        events = [connection.recv() for _ in range(3)]
        assert events[-1].type == "response.output_item.added" and events[-1].item.type == "function_call"
        connection.response.steer(previous_response_id=events[0].response.id, input="In Celsius, please.")
        events += events_of_one_response(connection)
        pending = connection.recv()
        [call] = events[-1].response.output
        replay.behaviour, replay.tokens = "ok", (" Sunny", ".")
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 20 C"}
        connection.response.create(model="fake", input=[output], previous_response_id=events[-1].response.id, store=False)
        answer = events_of_one_response(connection)[-1].response
    assert events[-1].type == "response.completed" and call.name == "get_weather"
    assert "response.steer.accepted" in [event.type for event in events]
    assert pending.type == "response.steer.pending" and pending.reason == "waiting_for_required_input"
    assert [(stub.type, stub.call_id) for stub in pending.required_input] == [("function_call_output", call.call_id)]
    prompt = replay.requests[-1]["prompt"]
    assert answer.output_text == " Sunny." and prompt.index("In Celsius, please.") < prompt.index("sunny, 20 C")


def test_a_warm_up_holds_its_input_without_asking_the_model(client, replay):
    asked = len(replay.requests)
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="My name is Ada.", store=False, generate=False)
        warm = events_of_one_response(connection)
        assert len(replay.requests) == asked  # the model was not asked
        connection.response.create(model="fake", input="And yours?", store=False, previous_response_id=warm[-1].response.id)
        answer = events_of_one_response(connection)[-1].response
    assert [event.type for event in warm] == ["response.created", "response.in_progress", "response.completed"]
    assert warm[-1].response.output == [] and warm[-1].response.usage.total_tokens == 0
    assert answer.output_text == " Hello, world!" and answer.previous_response_id == warm[-1].response.id
    with client.responses.connect() as connection:  # a warm-up of instructions alone, no input yet
        connection.response.create(model="fake", instructions="Be brief.", input=[], store=False, generate=False)
        assert events_of_one_response(connection)[-1].type == "response.completed"
    prompt = replay.requests[-1]["prompt"]
    assert prompt.index("My name is Ada.") < prompt.index("And yours?")


ADMIN = {"Authorization": "Bearer admin-socket-secret"}


@pytest.fixture(scope="module")
def keyed_proxy(fake, start_proxy, tmp_path_factory):
    store = tmp_path_factory.mktemp("socket-keys") / "store.sqlite3"
    flags = ("--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}", "--admin-key", "admin-socket-secret")
    return start_proxy("--llama-api", fake.url, *flags)


def test_a_managed_keys_limits_usage_and_revocation_hold_per_response(keyed_proxy, replay):
    created = requests.post(
        keyed_proxy.url + "/v1/internal/keys", json={"name": "socket-user", "rpm": 2}, headers=ADMIN, timeout=10
    )
    client = openai_client(keyed_proxy.url, api_key=created.json()["key"])
    with client.responses.connect() as connection:
        answers = []
        for _ in range(2):
            connection.response.create(model="fake", input="Hi", store=False)
            answers.append(events_of_one_response(connection)[-1].response)
        connection.response.create(model="fake", input="Hi", store=False)
        [limited] = events_of_one_response(connection)
        requests.delete(keyed_proxy.url + "/v1/internal/keys/socket-user", headers=ADMIN, timeout=10).raise_for_status()
        connection.response.create(model="fake", input="Hi", store=False)
        [revoked] = events_of_one_response(connection)
    assert [answer.status for answer in answers] == ["completed", "completed"]
    assert limited.type == "error" and limited.status == 429 and limited.error.code == "rate_limit_exceeded"
    assert revoked.type == "error" and revoked.status == 401
    [row] = [
        row for row in requests.get(keyed_proxy.url + "/v1/internal/usage?since=1d", headers=ADMIN, timeout=10).json()["data"]
    ]
    # per response, as over HTTP: the two answered and the one refused by its limit (the handshake is none)
    assert row["key"] == "socket-user" and row["requests"] == 3
    assert row["completion_tokens"] == sum(answer.usage.output_tokens for answer in answers)


def test_a_managed_key_holds_at_most_its_max_parallel_sockets_open(keyed_proxy, replay):
    created = requests.post(
        keyed_proxy.url + "/v1/internal/keys", json={"name": "socket-hoarder", "max_parallel": 2}, headers=ADMIN, timeout=10
    )
    key = {"Authorization": f"Bearer {created.json()['key']}"}
    first = websockets.sync.client.connect(socket_url(keyed_proxy), additional_headers=key)
    second = websockets.sync.client.connect(socket_url(keyed_proxy), additional_headers=key)
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        websockets.sync.client.connect(socket_url(keyed_proxy), additional_headers=key)
    assert refused.value.response.status_code == 429
    assert json.loads(refused.value.response.body)["error"]["code"] == "too_many_sockets"
    # another key's sockets are its own, and the admin key's are not bounded
    others = [websockets.sync.client.connect(socket_url(keyed_proxy), additional_headers=ADMIN) for _ in range(3)]
    first.close()
    # a socket closed makes room (once the proxy has seen it close)
    third = []
    eventually(lambda: third.append(opened(keyed_proxy, key)) or third[-1] is not None, "room again")
    third[-1].send(json.dumps({"type": "response.create", "model": "fake", "input": "Hi", "store": False}))
    assert json.loads(until_completed(third[-1])[-1])["type"] == "response.completed"
    for socket in (second, third[-1], *others):
        socket.close()


def test_a_keys_sockets_are_counted_in_every_worker(fake, start_proxy, tmp_path):
    store = tmp_path / "store.sqlite3"
    flags = ("--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}", "--admin-key", "admin-socket-secret")
    proxy = start_proxy("--llama-api", fake.url, *flags, "--workers", "2")
    created = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "one-socket", "max_parallel": 1}, headers=ADMIN, timeout=10
    )
    key = {"Authorization": f"Bearer {created.json()['key']}"}
    with websockets.sync.client.connect(socket_url(proxy), additional_headers=key):
        # each handshake lands in either worker: the one without the open socket asks the other
        assert [opened(proxy, key) for _ in range(6)] == [None] * 6


def opened(proxy, key: dict):
    """A new socket with `key`, or None if the handshake is refused for the key's open sockets."""
    try:
        return websockets.sync.client.connect(socket_url(proxy), additional_headers=key)
    except websockets.exceptions.InvalidStatus as refused:
        assert refused.response.status_code == 429
        return None


def until_completed(socket) -> list[str]:
    messages = [socket.recv(timeout=30)]
    while json.loads(messages[-1])["type"] not in ("response.completed", "response.failed", "error"):
        messages.append(socket.recv(timeout=30))
    return messages


def test_sigterm_closes_idle_sockets_and_lets_a_response_in_flight_finish(start_fake, start_proxy):
    slow = start_fake(behaviour="slow_tokens", token_interval=0.2, tokens=tuple(f" t{n}" for n in range(8)))
    proxy = start_proxy("--llama-api", slow.url, "--chat-prompt-model", "chatml", "--grace-period", "30")
    idle = websockets.sync.client.connect(socket_url(proxy))
    busy = websockets.sync.client.connect(socket_url(proxy))
    busy.send(json.dumps({"type": "response.create", "model": "fake", "input": "Hi", "store": False}))
    assert json.loads(busy.recv(timeout=10))["type"] == "response.created"
    proxy.process.send_signal(signal.SIGTERM)
    with pytest.raises(websockets.exceptions.ConnectionClosedOK) as closed:
        idle.recv(timeout=20)
    assert closed.value.rcvd.code == 1001
    events = []
    with pytest.raises(websockets.exceptions.ConnectionClosedOK) as closed:
        while True:
            events.append(json.loads(busy.recv(timeout=20))["type"])
    assert events[-1] == "response.completed" and closed.value.rcvd.code == 1001  # finished, then closed
    assert proxy.process.wait(timeout=20) == 0  # not held for the 30 s grace period
