"""Ollama's API end to end (issue 38): the official `ollama` Python package against the proxy in front
of real llama-servers running SmolLM2: one the proxy starts itself (models on demand, so keep_alive
loads and unloads a real process), behind a key; an embedding server beside it; and the test vision
projector (tests/e2e/test_images.py) for images.

Exact answers of tool calls, thoughts and errors are held by tests/faults/test_ollama_api.py (a
scripted model); here every method is driven once for real, streamed and not."""

from __future__ import annotations

import base64
import json
import math
import time

import ollama
import pytest
import requests

from ..servers import Proxy, llama_servers_on, stop, wait_until
from .test_images import IMAGE_TOKENS, picture, vision

KEY = "sk-ollama-e2e"
HELLO = [{"role": "user", "content": "Say hello."}]
GREEDY = {"temperature": 0, "seed": 1}
FIM = [
    "--override-kv",
    "tokenizer.ggml.fim_pre_token_id=int:8",
    "--override-kv",
    "tokenizer.ggml.fim_suf_token_id=int:9",
    "--override-kv",
    "tokenizer.ggml.fim_mid_token_id=int:10",
]
CONFIG = """
models:
  smol:
    model: $MODEL
    args: [--ctx-size, "2048", --parallel, "2", --threads, "1", {fim}]
  smol-embed:
    model: $MODEL
    args: [--ctx-size, "512", --parallel, "1", --threads, "1", --embeddings, --pooling, mean]
""".replace("{fim}", ", ".join(json.dumps(arg) for arg in FIM))


@pytest.fixture(scope="module")
def supervised(provisioned, tmp_path_factory):
    """The proxy starting SmolLM2 itself (and its embedding twin), behind a key; afterwards no
    llama-server it started may outlive it."""
    config = tmp_path_factory.mktemp("ollama-e2e") / "config.yaml"
    config.write_text(CONFIG.replace("$MODEL", provisioned["MODEL"]))
    proxy = Proxy(["--config", str(config), "--llama-server", provisioned["LLAMA_SERVER"], "--api-key", KEY]).start()
    ports = []
    try:
        yield proxy, ports
    finally:
        stop(proxy.process)
        deadline = time.monotonic() + 15
        while any(llama_servers_on(port) for port in ports) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [port for port in ports if llama_servers_on(port)] == [], "a llama-server outlived the proxy"


@pytest.fixture(scope="module")
def client(supervised) -> ollama.Client:
    return ollama.Client(host=supervised[0].url, headers={"Authorization": f"Bearer {KEY}"}, timeout=180)


def started_port(proxy: Proxy, model: str, ports: list[int]) -> int:
    status = requests.get(f"{proxy.url}/v1/models/{model}", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()[
        "status"
    ]
    port = int(status["upstreams"][0].rsplit(":", 1)[1])
    ports.append(port)
    return port


def test_chat_streamed_and_not(client):
    answer = client.chat(model="smol", messages=HELLO, options={**GREEDY, "num_predict": 8})
    assert answer.message.role == "assistant" and answer.message.content
    assert answer.done and answer.done_reason in ("stop", "length") and 0 < answer.eval_count <= 8
    assert answer.prompt_eval_count > 0 and answer.total_duration > answer.eval_duration > 0
    parts = list(client.chat(model="smol", messages=HELLO, options={**GREEDY, "num_predict": 8}, stream=True))
    assert "".join(part.message.content for part in parts) == answer.message.content
    assert parts[-1].done and parts[-1].eval_count == answer.eval_count


def test_num_predict_and_stop(client):
    long = client.generate(model="smol", prompt="Count: one, two, three,", options={**GREEDY, "num_predict": 12})
    assert long.done_reason == "length" and long.eval_count == 12
    words = long.response.split()
    assert len(words) >= 3
    cut = client.generate(model="smol", prompt="Count: one, two, three,", options={**GREEDY, "stop": [words[2]]})
    assert cut.response == long.response[: long.response.index(words[2])]


def test_a_repeat_penalty_over_the_whole_context_is_taken(client):
    """Ollama's `repeat_last_n: -1` (as far back as num_ctx), which this llama-server refuses as such."""
    answer = client.chat(model="smol", messages=HELLO, options={**GREEDY, "num_predict": 4, "repeat_last_n": -1})
    assert answer.done and answer.message.content


def test_generate_returns_the_replys_tokens_as_its_context(client, supervised):
    answer = client.generate(model="smol", prompt="Count: one, two, three,", options={**GREEDY, "num_predict": 6})
    assert answer.context and all(isinstance(token, int) for token in answer.context)
    decoded = requests.post(
        supervised[0].url + "/detokenize",
        json={"model": "smol", "tokens": answer.context},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    ).json()["content"]
    assert decoded == answer.response  # llama.cpp's own tokens of the reply
    parts = list(
        client.generate(model="smol", prompt="Count: one, two, three,", stream=True, options={**GREEDY, "num_predict": 6})
    )
    assert parts[-1].context == answer.context and not any(part.context for part in parts[:-1])


def test_generate_with_a_suffix_fills_the_middle(client):
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    answer = client.generate(model="smol", prompt=prefix, suffix=suffix, options={**GREEDY, "num_predict": 8})
    assert answer.done and answer.eval_count > 0 and isinstance(answer.response, str)
    parts = list(client.generate(model="smol", prompt=prefix, suffix=suffix, stream=True, options={**GREEDY, "num_predict": 8}))
    assert "".join(part.response for part in parts) == answer.response


def test_format_schema_answer_validates(client):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"],
    }
    answer = client.chat(
        model="smol", messages=[{"role": "user", "content": "Invent a person as JSON."}], format=schema, options=GREEDY
    )
    person = json.loads(answer.message.content)
    assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_tools_are_taken_and_a_tool_result_goes_back(client):
    """SmolLM2 answers this in text (a call's exact shape is the scripted model's, in the fault tests):
    the tools reach the template, nothing of a call's markup leaks, streamed and folded agree, and a
    conversation with a call and its result (by tool_name) is taken."""
    messages = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
    options = {**GREEDY, "num_predict": 32}
    folded = client.chat(model="smol", messages=messages, tools=[WEATHER], options=options)
    parts = list(client.chat(model="smol", messages=messages, tools=[WEATHER], options=options, stream=True))
    streamed = "".join(part.message.content for part in parts)
    calls = [call for part in [folded, *parts] for call in part.message.tool_calls or ()]
    assert all(call.function.name == "get_weather" and isinstance(call.function.arguments, dict) for call in calls)
    assert streamed == folded.message.content and "tool_call" not in streamed
    followed = messages + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
    ]
    answer = client.chat(model="smol", messages=followed, tools=[WEATHER], options={**GREEDY, "num_predict": 8})
    assert answer.done and answer.eval_count > 0 and answer.prompt_eval_count > folded.prompt_eval_count


@pytest.mark.parametrize("think", [True, False, "low"])
def test_think_is_accepted(client, think):
    answer = client.chat(model="smol", messages=HELLO, think=think, options={**GREEDY, "num_predict": 4})
    assert answer.done and answer.message.thinking is None  # SmolLM2's template marks no thoughts


def test_embed_and_embeddings(client):
    embedded = client.embed(model="smol-embed", input=["a cat", "a dog"])
    assert len(embedded.embeddings) == 2 and all(len(vector) == 576 for vector in embedded.embeddings)
    assert all(math.isclose(math.hypot(*vector), 1.0, rel_tol=1e-4) for vector in embedded.embeddings)
    assert embedded.prompt_eval_count > 0
    assert [len(v) for v in client.embed(model="smol-embed", input="a cat", dimensions=32).embeddings] == [32]
    legacy = client.embeddings(model="smol-embed", prompt="a cat")
    assert len(legacy.embedding) == 576


def test_list_show_ps_version(client, supervised):
    assert {model.model for model in client.list().models} == {"smol", "smol-embed"}
    details = client.list().models[0].details
    assert details.format == "gguf" and details.family == "llama" and details.quantization_level
    shown = client.show("smol")
    assert {"completion", "tools", "insert"} <= set(shown.capabilities) and "vision" not in shown.capabilities
    assert shown.modelinfo["llama.context_length"] == 1024 and "<|im_start|>" in shown.template  # 2048 / 2 slots
    assert "embedding" in client.show("smol-embed").capabilities
    version = requests.get(supervised[0].url + "/api/version", timeout=5).json()["version"]
    assert [int(part) for part in version.split(".")] >= [0, 6, 4]


def test_keep_alive_zero_unloads_the_model(client, supervised):
    proxy, ports = supervised
    assert client.generate(model="smol").done_reason == "load"
    port = started_port(proxy, "smol", ports)
    assert "smol" in [model.name for model in client.ps().models] and llama_servers_on(port)
    answer = client.chat(model="smol", messages=HELLO, keep_alive=0, options={**GREEDY, "num_predict": 4})
    assert answer.done
    wait_until(lambda: "smol" not in [model.name for model in client.ps().models], proxy.process, "smol unloaded", 30)
    wait_until(lambda: not llama_servers_on(port), proxy.process, "its llama-server gone", 30)
    assert client.generate(model="smol").done_reason == "load"
    assert client.generate(model="smol", keep_alive=0).done_reason == "unload"
    wait_until(lambda: not llama_servers_on(port), proxy.process, "its llama-server gone", 30)


def test_keep_alive_duration_sets_the_idle_time(client, supervised):
    client.generate(model="smol", keep_alive="7m")
    [smol] = [model for model in client.ps().models if model.name == "smol"]
    left = smol.expires_at.timestamp() - time.time()
    assert 6 * 60 < left <= 7 * 60


def test_the_key_is_asked_for(supervised):
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=supervised[0].url).list()
    assert refused.value.status_code == 401
    assert requests.get(supervised[0].url + "/", timeout=5).text == "Ollama is running"


@pytest.fixture(scope="module")
def vision_client(start_llama_server, start_proxy) -> ollama.Client:
    server = start_llama_server(**vision())
    return ollama.Client(host=start_proxy("--llama-api", server.url).url, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_images_reach_llama_server(vision_client, stream):
    question = {"role": "user", "content": "What is in this picture?"}

    def prompt_tokens(message: dict) -> int:
        answer = vision_client.chat(model="smol", messages=[message], options={"num_predict": 2}, stream=stream)
        return (list(answer)[-1] if stream else answer).prompt_eval_count

    with_image = prompt_tokens({**question, "images": [base64.b64encode(picture("PNG")).decode()]})
    assert IMAGE_TOKENS <= with_image - prompt_tokens(question) <= IMAGE_TOKENS + 2
    assert "vision" in vision_client.show("smol").capabilities
