"""Stored state at a fleet's fronts (issue 49): two boxes (127.0.0.2, 127.0.0.3), each with a store of its
own (two SQLite files, shared with nothing) and SmolLM2 loaded; two fronts (127.0.0.4, 127.0.0.5) on the
fleet's Redis as their store, with managed keys; driven by the OpenAI client. A response, a chain of
turns, a conversation, a stream: made at one front, read and continued at the other, served by either
box, and kept by neither box. The processes are shared by the module's tests."""

from __future__ import annotations

import openai
import pytest
import requests

from api_like_oai.backends.routing import rendezvous

from ..conftest import openai_client
from ..servers import FLEET_MODEL as MODEL
from ..servers import Proxy, eventually, fleet_box, fleet_redis, launch_all, model_boxes, stop
from .test_batches import finished, results, upload

SECRET = "a-fleet-secret-for-the-state-tests-0123456789"
ADMIN = "sk-admin-of-the-state-fleet"
SHORT = {"max_output_tokens": 16, "temperature": 0}


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-state")
    redis_server, common = fleet_redis(directory, SECRET)
    boxes = [
        fleet_box(directory, n, common, provisioned, "--store", f"sqlite://{directory / f'box-{n}.sqlite3'}") for n in range(2)
    ]
    fronts = [Proxy([*common, "--admin-key", ADMIN, "--store", redis_server.url], host=f"127.0.0.{4 + n}") for n in range(2)]
    try:
        launch_all(boxes + fronts)
        eventually(lambda: all(len(model_boxes(front, key=ADMIN)) == 2 for front in fronts), "both boxes in the fleet")
        for box in boxes:  # loaded on both: a turn goes to the box its prompt_cache_key ranks first
            secret = {"X-Fleet-Secret": SECRET}
            requests.post(box.url + "/models/load", json={"model": MODEL}, headers=secret, timeout=120).raise_for_status()
        eventually(lambda: {box["state"] for box in model_boxes(fronts[0], key=ADMIN).values()} == {"loaded"}, "loaded twice")
        yield {"boxes": boxes, "fronts": fronts}
    finally:
        stop(*(proxy.process for proxy in boxes + fronts if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


def _client(front: Proxy, key: str = ADMIN) -> openai.OpenAI:
    return openai_client(front.url, api_key=key)


def _session_on(box: Proxy, boxes: list[Proxy]) -> str:
    """A prompt_cache_key whose turns every front places on `box` (the prefix route's rendezvous hash)."""
    addresses = [each.url for each in boxes]
    return next(key for key in (f"session-{n}" for n in range(200)) if rendezvous(key, addresses)[0] == box.url)


def _kept_by_a_box(box: Proxy, response_id: str) -> bool:
    answer = requests.get(f"{box.url}/v1/responses/{response_id}", headers={"X-Fleet-Secret": SECRET}, timeout=10)
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


def test_a_chain_across_both_fronts_and_both_boxes_lives_at_the_fronts(fleet):
    (one, other), boxes = fleet["fronts"], fleet["boxes"]
    on_first, on_second = (_session_on(box, boxes) for box in boxes)
    raw = _client(one).responses.with_raw_response.create(
        model=MODEL, input="My name is Ada.", prompt_cache_key=on_first, **SHORT
    )
    first = raw.parse()
    assert raw.headers["X-Fleet-Box"] == boxes[0].url
    assert _client(other).responses.retrieve(first.id).output_text == first.output_text  # right after, at the other front
    raw = _client(other).responses.with_raw_response.create(
        model=MODEL, input="Say it again.", previous_response_id=first.id, prompt_cache_key=on_second, **SHORT
    )
    second = raw.parse()  # served by the other box, which never saw the first turn: the front sent it
    assert raw.headers["X-Fleet-Box"] == boxes[1].url and second.previous_response_id == first.id
    third = _client(one).responses.create(
        model=MODEL, input="Thanks.", previous_response_id=second.id, prompt_cache_key=on_first, **SHORT
    )
    assert _client(other).responses.retrieve(third.id).previous_response_id == second.id
    items = _client(other).responses.input_items.list(third.id, order="asc").data
    texts = [item.content[0].text for item in items]
    assert texts == ["My name is Ada.", first.output_text, "Say it again.", second.output_text, "Thanks."]
    assert not any(_kept_by_a_box(box, response.id) for box in boxes for response in (first, second, third))
    assert _client(one).responses.delete(third.id) is None
    with pytest.raises(openai.NotFoundError):
        _client(other).responses.retrieve(third.id)


def test_a_conversation_made_at_one_front_goes_on_at_the_other(fleet):
    one, other = fleet["fronts"]
    conversation = _client(one).conversations.create(items=[{"type": "message", "role": "user", "content": "Remember 7."}])
    answer = _client(other).responses.create(model=MODEL, input="Which number?", conversation=conversation.id, **SHORT)
    assert answer.conversation.id == conversation.id
    items = _client(one).conversations.items.list(conversation.id, order="asc").data
    assert [(item.role, item.content[0].text) for item in items] == [
        ("user", "Remember 7."),
        ("user", "Which number?"),
        ("assistant", answer.output_text),
    ]


def test_a_streamed_response_streams_through_a_front_and_is_kept_there(fleet):
    one, other = fleet["fronts"]
    events = list(_client(one).responses.create(model=MODEL, input="Count to five.", stream=True, **SHORT))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) > 1  # streamed, not one piece at the end
    assert events[0].response.store is True and events[-1].response.store is True
    kept = _client(other).responses.retrieve(events[-1].response.id)
    assert kept.status == events[-1].response.status and kept.output_text == "".join(deltas)


def test_a_tenant_reads_and_continues_only_its_own_responses(fleet):
    one, other = fleet["fronts"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    alice, bob = (
        requests.post(one.url + "/v1/internal/keys", json={"name": name}, headers=admin, timeout=10).json()["key"]
        for name in ("state-alice", "state-bob")
    )
    mine = _client(one, alice).responses.create(model=MODEL, input="A secret: 42.", **SHORT)
    assert _client(other, alice).responses.retrieve(mine.id).output_text == mine.output_text
    theirs = _client(other, bob)
    for attempt in (
        lambda: theirs.responses.retrieve(mine.id),
        lambda: theirs.responses.input_items.list(mine.id),
        lambda: theirs.responses.delete(mine.id),
        lambda: theirs.responses.create(model=MODEL, input="What was it?", previous_response_id=mine.id, **SHORT),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert _client(one, alice).responses.retrieve(mine.id).id == mine.id  # still there


def test_a_background_response_is_refused_at_a_front_as_on_one_proxy(fleet):
    with pytest.raises(openai.BadRequestError, match="background"):
        _client(fleet["fronts"][0]).responses.create(model=MODEL, input="Hi", background=True, **SHORT)


def test_a_batch_of_responses_made_at_one_front_is_kept_at_the_fronts(fleet):
    """A batch's lines run by a front's runner are relayed like requests: its responses kept at the fronts."""
    one, other = fleet["fronts"]
    body = {"model": MODEL, "input": "Say hi.", **SHORT}
    rows = [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/responses", "body": body} for n in range(2)]
    uploaded = upload(_client(one), rows)
    created = _client(other).batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")
    batch = finished(_client(one), created.id, timeout=120)
    answers = results(_client(other), batch.output_file_id)
    assert batch.status == "completed" and sorted(line["custom_id"] for line in answers) == ["line-0", "line-1"]
    stored = answers[0]["response"]["body"]
    assert all(_client(front).responses.retrieve(stored["id"]).id == stored["id"] for front in (one, other))
    assert not any(_kept_by_a_box(box, stored["id"]) for box in fleet["boxes"])
