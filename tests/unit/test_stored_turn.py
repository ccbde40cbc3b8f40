"""A stored Responses turn loaded whole (`Turn.load`: one read of what it continues, then it never
changes) and written by one writer (`TurnWriter`, the Responses shape's keeper), against a real SQLite
store: a plain answer is one write; a stream's in_progress copy is updated as answered; a store that
fails at the end turns the last event into response.failed; a dropped stream is kept as incomplete."""

from __future__ import annotations

import dataclasses

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.errors import UpstreamUnavailable
from api_like_oai.services.scope import Scope
from api_like_oai.services.stored_responses import Turn, kept
from api_like_oai.store.sqlite import SQLiteStore

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}


@pytest.fixture
def scope(tmp_path):
    return Scope(SQLiteStore(tmp_path / "store.sqlite3", 3600, 1 << 20), "sk-one")


def answered(shape, text: str = "Hello") -> dict:
    return shape.response([{"blocks": _blocks(shape, text), "finish_reason": "stop"}], USAGE)


def _blocks(shape, text: str):
    shape.blocks.add(GenerationEvent(text=text))
    shape.blocks.close()
    return shape.blocks.blocks


def test_a_continued_turn_is_loaded_whole_and_never_changes(scope):
    first, _ = Turn.load(ResponsesRequest(input="Hi"), scope).shape("m")
    first_answer = answered(first)
    turn = Turn.load(ResponsesRequest(input="And then?", previous_response_id=first_answer["id"]), scope)
    assert [item["role"] for item in turn.history] == ["user", "assistant"]
    assert [item["role"] for item in turn.input] == ["user"]
    assert [message.role for message in turn.translation().chat.messages] == ["user", "assistant", "user"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.history = []


def test_a_plain_answer_is_kept_once_with_what_it_continues(scope):
    shape, writer = Turn.load(ResponsesRequest(input="Hi"), scope).shape("m")
    answer = answered(shape)
    assert answer["store"] is True and len(writer.turn.scope.store.get(answer["id"], scope.owner)["output"]) == 1
    assert writer.kept and len(shape.hex) == 32


def test_a_stream_is_kept_in_progress_then_as_answered(scope):
    shape, writer = Turn.load(ResponsesRequest(input="Hi", stream=True), scope).shape("m")
    writer.begin(shape.in_progress())
    assert scope.store.get(shape.id, scope.owner)["status"] == "in_progress"
    _blocks(shape, "Hello")
    assert shape.closings(USAGE)[-1]["type"] == "response.completed"
    assert scope.store.get(shape.id, scope.owner)["status"] == "completed"


def test_a_store_that_fails_at_the_end_fails_the_stream_and_a_dropped_one_is_kept_incomplete(scope, monkeypatch):
    shape, writer = Turn.load(ResponsesRequest(input="Hi", stream=True), scope).shape("m")
    writer.begin(shape.in_progress())

    def update(*_args):
        raise UpstreamUnavailable("the store is down")

    with monkeypatch.context() as patched:
        patched.setattr(scope.store, "update", update)
        _blocks(shape, "Hello")
        last = shape.closings(USAGE)[-1]
    assert last["type"] == "response.failed" and last["response"]["error"]["message"] == "the store is down"

    shape, writer = Turn.load(ResponsesRequest(input="Hi", stream=True), scope).shape("m")
    writer.begin(shape.in_progress())
    shape.blocks.add(GenerationEvent(text="Hel"))
    stream = kept(iter([b"one", b"two"]), shape, writer)
    assert next(stream) == b"one"
    stream.close()  # the client went away
    stored = scope.store.get(shape.id, scope.owner)
    assert stored["status"] == "incomplete" and stored["output"][0]["content"][0]["text"] == "Hel"


def test_a_turn_that_stores_nothing_has_no_writer(scope):
    shape, writer = Turn.load(ResponsesRequest(input="Hi", store=False), scope).shape("m")
    assert writer is None and shape.keeper is None and answered(shape)["store"] is False
