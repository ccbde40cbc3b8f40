"""Stored responses and conversations against the scripted upstream: the exact prompt a continuation
sends, what is kept when a stream is dropped or the generation fails, a failing store, storage off,
concurrent continuations, duplicate items and the size bound."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time

import pytest
import requests

from ..servers import free_port
from .test_responses_stream import events_of

QWEN_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"


def turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def post(proxy, body: dict, path: str = "/v1/responses", **options) -> requests.Response:
    return requests.post(proxy.url + path, json=body, timeout=30, **options)


def get(proxy, path: str, **options) -> requests.Response:
    return requests.get(proxy.url + path, timeout=30, **options)


def error_of(response: requests.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


@pytest.fixture(scope="module")
def store_file(tmp_path_factory):
    return tmp_path_factory.mktemp("store") / "store.sqlite3"


@pytest.fixture(scope="module")
def proxy(fake, start_proxy, store_file):
    return start_proxy("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5", "--store", f"sqlite://{store_file}")


def stored_count(store_file) -> int:
    with sqlite3.connect(store_file) as database:
        return database.execute("SELECT count(*) FROM objects").fetchone()[0]


def test_a_continuation_sends_the_earlier_turns_but_not_their_instructions(replay, proxy):
    first = post(proxy, {"input": "Hi", "instructions": "Answer in French."}).json()
    second = post(
        proxy,
        {"input": [{"role": "user", "content": "And again?"}], "previous_response_id": first["id"], "instructions": "Be brief."},
    ).json()
    assert replay.requests[-1]["prompt"] == (
        turn("system", "Be brief.")
        + turn("user", "Hi")
        + turn("assistant", " Hello, world!")
        + turn("user", "And again?")
        + "<|im_start|>assistant\n"
    )
    post(proxy, {"input": "Third", "previous_response_id": second["id"]})
    assert replay.requests[-1]["prompt"] == (
        QWEN_SYSTEM
        + turn("user", "Hi")
        + turn("assistant", " Hello, world!")
        + turn("user", "And again?")
        + turn("assistant", " Hello, world!")
        + turn("user", "Third")
        + "<|im_start|>assistant\n"
    )
    assert second["previous_response_id"] == first["id"] and second["store"] is True


def test_a_stream_is_stored_before_its_last_event(proxy):
    events = events_of(post(proxy, {"input": "Hi", "stream": True}))
    assert [e["response"]["store"] for e in events if "response" in e] == [True, True, True]
    completed = events[-1]["response"]
    assert get(proxy, f"/v1/responses/{completed['id']}").json() == completed


def test_input_items_are_the_whole_context_in_pages(proxy):
    first = post(proxy, {"input": [{"role": "developer", "content": "Rules."}, {"role": "user", "content": "Hi"}]}).json()
    second = post(proxy, {"input": "Next", "previous_response_id": first["id"]}).json()
    path = f"/v1/responses/{second['id']}/input_items"
    listed = get(proxy, path, params={"order": "asc"}).json()
    roles = [(item["type"], item["role"]) for item in listed["data"]]
    assert roles == [("message", "developer"), ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert listed["data"][2] == first["output"][0] and listed["data"][3]["content"] == [{"type": "input_text", "text": "Next"}]
    data = listed["data"]
    assert (listed["first_id"], listed["last_id"], listed["has_more"]) == (data[0]["id"], data[3]["id"], False)
    newest = get(proxy, path, params={"limit": 2}).json()  # desc by default, as OpenAI lists
    assert newest["data"] == listed["data"][:1:-1] and newest["has_more"]
    rest = get(proxy, path, params={"limit": 2, "after": newest["last_id"]}).json()
    assert rest["data"] == listed["data"][1::-1] and not rest["has_more"]
    assert error_of(get(proxy, path, params={"limit": 0}), 400)["param"] == "limit"
    assert error_of(get(proxy, path, params={"after": "msg_nope"}), 404)["param"] == "after"


def test_deleted_and_unknown_responses_are_openai_404s(proxy):
    response = post(proxy, {"input": "Hi"}).json()
    deleted = requests.delete(proxy.url + f"/v1/responses/{response['id']}", timeout=10)
    assert deleted.json() == {"id": response["id"], "object": "response", "deleted": True}
    message = f"Response with id '{response['id']}' not found."
    assert error_of(get(proxy, f"/v1/responses/{response['id']}"), 404)["message"] == message
    assert error_of(requests.delete(proxy.url + f"/v1/responses/{response['id']}", timeout=10), 404)["message"] == message
    assert error_of(post(proxy, {"input": "Hi", "previous_response_id": response["id"]}), 404) == {
        "message": f"Previous response with id '{response['id']}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    assert error_of(get(proxy, "/v1/responses/resp_unknown/input_items"), 404)["code"] == "not_found"


def test_store_false_keeps_nothing_but_may_continue(proxy):
    kept = post(proxy, {"input": "Hi"}).json()
    unkept = post(proxy, {"input": "More", "previous_response_id": kept["id"], "store": False}).json()
    assert unkept["store"] is False and unkept["previous_response_id"] == kept["id"]
    assert get(proxy, f"/v1/responses/{unkept['id']}").status_code == 404


def test_a_dropped_stream_is_kept_incomplete_with_what_was_generated(replay, proxy):
    replay.behaviour, replay.token_interval = "slow_tokens", 0.2
    replay.tokens = (" one", " two", " three", " four", " five", " six", " seven", " eight")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as connection:
        body = json.dumps({"input": "Count", "stream": True}).encode()
        connection.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while b"output_text.delta" not in received or b" two" not in received:
            received += connection.recv(65536)
    response_id = received.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
    deadline = time.monotonic() + 20
    while (stored := get(proxy, f"/v1/responses/{response_id}").json())["status"] == "in_progress":
        assert time.monotonic() < deadline, "the dropped stream was never kept"
        time.sleep(0.1)
    assert stored["status"] == "incomplete" and stored["output"][0]["status"] == "incomplete"
    text = stored["output"][0]["content"][0]["text"]
    assert text.startswith(" one two") and len(text) < len("".join(replay.tokens))
    assert stored["usage"]["output_tokens"] == len(text.split())


def test_a_generation_that_fails_mid_stream_is_kept_failed(replay, proxy):
    replay.behaviour = "die_mid_stream"
    events = events_of(post(proxy, {"input": "Hi", "stream": True}))
    assert events[-1]["type"] == "response.failed"
    assert get(proxy, f"/v1/responses/{events[-1]['response']['id']}").json()["status"] == "failed"


def test_a_refused_generation_leaves_nothing_stored(replay, proxy, store_file):
    """The response kept as in_progress before generating goes again when the upstream refuses."""
    before = stored_count(store_file)
    replay.behaviour = "status_500"
    for stream in (False, True):
        assert post(proxy, {"input": "Hi", "stream": stream}).status_code == 502
    assert stored_count(store_file) == before


def test_two_continuations_of_one_response_are_both_answered(proxy):
    first = post(proxy, {"input": "Hi"}).json()
    answers: list = [None] * 6

    def continue_it(n: int) -> None:
        answers[n] = post(proxy, {"input": f"Branch {n}", "previous_response_id": first["id"], "stream": n % 2 == 0})

    threads = [threading.Thread(target=continue_it, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [answer.status_code for answer in answers] == [200] * 6
    ids = {events_of(a)[-1]["response"]["id"] if n % 2 == 0 else a.json()["id"] for n, a in enumerate(answers)}
    assert len(ids) == 6
    for response_id in ids:
        texts = [item["content"][0]["text"] for item in get(proxy, f"/v1/responses/{response_id}/input_items").json()["data"]]
        assert texts[1:] == [" Hello, world!", "Hi"] and texts[0].startswith("Branch ")


def test_duplicate_items_and_both_kinds_of_history_are_refused(proxy):
    first = post(proxy, {"input": "Hi"}).json()
    resent = post(proxy, {"input": [first["output"][0], {"role": "user", "content": "Hi"}], "previous_response_id": first["id"]})
    assert "Duplicate item" in error_of(resent, 400)["message"]
    conversation = post(proxy, {}, "/v1/conversations").json()
    both = post(proxy, {"input": "Hi", "previous_response_id": first["id"], "conversation": conversation["id"]})
    assert error_of(both, 400)["param"] == "conversation"


def test_a_conversation_turn_adds_its_input_and_output(replay, proxy):
    conversation = post(
        proxy, {"items": [{"role": "system", "content": "Be kind."}], "metadata": {"topic": "t"}}, "/v1/conversations"
    ).json()
    answer = post(proxy, {"input": "Hi", "conversation": conversation["id"], "store": False}).json()
    assert answer["conversation"] == {"id": conversation["id"]} and answer["store"] is False
    events = events_of(post(proxy, {"input": "Again", "conversation": {"id": conversation["id"]}, "stream": True}))
    assert replay.requests[-1]["prompt"] == (
        turn("system", "Be kind.")
        + turn("user", "Hi")
        + turn("assistant", " Hello, world!")
        + turn("user", "Again")
        + "<|im_start|>assistant\n"
    )
    items = get(proxy, f"/v1/conversations/{conversation['id']}/items", params={"order": "asc"}).json()["data"]
    assert [item["role"] for item in items] == ["system", "user", "assistant", "user", "assistant"]
    assert items[2] == answer["output"][0] and items[4] == events[-1]["response"]["output"][0]
    missing = post(proxy, {"input": "Hi", "conversation": "conv_missing"})
    assert error_of(missing, 404) == {
        "message": "Conversation with id 'conv_missing' not found.",
        "type": "invalid_request_error",
        "param": "conversation",
        "code": "not_found",
    }


def test_the_conversations_api(proxy):
    created = post(proxy, {"items": [{"role": "user", "content": "Hi"}], "metadata": {"a": "1"}}, "/v1/conversations").json()
    path = f"/v1/conversations/{created['id']}"
    assert created["id"].startswith("conv_") and len(created["id"]) == len("conv_") + 32
    assert created["object"] == "conversation" and created["metadata"] == {"a": "1"}
    assert get(proxy, path).json() == created
    updated = post(proxy, {"metadata": {"b": "2"}}, path).json()
    assert updated == created | {"metadata": {"b": "2"}} and get(proxy, path).json() == updated
    added = post(
        proxy,
        {
            "items": [
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"},
            ]
        },
        path + "/items",
    ).json()
    assert [item["type"] for item in added["data"]] == ["function_call", "function_call_output"]
    assert added["first_id"].startswith("fc_") and added["last_id"].startswith("fco_") and not added["has_more"]
    everything = get(proxy, path + "/items", params={"order": "asc"}).json()["data"]
    assert everything[1:] == added["data"] and everything[0]["content"] == [{"type": "input_text", "text": "Hi"}]
    assert get(proxy, f"{path}/items/{everything[0]['id']}").json() == everything[0]
    assert requests.delete(proxy.url + f"{path}/items/{everything[0]['id']}", timeout=10).json() == updated
    assert error_of(get(proxy, f"{path}/items/{everything[0]['id']}"), 404)["code"] == "not_found"
    assert requests.delete(proxy.url + path, timeout=10).json() == {
        "id": created["id"],
        "object": "conversation.deleted",
        "deleted": True,
    }
    assert error_of(get(proxy, path + "/items"), 404)["message"] == f"Conversation with id '{created['id']}' not found."


def test_a_conversation_takes_at_most_twenty_items_a_request(proxy):
    items = [{"role": "user", "content": str(n)} for n in range(21)]
    assert error_of(post(proxy, {"items": items}, "/v1/conversations"), 400)["param"] == "items"


def test_stored_objects_are_bounded_by_the_body_limit(fake, start_proxy, tmp_path):
    proxy = start_proxy(
        "--llama-api",
        fake.url,
        "--chat-prompt-model",
        "qwen2.5",
        "--max-body-bytes",
        "3000",
        "--store",
        f"sqlite://{tmp_path}/store.sqlite3",
    )
    response = post(proxy, {"input": "x" * 1000}).json()
    error = error_of(post(proxy, {"input": "y" * 1500, "previous_response_id": response["id"]}), 400)
    assert error["param"] == "previous_response_id" and "--max-body-bytes" in error["message"]
    conversation = post(proxy, {"items": [{"role": "user", "content": "x" * 1400}]}, "/v1/conversations").json()
    too_much = post(proxy, {"items": [{"role": "user", "content": "y" * 1400}]}, f"/v1/conversations/{conversation['id']}/items")
    assert error_of(too_much, 400)["param"] == "items"


@pytest.mark.parametrize("store", ["sqlite-directory", "redis-down"])
def test_a_failing_store_is_a_503_and_store_false_still_works(fake, start_proxy, tmp_path, store):
    if store == "sqlite-directory":
        (tmp_path / "store.sqlite3").mkdir()  # a directory where the file should be
        url = f"sqlite://{tmp_path}/store.sqlite3"
    else:
        url = f"redis://127.0.0.1:{free_port()}/0"
    proxy = start_proxy("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5", "--store", url)
    for body in ({"input": "Hi"}, {"input": "Hi", "stream": True}, {"input": "Hi", "previous_response_id": "resp_1"}):
        assert error_of(post(proxy, body), 503)["code"] == "store_unavailable"
    assert error_of(get(proxy, "/v1/conversations/conv_1"), 503)["code"] == "store_unavailable"
    answer = post(proxy, {"input": "Hi", "store": False})
    assert answer.status_code == 200 and answer.json()["store"] is False


def test_with_storage_off_what_needs_it_is_a_400(fake, start_proxy):
    proxy = start_proxy("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5", "--store", "none")
    answer = post(proxy, {"input": "Hi"}).json()
    assert answer["store"] is False
    for response in (
        post(proxy, {"input": "Hi", "previous_response_id": answer["id"]}),
        post(proxy, {"input": "Hi", "conversation": "conv_1"}),
        get(proxy, f"/v1/responses/{answer['id']}"),
        post(proxy, {}, "/v1/conversations"),
    ):
        assert "--store none" in error_of(response, 400)["message"]
