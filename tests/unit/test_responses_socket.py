"""A Responses WebSocket's session (services/responses_socket.py) with a scripted socket and turns: what
it sends, what it holds for previous_response_id, and when it closes. The transport and the SDK are
tests/faults/test_responses_socket.py's."""

from __future__ import annotations

import json

import pytest

from api_like_oai.compact_json import json_bytes
from api_like_oai.services import responses_socket
from api_like_oai.services.responses_socket import Held, Limits, Session, SocketClosed, sse_events


class ScriptedSocket:
    """Gives its messages in order between turns (None: a receive that timed out), then reports the client
    gone; nothing comes while a turn streams."""

    def __init__(self, *messages):
        self.messages = list(messages)
        self.sent: list[dict] = []
        self.closed: tuple[int, str] | None = None

    def receive(self, timeout):
        if timeout == 0:
            return None
        if not self.messages:
            raise SocketClosed()
        message = self.messages.pop(0)
        return json.dumps(message) if isinstance(message, dict) else message

    def send(self, text):
        self.sent.append(json.loads(text))

    def close(self, code, reason):
        self.closed = (code, reason)


def frame(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json_bytes({"type": name, **payload}) + b"\n\n"


class Answer:
    """A turn's answer: a response with one message saying `text`, in two chunks cut mid-frame."""

    def __init__(self, body: dict, response_id: str, text: str = "Hi"):
        self.body, self.status, self.closed = body, 200, False
        response = {"id": response_id, "status": "in_progress", "output": []}
        done = {**response, "status": "completed", "output": [{"type": "message", "role": "assistant", "content": text}]}
        raw = (
            b": keep-alive\n\n"
            + frame("response.created", {"response": response})
            + frame("response.completed", {"response": done})
        )
        self.parts = [raw[:30], raw[30:]]

    def chunks(self):
        return iter(self.parts)

    def stop(self, finish_reason):
        return False

    def close(self):
        self.closed = True


def run(socket: ScriptedSocket, limits: Limits | None = None) -> list[dict]:
    """Serve `socket`; the bodies of the turns it ran."""
    bodies = []

    def run_turn(raw: bytes):
        bodies.append(json.loads(raw))
        return Answer(bodies[-1], f"resp_{len(bodies)}")

    responses_socket.serve(socket, run_turn, lambda: False, limits)
    return bodies


def test_a_store_false_turn_gets_the_held_chain_and_says_its_previous_response_id():
    socket = ScriptedSocket(
        {"type": "response.create", "model": "m", "input": "one", "store": False},
        {"type": "response.create", "model": "m", "input": "two", "store": False, "previous_response_id": "resp_1"},
    )
    first, second = run(socket)
    assert first == {"model": "m", "input": first["input"], "store": False, "stream": True}
    assert "previous_response_id" not in second
    # every turn opens with the same item, id included: a fleet's front places them on one box by it
    assert second["input"][0] == first["input"][0] and first["input"][0]["id"].startswith("msg_")
    assert [(item["role"], item["content"][0]["text"]) for item in second["input"]] == [
        ("user", "one"),
        ("assistant", "Hi"),
        ("user", "two"),
    ]
    assert [event["type"] for event in socket.sent] == ["response.created", "response.completed"] * 2
    assert socket.sent[-1]["response"]["previous_response_id"] == "resp_1"
    assert "previous_response_id" not in socket.sent[1]["response"]  # the first turn continued nothing


def test_a_turns_bare_events_and_sse_frames_are_read_alike():
    """The route asks a turn for bare events (each its JSON alone, no SSE framing to cut again); a fleet's
    front relays its box's SSE frames, keep-alives among them."""
    bare = [json_bytes({"type": "response.created", "n": 1}), json_bytes({"n": 2, "type": "response.output_text.delta"})]
    relayed = frame("response.completed", {"n": 3}) + b": keep-alive\n\n"
    events = list(responses_socket.turn_events(iter([*bare, b"", relayed[:9], relayed[9:]])))
    assert [(name, json.loads(data)["n"]) for name, data in events] == [
        ("response.created", 1),
        ("response.output_text.delta", 2),
        ("response.completed", 3),
    ]
    assert events[0][1] is bare[0]  # sent on as it came


class EagerClient(ScriptedSocket):
    """A client whose next response.create has reached the socket by the time the last event is sent (a
    threaded worker's reader takes it at once): it is there on the receive(0) after that event."""

    def receive(self, timeout):
        if timeout == 0:
            ended = self.sent and self.sent[-1]["type"] == "response.completed"
            return json.dumps(self.messages.pop(0)) if ended and self.messages else None
        return super().receive(timeout)


def test_a_create_sent_once_the_last_event_arrived_is_the_next_turn_not_one_in_flight():
    socket = EagerClient(
        {"type": "response.create", "model": "m", "input": "one", "store": False},
        {"type": "response.create", "model": "m", "input": "two", "store": False, "previous_response_id": "resp_1"},
    )
    assert len(run(socket)) == 2
    assert [event["type"] for event in socket.sent] == ["response.created", "response.completed"] * 2


def test_an_id_the_socket_does_not_hold_is_left_to_the_store():
    socket = ScriptedSocket({"type": "response.create", "model": "m", "input": "x", "previous_response_id": "resp_stored"})
    [body] = run(socket)
    assert body["previous_response_id"] == "resp_stored"
    assert [(item["role"], item["content"]) for item in body["input"]] == [("user", [{"type": "input_text", "text": "x"}])]


@pytest.mark.parametrize(
    ("message", "code"),
    [("{nope", "invalid_json"), ("[1]", "invalid_event"), ({"type": "session.update"}, "unknown_event_type")],
)
def test_a_bad_event_is_an_error_event_and_the_socket_goes_on(message, code):
    socket = ScriptedSocket(message, {"type": "response.create", "model": "m", "input": "x"})
    assert len(run(socket)) == 1
    assert socket.sent[0] == socket.sent[0] | {"type": "error", "status": 400} and socket.sent[0]["error"]["code"] == code
    assert socket.sent[-1]["type"] == "response.completed"


def test_a_steer_with_nothing_in_flight_fails():
    socket = ScriptedSocket({"type": "response.steer", "previous_response_id": "resp_1", "input": "also this"})
    run(socket)
    [failed] = socket.sent
    assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "response_not_active"
    assert failed["steer"] == {"input": "also this", "previous_response_id": "resp_1"}


def test_an_idle_socket_is_closed():
    socket = ScriptedSocket(None, None, None, None)
    run(socket, Limits(idle_seconds=2))
    assert socket.closed == (1000, "idle for 2 seconds") and socket.messages == [None, None]


def test_a_socket_is_closed_when_the_worker_shuts_down():
    socket = ScriptedSocket({"type": "response.create", "model": "m", "input": "x"})
    Session(socket, lambda raw: Answer(json.loads(raw), "resp_1"), Limits()).serve(lambda: True)
    assert socket.closed == (1001, "the server is shutting down") and socket.sent == []


def test_held_chains_are_bounded_in_count_and_bytes():
    held = Held(Limits(held_responses=2, held_bytes=100))
    held.hold("a", None, [{"text": "x" * 10}])
    held.hold("b", "a", [{"text": "y" * 10}])
    assert held.chain("b") == [{"text": "x" * 10}, {"text": "y" * 10}] and held.chain("b")[0] is held.chain("a")[0]
    held.hold("c", "b", [{"text": "z" * 90}])  # past 100 bytes with its chain: not held
    held.hold("d", None, [{"text": "w"}])
    assert held.chain("c") is None and held.chain("a") is None and held.chain("d") == [{"text": "w"}]


def test_sse_events_are_cut_at_blank_lines_across_chunks():
    raw = frame("response.created", {"n": 1}) + b": keep-alive\n\n" + b'data: {"type":"error","n":2}\n\n'
    events = list(sse_events(iter([raw[:7], raw[7:40], raw[40:]])))
    assert [(name, json.loads(data)["n"]) for name, data in events] == [("response.created", 1), ("error", 2)]


def test_a_chunk_of_one_named_event_is_read_as_the_general_cut_reads_it():
    one, two = frame("response.output_text.delta", {"n": 1}), frame("response.completed", {"n": 2})
    events = list(sse_events(iter([one, one + two, two[:5], two[5:]])))
    assert [(name, json.loads(data)["n"]) for name, data in events] == [
        ("response.output_text.delta", 1),
        ("response.output_text.delta", 1),
        ("response.completed", 2),
        ("response.completed", 2),
    ]
    assert events[0][1] == json_bytes({"type": "response.output_text.delta", "n": 1})


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536])
def test_an_event_is_written_as_the_frame_wsproto_would_write(size):
    """The route frames a turn's events itself (not through wsproto: its per-event cost was most of a
    socket turn's extra CPU, benchmarks/socket_turns.py); the bytes must be what wsproto would send."""
    from wsproto.frame_protocol import FrameProtocol

    from api_like_oai.routes.responses_socket import text_frame

    payload = ("é" * (size // 2) + "x" * (size % 2)).encode()
    assert text_frame(payload) == FrameProtocol(client=False, extensions=[]).send_data(payload.decode(), fin=True)


@pytest.mark.parametrize(
    "steer_input",
    [[], "", [{"role": "assistant", "content": "x"}], [{"type": "function_call_output", "call_id": "c", "output": "o"}], 5],
)
def test_steering_takes_only_user_text_and_messages(steer_input):
    with pytest.raises(responses_socket.InvalidRequest):
        responses_socket.steering_items(steer_input)


def test_steering_input_becomes_items():
    [item] = responses_socket.steering_items([{"role": "user", "content": "also this"}])
    assert item["type"] == "message" and item["role"] == "user" and item["id"].startswith("msg_")
    assert responses_socket.steering_items("hi")[0]["content"] == [{"type": "input_text", "text": "hi"}]


def test_a_stream_id_is_echoed_on_every_event_of_its_response():
    socket = ScriptedSocket({"type": "response.create", "model": "m", "input": "x", "stream_id": "lane-1"})
    [body] = run(socket)
    assert "stream_id" not in body  # not a field of POST /v1/responses
    assert [event.get("stream_id") for event in socket.sent] == ["lane-1", "lane-1"]


def test_held_chains_together_stay_within_twice_a_chains_bound():
    held = Held(Limits(held_responses=16, held_bytes=100))
    for n in range(5):  # a client that forks every turn: five chains of ~60 bytes, none continuing another
        held.hold(f"r{n}", None, [{"text": "x" * 40}])
    assert held.chain("r4") is not None and held.chain("r3") is not None and held.chain("r0") is None
    assert sum(len(json.dumps(held.chain(f"r{n}"), separators=(",", ":"))) for n in range(5) if held.chain(f"r{n}")) <= 200


def test_a_managed_keys_sockets_are_bounded_by_its_max_parallel_or_a_ceiling():
    from api_like_oai.access.keys import KeyRecord
    from api_like_oai.services.inflight import OpenSockets

    assert responses_socket.sockets_allowed(None) is None  # the operator's keys, or no keys at all
    assert responses_socket.sockets_allowed(KeyRecord("a", "d", max_parallel=3)) == 3
    assert responses_socket.sockets_allowed(KeyRecord("a", "d")) == responses_socket.SOCKETS_PER_KEY
    sockets = OpenSockets()
    assert sockets.opened("a", 2) and not sockets.opened("a", 2, elsewhere=1)  # one here, one in another worker
    assert sockets.opened("b", 2) and sockets.of("a") == 1
    sockets.closed("a")
    assert sockets.of("a") == 0 and sockets.opened("a", 2, elsewhere=1)
