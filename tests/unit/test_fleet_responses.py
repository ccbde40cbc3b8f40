"""The Responses API at a fleet front (services/fleet_responses.py), against a real SQLite store and a
fake box (`send`: what a front relays, answered as a box with store false answers, by the real
Responses shape): the box gets only self-contained requests (never previous_response_id, conversation
or store), the front keeps every turn, a stream is passed on with its lifecycle events rewritten and
kept as it goes (in_progress at response.created, as answered at its end, incomplete when dropped,
failed when the box goes away)."""

from __future__ import annotations

import orjson
import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.compact_json import json_bytes
from api_like_oai.dialects.responses import CompactRequest, ResponsesRequest
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.errors import StoreUnavailable
from api_like_oai.services import fleet_responses
from api_like_oai.services.fleet_relay import Relayed
from api_like_oai.services.scope import Scope
from api_like_oai.store.sqlite import SQLiteStore

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}
BOX_GONE = b'data: {"error":{"message":"the box serving the request went away","type":"server_error"}}\n\n'


class FakeBox:
    """A box as a front's `send` reaches it: each body kept, answered by the Responses shape (no keeper:
    a box keeps nothing), whole or as its event stream's frames (one per piece, or `pieces` to cut them)."""

    def __init__(self, text: str = "Hello there", status: int = 200):
        self.bodies: list[dict] = []
        self.text, self.status = text, status
        self.cut: list[bytes] | None = None  # a stream's pieces as the box is to send them, when set
        self.closed = 0

    def __call__(self, body: dict) -> Relayed:
        self.bodies.append(orjson.loads(orjson.dumps(body)))  # as sent over the wire
        if self.status != 200:
            error = json_bytes({"error": {"message": "refused", "type": "invalid_request_error"}})
            return Relayed(self.status, {"content-type": "application/json"}, error, self.close)
        shape = ResponsesShape("m", ResponsesRequest.model_validate(body))
        if not body.get("stream"):
            shape.blocks.add(GenerationEvent(text=self.text))
            shape.blocks.close()
            answer = shape.response([{"blocks": shape.blocks.blocks, "finish_reason": "stop"}], USAGE)
            return Relayed(200, {"content-type": "application/json"}, json_bytes(answer), self.close)
        return Relayed(200, {"content-type": "text/event-stream"}, iter(self.cut or self.frames(shape)), self.close)

    def frames(self, shape: ResponsesShape) -> list[bytes]:
        events = [*shape.openings(0)]
        for word in self.text.split(" "):
            events += shape.chunks(GenerationEvent(text=word + " "))
        events += shape.closings(USAGE)
        return [shape.frame(event) for event in events]

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def scope(tmp_path):
    return Scope(SQLiteStore(tmp_path / "front.sqlite3", 3600, 1 << 20), "sk-one")


def create(scope: Scope, box: FakeBox, **body) -> Relayed:
    body = {"model": "m", **body}
    return fleet_responses.create(ResponsesRequest.model_validate(body), body, scope, None, None, box)


def events(relayed: Relayed) -> list[dict]:
    frames = b"".join(relayed.body).split(b"\n\n")
    return [orjson.loads(frame.split(b"data: ", 1)[1]) for frame in frames if frame]


def test_a_chain_of_turns_is_kept_at_the_front_and_each_box_request_is_self_contained(scope):
    box = FakeBox()
    first = orjson.loads(create(scope, box, input="Hi").body)
    assert first["store"] is True and first["output"][0]["content"][0]["text"] == "Hello there"
    assert box.bodies[0] == {"model": "m", "input": "Hi", "store": False}
    second = orjson.loads(create(scope, box, input="And then?", previous_response_id=first["id"]).body)
    sent = box.bodies[1]
    assert "previous_response_id" not in sent and sent["store"] is False
    assert [(item["role"], item["content"][0]["text"]) for item in sent["input"]] == [
        ("user", "Hi"),
        ("assistant", "Hello there"),
        ("user", "And then?"),
    ]
    assert second["previous_response_id"] == first["id"] and second["store"] is True
    assert scope.store.get(second["id"], scope.owner) == second
    assert len(scope.store.page(second["id"], scope.owner).items) == 3  # its input items, the turns it continued first


def test_a_conversation_is_resolved_and_extended_at_the_front(scope):
    scope.store.put("conv_1", scope.owner, {"id": "conv_1", "object": "conversation"}, [])
    box = FakeBox()
    create(scope, box, input="Remember 7.", conversation="conv_1")
    answer = orjson.loads(create(scope, box, input="Which number?", conversation={"id": "conv_1"}).body)
    assert all("conversation" not in body for body in box.bodies)
    assert [item["content"][0]["text"] for item in box.bodies[1]["input"]] == ["Remember 7.", "Hello there", "Which number?"]
    assert answer["conversation"] == {"id": "conv_1"}
    assert len(scope.store.page("conv_1", scope.owner).items) == 4


def test_a_stream_is_passed_on_rewritten_and_kept_in_progress_then_as_answered(scope):
    box = FakeBox()
    first = orjson.loads(create(scope, box, input="Hi").body)
    relayed = create(scope, box, input="More", previous_response_id=first["id"], stream=True)
    pieces = iter(relayed.body)
    created = orjson.loads(next(pieces).split(b"data: ", 1)[1])
    assert created["type"] == "response.created" and created["response"]["previous_response_id"] == first["id"]
    kept = scope.store.get(created["response"]["id"], scope.owner)
    assert kept["status"] == "in_progress" and kept["store"] is True  # kept before the client saw it
    rest = [orjson.loads(piece.split(b"data: ", 1)[1]) for piece in pieces]
    assert [event["sequence_number"] for event in [created, *rest]] == list(range(len(rest) + 1))
    completed = rest[-1]
    assert completed["type"] == "response.completed" and completed["response"]["store"] is True
    assert scope.store.get(completed["response"]["id"], scope.owner) == completed["response"]
    assert box.bodies[1]["stream"] is True and "previous_response_id" not in box.bodies[1]


def test_frames_cut_anywhere_by_the_box_reach_the_client_whole_and_rewritten(scope):
    box = FakeBox()
    whole = b"".join(box.frames(ResponsesShape("m", ResponsesRequest(model="m", input="Hi", stream=True))))
    box.cut = [whole[n : n + 37] for n in range(0, len(whole), 37)]
    answer = events(create(scope, box, input="Hi", stream=True))
    assert answer[-1]["type"] == "response.completed" and answer[-1]["response"]["store"] is True
    assert scope.store.get(answer[-1]["response"]["id"], scope.owner)["status"] == "completed"


def test_a_dropped_stream_is_kept_incomplete_and_a_box_gone_midway_as_failed(scope):
    box = FakeBox(text="one two three")
    relayed = create(scope, box, input="Hi", stream=True)
    pieces = iter(relayed.body)
    created = orjson.loads(next(pieces).split(b"data: ", 1)[1])["response"]
    while b"output_item.done" not in next(pieces):
        pass
    pieces.close()  # the client went away
    dropped = scope.store.get(created["id"], scope.owner)
    assert dropped["status"] == "incomplete" and dropped["output"][0]["content"][0]["text"] == "one two three "

    frames = box.frames(ResponsesShape("m", ResponsesRequest(model="m", input="Hi", stream=True)))
    box.cut = [*frames[:4], BOX_GONE]
    answer = events(create(scope, box, input="Hi", stream=True))
    assert "error" in answer[-1]
    assert scope.store.get(answer[0]["response"]["id"], scope.owner)["status"] == "failed"


def test_a_store_that_refuses_the_in_progress_copy_is_an_http_error_before_the_stream(scope, monkeypatch):
    def put(*_args, **_kwargs):
        raise StoreUnavailable("the store is down")

    monkeypatch.setattr(scope.store, "put", put)
    box = FakeBox()
    with pytest.raises(StoreUnavailable):
        create(scope, box, input="Hi", stream=True)
    assert box.closed == 1  # the box's answer let go


def test_a_store_that_refuses_it_after_a_keep_alive_ends_the_stream_failed(scope, monkeypatch):
    """A box waiting on its model sends keep-alives first: the answer has started when response.created
    comes, so a refused in_progress copy ends the stream with response.failed, as a refused end does."""
    box = FakeBox()
    frames = box.frames(ResponsesShape("m", ResponsesRequest(model="m", input="Hi", stream=True)))
    box.cut = [b": keep-alive\n\n", *frames]

    def put(*_args, **_kwargs):
        raise StoreUnavailable("the store is down")

    monkeypatch.setattr(scope.store, "put", put)
    relayed = create(scope, box, input="Hi", stream=True)
    pieces = list(relayed.body)
    assert pieces[0] == b": keep-alive\n\n" and len(pieces) == 2
    failed = orjson.loads(pieces[1].split(b"data: ", 1)[1])
    assert failed["type"] == "response.failed" and failed["sequence_number"] == 0
    assert failed["response"]["error"]["message"] == "the store is down" and failed["response"]["store"] is True


def test_a_boxs_error_is_passed_on_and_nothing_is_kept(scope):
    box = FakeBox(status=400)
    relayed = create(scope, box, input="Hi")
    assert relayed.status == 400 and orjson.loads(relayed.body)["error"]["message"] == "refused"
    assert scope.store.stored_bytes(scope.owner) == 0


def test_input_tokens_and_compaction_get_the_turns_they_continue(scope):
    box = FakeBox()
    first = orjson.loads(create(scope, box, input="Hi").body)
    body = {"model": "m", "input": "Next", "previous_response_id": first["id"]}
    fleet_responses.input_tokens(ResponsesRequest.model_validate(body), body, scope, None, None, box)
    fleet_responses.compact(CompactRequest.model_validate(body), body, scope, None, None, box)
    counted, compacted = box.bodies[1:]
    assert "previous_response_id" not in counted and len(counted["input"]) == 3
    assert "previous_response_id" not in compacted and "store" not in compacted and len(compacted["input"]) == 3


def test_another_key_cannot_continue_a_turn_kept_at_the_front(scope, tmp_path):
    first = orjson.loads(create(scope, FakeBox(), input="Hi").body)
    other = Scope(scope.store, "sk-two")
    with pytest.raises(Exception, match="not found"):
        create(other, FakeBox(), input="And?", previous_response_id=first["id"])
