"""Ollama's API (issue 38) through the real proxy CLI in front of the scripted fake llama.cpp, driven
by the official `ollama` Python package: what reaches llama.cpp (options, format, suffix, raw), tool
calls as a tool-trained model writes them (SmolLM2 cannot on demand), and bad input answered in
Ollama's error shape with its status."""

from __future__ import annotations

import json

import ollama
import pytest
import requests

from ..servers import free_port
from .conftest import HERMES_CALL

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
HI = [{"role": "user", "content": "Hi"}]
KEY = "sk-ollama-test"
OLLAMA_PORT = free_port()  # the plain proxy's second listener (--ollama-listen), as 11434 would be


@pytest.fixture(scope="module")
def proxies(fake, start_proxies, tmp_path_factory):
    """A plain proxy (qwen2.5's template: it writes tools), one with a model list (unknown names are
    404s) and a key."""
    config = tmp_path_factory.mktemp("ollama") / "models.yaml"
    config.write_text(f"models:\n  qwen3:4b:\n    upstreams: [{fake.url}]\n    chat_prompt_model: qwen2.5\n")
    plain, keyed = start_proxies(
        ("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5", "--ollama-listen", f"127.0.0.1:{OLLAMA_PORT}"),
        ("--config", str(config), "--api-key", KEY),
    )
    return plain, keyed


@pytest.fixture
def client(proxies, replay):
    return ollama.Client(host=proxies[0].url, timeout=60)


def test_chat_folded_and_streamed_say_the_same(client, replay):
    answer = client.chat(model="llama3.2", messages=HI, stream=False)
    assert answer.message.role == "assistant" and answer.message.content == " Hello, world!"
    assert answer.done and answer.done_reason == "stop" and answer.model == "llama3.2"
    assert answer.prompt_eval_count == 3 and answer.eval_count == 4
    assert answer.total_duration >= answer.eval_duration >= 0 and answer.load_duration >= 0
    parts = list(client.chat(model="llama3.2", messages=HI, stream=True))
    assert "".join(part.message.content for part in parts) == " Hello, world!"
    assert [part.done for part in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].eval_count == 4 and parts[-1].done_reason == "stop"


def test_the_stream_is_ndjson(proxies, replay):
    response = requests.post(proxies[0].url + "/api/chat", json={"model": "m", "messages": HI}, timeout=30)
    assert response.headers["Content-Type"] == "application/x-ndjson"
    lines = response.content.split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line)["model"] == "m" for line in lines[:-1])
    assert json.loads(lines[0])["message"] == {"role": "assistant", "content": " Hello"}


def test_options_reach_llamacpp_as_its_fields(client, replay):
    client.chat(
        model="m",
        messages=HI,
        stream=False,
        options={
            "num_predict": 7,
            "temperature": 0.2,
            "top_k": 5,
            "top_p": 0.5,
            "min_p": 0.1,
            "seed": 3,
            "stop": ["\n\n"],
            "repeat_penalty": 1.2,
            "repeat_last_n": 32,
            "mirostat": 2,
            "num_gpu": 99,
            "num_thread": 4,
            "num_ctx": 10**6,
        },
    )
    sent = replay.requests[-1]
    assert sent["n_predict"] == 7 and sent["temperature"] == 0.2 and sent["top_k"] == 5 and sent["seed"] == 3
    assert sent["top_p"] == 0.5 and sent["min_p"] == 0.1 and sent["repeat_penalty"] == 1.2
    assert sent["repeat_last_n"] == 32 and sent["mirostat"] == 2 and "\n\n" in sent["stop"]
    assert "num_gpu" not in sent and "num_thread" not in sent  # set aside, never a 400


def test_repeat_last_n_minus_one_looks_back_over_the_context_as_ollama_says(client, replay):
    """Ollama's -1 is "num_ctx"; llama-server refuses a -1, so the proxy writes the context in."""
    client.chat(model="m", messages=HI, stream=False, options={"repeat_last_n": -1})
    assert replay.requests[-1]["repeat_last_n"] == 2048  # the model's context, from llama-server's /props
    client.generate(model="m", prompt="hi", raw=True, stream=False, options={"repeat_last_n": -1, "num_ctx": 512})
    completion = [sent for sent in replay.requests if "prompt" in sent][-1]  # (a raw answer's tokens are counted after)
    assert completion["repeat_last_n"] == 512  # num_ctx, when smaller
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="m", messages=HI, stream=False, options={"repeat_last_n": -2})
    assert refused.value.status_code == 400 and "repeat_last_n" in refused.value.error


def test_a_length_stop_is_done_reason_length(client, replay):
    replay.stop_type = "limit"
    assert client.chat(model="m", messages=HI, stream=False, options={"num_predict": 4}).done_reason == "length"


def test_format_schema_is_a_grammar(client, replay):
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    client.chat(model="m", messages=HI, stream=False, format=schema)
    assert replay.requests[-1]["json_schema"] == schema
    client.chat(model="m", messages=HI, stream=False, format="json")
    assert replay.requests[-1]["json_schema"] == {"type": "object"}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_come_with_object_arguments(client, replay, stream):
    replay.tokens = tuple(HERMES_CALL)
    answer = client.chat(model="m", messages=[{"role": "user", "content": "Weather in Zürich?"}], tools=[WEATHER], stream=stream)
    parts = [answer] if not stream else list(answer)
    calls = [call for part in parts for call in part.message.tool_calls or ()]
    assert [(call.function.name, dict(call.function.arguments)) for call in calls] == [
        ("get_weather", {"city": "Zürich", "unit": "c"})
    ]
    assert "".join(part.message.content for part in parts) == "Let me check. "
    assert parts[-1].done_reason == "stop"


def test_a_tool_result_goes_back_as_a_tool_message(client, replay):
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Bern"}}}],
        },
        {"role": "tool", "content": "12 degrees", "tool_name": "get_weather"},
    ]
    client.chat(model="m", messages=messages, tools=[WEATHER], stream=False)
    prompt = replay.requests[-1]["prompt"]
    assert '{"city": "Bern"}' in prompt and "12 degrees" in prompt and "<tool_response>" in prompt


def test_generate_templated_raw_and_suffix(client, replay):
    def generated() -> dict:  # the last generation sent upstream (a /tokenize of the reply follows it)
        return [body for body in replay.requests if "n_predict" in body][-1]

    answer = client.generate(model="m", prompt="Why is the sky blue?", system="Be brief.", stream=False)
    assert answer.response == " Hello, world!" and answer.done
    assert "Be brief." in generated()["prompt"] and "<|im_start|>user" in generated()["prompt"]
    assert replay.requests[-1] == {"content": " Hello, world!", "add_special": False}
    assert answer.context == [0, 1]  # the reply's tokens as the upstream counts them (the fake: words)
    client.generate(model="m", prompt="plain text", raw=True, stream=False)
    assert generated()["prompt"] == "plain text"
    parts = list(client.generate(model="m", prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))", stream=True))
    assert "".join(part.response for part in parts) == " Hello, world!" and parts[-1].context == [0, 1]
    sent = generated()
    assert sent["input_prefix"] == "def add(a, b):\n    return " and sent["input_suffix"] == "\n\nprint(add(1, 2))"


def test_an_empty_request_loads_the_model(client):
    answer = client.generate(model="m")
    assert answer.done and answer.done_reason == "load" and answer.response == ""
    assert client.chat(model="m", messages=[]).done_reason == "load"


def test_probes_and_listings(proxies):
    url = proxies[0].url
    assert requests.get(url + "/", timeout=5).text == "Ollama is running"
    assert requests.head(url + "/", timeout=5).status_code == 200
    version = requests.get(url + "/api/version", timeout=5).json()["version"]
    assert all(part.isdigit() for part in version.split("."))
    client = ollama.Client(host=url)
    listed = client.list().models
    assert [model.model for model in listed] == ["llama.cpp"] and listed[0].details.format == "gguf"
    shown = client.show("llama.cpp")
    assert {"completion", "tools"} <= set(shown.capabilities)
    assert shown.modelinfo["llama.context_length"] == 2048 and "<|im_start|>" in shown.template
    assert [model.name for model in client.ps().models] == ["llama.cpp"]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.pull("llama3.2"),
        lambda c: c.push("me/x"),
        lambda c: c.copy("a", "b"),
        lambda c: c.create("x", from_="llama3.2"),
    ],
)
def test_the_hub_routes_say_where_models_come_from(proxies, call):
    with pytest.raises(ollama.ResponseError) as refused:
        call(ollama.Client(host=proxies[0].url))
    assert refused.value.status_code == 400 and "--models-dir" in refused.value.error


def test_bad_input_in_ollamas_shape(proxies, replay):
    url = proxies[0].url + "/api/chat"
    bad_json = requests.post(url, data=b"{not json", timeout=10)
    assert bad_json.status_code == 400 and list(bad_json.json()) == ["error"]
    bad_schema = requests.post(url, json={"model": "m", "messages": HI, "format": {"type": "banana"}}, timeout=10)
    assert bad_schema.status_code == 400 and "format" in bad_schema.json()["error"]
    image = requests.post(url, json={"model": "m", "messages": [{**HI[0], "images": ["iVBORw0KGgo="]}]}, timeout=10)
    assert image.status_code == 400 and "does not take images" in image.json()["error"]
    duration = requests.post(url, json={"model": "m", "messages": HI, "keep_alive": "soon"}, timeout=10)
    assert duration.status_code == 400 and "invalid duration" in duration.json()["error"]


def test_unknown_model_is_ollamas_404_and_a_key_is_asked(proxies, replay):
    keyed = ollama.Client(host=proxies[1].url, headers={"Authorization": f"Bearer {KEY}"})
    assert keyed.chat(model="qwen3:4b", messages=HI, stream=False).message.content == " Hello, world!"
    with pytest.raises(ollama.ResponseError) as unknown:
        keyed.chat(model="llama3.2", messages=HI, stream=False)
    assert unknown.value.status_code == 404
    assert unknown.value.error == 'model "llama3.2" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as missing:
        keyed.show("llama3.2")
    assert missing.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as anonymous:
        ollama.Client(host=proxies[1].url).list()
    assert anonymous.value.status_code == 401
    assert requests.get(proxies[1].url + "/", timeout=5).status_code == 200  # the probe needs no key


def test_a_stream_that_fails_ends_with_an_error_line(client, replay):
    replay.behaviour = "die_mid_stream"
    with pytest.raises(ollama.ResponseError) as failed:
        list(client.chat(model="m", messages=HI, stream=True))
    assert failed.value.error  # the client read Ollama's {"error": ...} line
    replay.behaviour = "loading"
    with pytest.raises(ollama.ResponseError) as loading:  # refused before the first object: a real status
        list(client.chat(model="m", messages=HI, stream=True))
    assert loading.value.status_code == 503


def test_the_extra_listener_serves_every_route(proxies, replay):
    client = ollama.Client(host=f"http://127.0.0.1:{OLLAMA_PORT}")
    assert client.chat(model="m", messages=HI).message.content == " Hello, world!"
    assert requests.get(f"http://127.0.0.1:{OLLAMA_PORT}/v1/models", timeout=5).json()["data"]
