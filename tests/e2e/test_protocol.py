"""The OpenAI protocol in full, against the real llama-server, through the SDK in strict mode."""

from __future__ import annotations

import json
import threading
import time

import openai
import pytest
import requests

from ..conftest import openai_client

HELLO = [{"role": "user", "content": "Say hello."}]


def raw_stream(proxy, path: str, body: dict) -> list[dict]:
    response = requests.post(proxy.url + path, json={**body, "stream": True}, timeout=120)
    assert response.status_code == 200, response.text
    events = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


@pytest.mark.parametrize("stream", [False, True])
def test_n_gives_that_many_choices_each_finishing_once(client, proxy, stream):
    body = {"messages": HELLO, "n": 2, "max_tokens": 8, "temperature": 1.0}
    if not stream:
        reply = client.chat.completions.create(model="m", **body)
        assert sorted(c.index for c in reply.choices) == [0, 1]
        assert all(c.message.content and c.finish_reason for c in reply.choices)
        return
    chunks = raw_stream(proxy, "/v1/chat/completions", body)
    finishes = [c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1]
    assert {c["choices"][0]["index"] for c in chunks} == {0, 1}


def test_chat_logprobs(client):
    reply = client.chat.completions.create(model="m", messages=HELLO, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 3 for t in content)
    assert all(bytes(t.bytes).decode() == t.token for t in content)


def test_chat_logprobs_in_a_stream(client):
    stream = client.chat.completions.create(
        model="m", messages=HELLO, max_tokens=8, temperature=0, logprobs=True, top_logprobs=1, stream=True
    )
    tokens = [(c.choices[0].delta.content, c.choices[0].logprobs) for c in stream if c.choices[0].delta.content]
    assert all(lp is not None and "".join(t.token for t in lp.content) == text for text, lp in tokens)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_legacy_shape(proxy, stream):
    client = openai_client(proxy.url, strict=not stream)
    options = dict(model="m", prompt="The capital of France is", max_tokens=6, temperature=0, logprobs=2)
    if stream:
        chunks = list(client.completions.create(stream=True, **options))
        text = "".join(c.choices[0].text for c in chunks)
        tokens = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
        offsets = [o for c in chunks if c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    else:
        reply = client.completions.create(**options)
        text, logprobs = reply.choices[0].text, reply.choices[0].logprobs
        tokens, offsets = logprobs.tokens, logprobs.text_offset
        assert all(lp <= 0 for lp in logprobs.token_logprobs)
        assert all(len(top) <= 2 for top in logprobs.top_logprobs)
    assert "".join(tokens) == text
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


def test_include_usage_adds_exactly_one_usage_chunk(client, proxy):
    chunks = list(
        client.chat.completions.create(
            model="m", messages=HELLO, max_tokens=6, stream=True, stream_options={"include_usage": True}
        )
    )
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and chunks[-1].choices == []
    assert with_usage[0].usage.completion_tokens > 0 and with_usage[0].usage.prompt_tokens > 0
    plain = raw_stream(proxy, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 6})
    assert all("usage" not in chunk for chunk in plain)


def test_stream_options_without_stream_are_set_aside(client):
    """OpenAI refuses them; a whole answer has its usage anyway, so a client that always sends them is answered."""
    reply = client.chat.completions.create(model="m", messages=HELLO, stream_options={"include_usage": True}, max_tokens=4)
    assert reply.choices[0].message.content is not None and reply.usage.completion_tokens > 0


def test_json_object_output_parses(client):
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Give me a JSON object with the name and age of a cat."}],
        response_format={"type": "json_object"},
        max_tokens=200,
        temperature=0,
        # computed afresh: a slot's cached prefix from the run's earlier prompts changes the numbers, and
        # with them which greedy answer SmolLM2 writes (a CI run once rambled to the token limit)
        extra_body={"cache_prompt": False},
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_json_schema_output_follows_the_schema(client):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Describe a person."}],
        max_tokens=80,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    person = json.loads(reply.choices[0].message.content)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "banana"}}},
    ],
)
def test_bad_response_format_is_a_400(client, response_format):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=HELLO, response_format=response_format)


def test_logit_bias_bans_a_token(client, proxy):
    prompt = "1, 2, 3,"
    plain = client.completions.create(model="m", prompt=prompt, max_tokens=2, temperature=0, logprobs=1)
    first_token = plain.choices[0].logprobs.tokens[0]
    token_id = requests.post(proxy.url + "/v1/internal/encode", json={"text": first_token}, timeout=10).json()["tokens"]
    assert len(token_id) == 1
    biased = client.completions.create(
        model="m", prompt=prompt, max_tokens=2, temperature=0, logprobs=1, logit_bias={str(token_id[0]): -100}
    )
    assert biased.choices[0].logprobs.tokens[0] != first_token


def test_completion_prompt_shapes_and_echo(client):
    several = client.completions.create(model="m", prompt=["Once upon", "The sky is"], max_tokens=3, temperature=0)
    assert [c.index for c in several.choices] == [0, 1]
    token_ids = client.completions.create(model="m", prompt=[504, 3575, 282, 4649, 314], max_tokens=3, temperature=0)
    assert token_ids.choices[0].text
    echoed = client.completions.create(model="m", prompt="The sky is", max_tokens=3, temperature=0, echo=True)
    assert echoed.choices[0].text.startswith("The sky is") and len(echoed.choices[0].text) > len("The sky is")


def test_fill_in_the_middle_with_suffix(client):
    reply = client.completions.create(
        model="m",
        prompt="def add(a, b):\n    return ",
        suffix="\n\nprint(add(1, 2))\n",
        max_tokens=8,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].text and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 8 and reply.usage.prompt_tokens > 5


def test_llama_cpp_samplers_are_accepted(proxy):
    samplers = {
        "top_k": 5,
        "min_p": 0.1,
        "typical_p": 0.9,
        "repeat_penalty": 1.1,
        "repeat_last_n": 32,
        "mirostat": 0,
        "n_keep": 0,
        "ignore_eos": True,
        "dynatemp_range": 0.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "samplers": ["top_k", "temperature"],
        "cache_prompt": True,
        "id_slot": -1,
        "seed": 1,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
    }
    response = requests.post(proxy.url + "/v1/completions", timeout=60, json={"prompt": "Hi", "max_tokens": 4, **samplers})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] == "length"  # ignore_eos ran it to the limit


def test_tool_choice_none_answers_in_text(client):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    choice = client.chat.completions.create(model="m", messages=HELLO, tools=tools, tool_choice="none", max_tokens=8).choices[0]
    assert choice.message.content and choice.message.tool_calls is None
    assert client.chat.completions.create(model="m", messages=HELLO, max_tokens=2, tools=None).choices


def test_multibyte_characters_survive_streaming(client):
    options = dict(
        model="m",
        max_tokens=40,
        temperature=0,
        seed=3,
        messages=[{"role": "user", "content": "Reply with only emoji and Chinese: 🎉🐱 你好世界"}],
    )
    whole = client.chat.completions.create(**options).choices[0].message.content
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **options)]
    assert "".join(pieces) == whole
    assert "\ufffd" not in "".join(pieces)


def test_token_utilities(proxy):
    encoded = requests.post(proxy.url + "/v1/internal/encode", json={"text": "Hello world"}, timeout=10).json()
    assert encoded["length"] == len(encoded["tokens"]) > 0
    decoded = requests.post(proxy.url + "/v1/internal/decode", json={"tokens": encoded["tokens"]}, timeout=10).json()
    assert decoded["text"] == "Hello world"
    count = requests.post(proxy.url + "/v1/internal/token-count", json={"text": "Hello world"}, timeout=10).json()
    assert count == {"length": encoded["length"]}


def test_model_by_id(client):
    assert client.models.retrieve("llama.cpp").id == "llama.cpp"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-17")


def test_docs_and_openapi_load(proxy):
    document = requests.get(proxy.url + "/openapi.json", timeout=10).json()
    assert document["openapi"].startswith("3.1")
    assert "/v1/chat/completions" in document["paths"]
    assert "top_k" in document["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    page = requests.get(proxy.url + "/docs", timeout=10)
    assert page.status_code == 200 and "swagger-ui" in page.text and "http" not in page.text.split("<body>")[1]
    assert requests.get(proxy.url + "/docs/static/swagger-ui-bundle.js", timeout=10).status_code == 200


def test_embeddings_need_an_embedding_server(client):
    with pytest.raises(openai.BadRequestError, match="embeddings"):
        client.embeddings.create(model="m", input="hello")


@pytest.fixture(scope="module")
def embedding_proxy(start_llama_server, start_proxy):
    server = start_llama_server(context_size=1024, slots=1, extra_args=("--embeddings", "--pooling", "mean"))
    return start_proxy("--llama-api", server.url, "--chat-prompt-model", "chatml")


def test_embeddings(embedding_proxy):
    client = openai_client(embedding_proxy.url)
    single = client.embeddings.create(model="m", input="hello", encoding_format="float")
    assert len(single.data) == 1 and len(single.data[0].embedding) > 100
    several = client.embeddings.create(model="m", input=["hello", "a cat sat"], encoding_format="float")
    assert [d.index for d in several.data] == [0, 1] and several.usage.prompt_tokens > 0
    assert several.data[0].embedding == pytest.approx(single.data[0].embedding, abs=1e-4)
    # The SDK's default is base64, which it decodes itself (its strict mode checks before decoding).
    decoded = openai_client(embedding_proxy.url, strict=False).embeddings.create(model="m", input="hello")
    assert decoded.data[0].embedding == pytest.approx(single.data[0].embedding, abs=1e-6)


def busy_slots(llama_server) -> int:
    return sum(slot["is_processing"] for slot in requests.get(llama_server.url + "/slots", timeout=5).json())


def streams_in_flight(proxy) -> float:
    metrics = requests.get(proxy.url + "/metrics", timeout=5).text
    return float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith("api_like_oai_streams_in_flight ")))


def test_client_disconnect_frees_the_thread_and_the_upstream_slot_long_before_the_answer_would_end(proxy, llama_server):
    """The slot and the stream are freed because the client left, not because the answer ended: well
    within the time the rest of the 900 tokens would take at the pace the first ones came (a bound that
    slows with the machine, not a fixed second: a loaded machine slows both alike)."""
    body = {"messages": HELLO, "stream": True, "max_tokens": 900, "ignore_eos": True}
    with requests.post(proxy.url + "/v1/chat/completions", json=body, stream=True, timeout=60) as response:
        lines = (line for line in response.iter_lines() if line)
        next(lines)
        first = time.monotonic()
        for _ in range(8):
            next(lines)
        per_token = (time.monotonic() - first) / 8
        assert busy_slots(llama_server) >= 1 and streams_in_flight(proxy) >= 1
    disconnected = time.monotonic()
    rest_of_the_answer = per_token * (900 - 9)
    while (busy_slots(llama_server) or streams_in_flight(proxy)) and time.monotonic() - disconnected < rest_of_the_answer:
        time.sleep(0.02)
    freed_after = time.monotonic() - disconnected
    assert busy_slots(llama_server) == 0 and streams_in_flight(proxy) == 0
    assert freed_after < rest_of_the_answer / 5, (freed_after, rest_of_the_answer)


def test_stop_generation_ends_streams_with_stop(proxy):
    body = {"messages": HELLO, "stream": True, "max_tokens": 900, "ignore_eos": True}
    result = {}

    def consume():
        result["chunks"] = raw_stream(proxy, "/v1/chat/completions", body)

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(1.0)
    stopped = requests.post(proxy.url + "/v1/internal/stop-generation", timeout=10).json()
    reader.join(timeout=30)
    assert stopped["stopped"] >= 1
    finishes = [c["choices"][0]["finish_reason"] for c in result["chunks"] if c["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]
    assert len(result["chunks"]) < 900


def test_chat_echo_prefixes_the_last_assistant_message(client):
    messages = [*HELLO, {"role": "assistant", "content": "Hello there"}]
    reply = client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=6,
        temperature=0,
        extra_body={"echo": True, "continue_final_message": True, "add_generation_prompt": False},
    )
    assert reply.choices[0].message.content.startswith("Hello there")
    assert len(reply.choices[0].message.content) > len("Hello there")
