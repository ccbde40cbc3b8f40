"""The walking skeleton against the real llama-server and SmolLM2, through the official SDK."""

from __future__ import annotations

import json

import openai
import pytest
import requests

from ..conftest import openai_client

HELLO = [{"role": "user", "content": "Say hello."}]


def sse_events(response: requests.Response) -> list[bytes]:
    """The raw events of a stream, checking the framing: each `data: ...` ends in a blank line."""
    body = response.content
    assert body.endswith(b"\n\n")
    events = body[:-2].split(b"\n\n")
    for event in events:
        assert event.startswith(b"data: ") and b"\n" not in event, event
    return [event[len(b"data: ") :] for event in events]


def test_chat_answers_from_the_model(client):
    reply = client.chat.completions.create(model="anything", messages=HELLO, max_tokens=16, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.model == "anything"
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens <= 16
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_chat_stream_framing_and_chunks(proxy):
    response = requests.post(
        proxy.url + "/v1/chat/completions",
        stream=False,
        timeout=120,
        json={"messages": HELLO, "stream": True, "max_tokens": 12, "temperature": 0},
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(response)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}  # the role alone
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length")
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert all(contents), "no empty content chunk between the role chunk and the finish chunk"


def test_chat_stream_through_sdk_equals_the_non_streamed_answer(client):
    options = dict(model="m", messages=HELLO, max_tokens=24, temperature=0, seed=7)
    whole = client.chat.completions.create(**options).choices[0].message.content
    stream = client.chat.completions.create(stream=True, **options)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream]
    assert "".join(pieces) == whole
    assert pieces[1], "the first content delta is not empty"


@pytest.mark.parametrize("stop", [None, "\n", ["\n", "zzz"]])
def test_stop_null_string_and_list(client, stop):
    reply = client.completions.create(model="m", prompt="1, 2, 3, 4,", stop=stop, max_tokens=12, temperature=0)
    text = reply.choices[0].text
    if stop is None:
        assert reply.choices[0].finish_reason in ("length", "stop")
    else:
        assert "\n" not in text
    assert text


def test_a_stop_word_ends_the_completion_with_reason_stop(client):
    unstopped = client.completions.create(model="m", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0)
    word = unstopped.choices[0].text.split(",")[1].strip()  # a word the model will write
    stopped = client.completions.create(model="m", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=word)
    assert word not in stopped.choices[0].text
    assert stopped.choices[0].finish_reason == "stop"


def test_max_completion_tokens_limits_the_answer(client):
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Write a long story."}], max_completion_tokens=3, temperature=0
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 3


def test_explicit_nulls_and_a_missing_model(proxy):
    body = {
        "messages": HELLO,
        "stop": None,
        "max_tokens": 8,
        "max_completion_tokens": None,
        "temperature": None,
        "top_p": None,
        "seed": None,
        "n": None,
        "logprobs": None,
        "tools": None,
        "user": None,
        "stream": None,
        "presence_penalty": None,
    }
    response = requests.post(proxy.url + "/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "llama.cpp"
    assert response.json()["choices"][0]["message"]["content"]


def test_completion_and_its_stream(client, proxy):
    options = dict(model="m", prompt="The capital of France is", max_tokens=8, temperature=0)
    whole = client.completions.create(**options)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    # The SDK's completion type rejects the finish_reason null every streamed chunk carries.
    stream = openai_client(proxy.url, strict=False).completions.create(stream=True, **options)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[0].choices[0].text.startswith(" "), "the first token keeps its leading space"
    assert len({c.id for c in chunks}) == 1
    assert [c.choices[0].finish_reason for c in chunks].count(None) == len(chunks) - 1


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["llama.cpp"]


@pytest.fixture(scope="module")
def dead_upstream_proxy(start_proxy):
    from ..servers import free_port

    return start_proxy("--llama-api", f"http://127.0.0.1:{free_port()}", "--chat-prompt-model", "chatml")


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_down_is_a_503_for_sdk_users(dead_upstream_proxy, stream):
    down = openai_client(dead_upstream_proxy.url)
    with pytest.raises(openai.InternalServerError) as caught:
        down.chat.completions.create(model="m", messages=HELLO, stream=stream)
    assert caught.value.status_code == 503
    assert caught.value.body["type"] == "upstream_error"


def test_health_follows_the_upstream(proxy, dead_upstream_proxy):
    assert requests.get(proxy.url + "/health", timeout=10).status_code == 200
    down = requests.get(dead_upstream_proxy.url + "/health", timeout=10)
    assert down.status_code == 503 and "unreachable" in down.json()["error"]["message"]
