"""The requests real Ollama clients send, as their sources write them, replayed against the proxy
(in front of the scripted fake llama.cpp), and each answer checked for the fields that client reads,
with their types (issue 38):

- Copilot Chat's model discovery (microsoft/vscode-copilot-chat, byok/vscode-node/ollamaProvider.ts):
  GET /api/version (compared numerically with 0.6.4), GET /api/tags (`models[].model`), POST
  /api/show {"model"} (`capabilities`, `model_info["general.architecture"]`,
  `model_info["<arch>.context_length"]`, `model_info["general.basename"]`). No key: it sends none.
- Zed's Ollama provider (zed-industries/zed, crates/ollama/src/ollama.rs): GET /api/tags (`name`,
  `modified_at`, `size`, `digest`, `details` with string `format`, `family`, `parameter_size`,
  `quantization_level`), POST /api/show (`capabilities`), POST /api/chat with its serde body (null
  options, `keep_alive: -1`, `tools: []`, `think: null`), streamed lines each with `message.role`.
- Open WebUI's Ollama connection (open-webui backend/open_webui/routers/ollama.py): GET /api/version
  (parsed as integers after stripping `v` and `-...`), /api/tags, /api/ps, a streamed /api/chat.
- Home Assistant's chat call (home-assistant/core components/ollama/entity.py): `client.chat` with
  tools written as OpenAPI schemas, `keep_alive` as "300s" or -1, `options: {"num_ctx": 8192}`,
  `think: None`, streamed; a tool result sent back as a `tool` message with no tool_name.
"""

from __future__ import annotations

import json
import re

import ollama
import pytest
import requests

from .conftest import HERMES_CALL

KEY = "sk-ollama-clients"


@pytest.fixture(scope="module")
def proxies(fake, start_proxies):
    """(open, keyed): Copilot Chat sends no key; Zed, Open WebUI and Home Assistant can."""
    return start_proxies(
        ("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5"),
        ("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5", "--api-key", KEY),
    )


def bearer() -> dict:
    return {"Authorization": f"Bearer {KEY}"}


def ndjson(response: requests.Response) -> list[dict]:
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


def test_copilot_chat_discovery(proxies):
    url = proxies[0].url
    version = requests.get(url + "/api/version", timeout=10).json()["version"]
    assert [int(part) for part in version.split(".")] >= [0, 6, 4]
    models = requests.get(url + "/api/tags", timeout=10).json()["models"]
    for model in models:
        shown = requests.post(
            url + "/api/show",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"model": model["model"]}),
            timeout=10,
        ).json()
        info = shown["model_info"]
        assert isinstance(info[f"{info['general.architecture']}.context_length"], int)
        assert isinstance(info["general.basename"], str) and isinstance(shown["template"], str)
        assert "tools" in shown["capabilities"] and isinstance(shown["details"]["family"], str)


def test_zed_probe_and_chat(proxies, replay):
    url, headers = proxies[1].url, {**bearer(), "Accept": "application/json"}
    listing = requests.get(url + "/api/tags", headers=headers, timeout=10).json()["models"]
    for model in listing:
        assert {type(model[key]) for key in ("name", "modified_at", "digest")} == {str}
        assert isinstance(model["size"], int)
        assert all(isinstance(model["details"][key], str) for key in ("format", "family", "parameter_size", "quantization_level"))
    shown = requests.post(url + "/api/show", headers=bearer(), json={"model": listing[0]["name"]}, timeout=10)
    assert isinstance(shown.json()["capabilities"], list)
    body = {
        "model": listing[0]["name"],
        "messages": [{"role": "system", "content": "You are Zed."}, {"role": "user", "content": "Hi", "images": None}],
        "stream": True,
        "keep_alive": -1,
        "tools": [],
        "think": None,
        "options": {"num_ctx": 16384, "num_predict": None, "stop": None, "temperature": None, "top_p": None},
    }
    lines = ndjson(requests.post(url + "/api/chat", headers=bearer(), json=body, timeout=30))
    assert all(
        line["message"]["role"] == "assistant"
        and isinstance(line["message"]["content"], str)
        and isinstance(line["created_at"], str)
        for line in lines
    )
    assert lines[-1]["done"] is True and isinstance(lines[-1]["eval_count"], int)
    assert isinstance(lines[-1]["prompt_eval_count"], int)


def test_open_webui_connection(proxies, replay):
    url = proxies[1].url
    version = requests.get(url + "/api/version", headers=bearer(), timeout=10).json()["version"]
    assert tuple(map(int, re.sub(r"^v|-.*", "", version).split(".")))
    models = requests.get(url + "/api/tags", headers=bearer(), timeout=10).json()["models"]
    loaded = requests.get(url + "/api/ps", headers=bearer(), timeout=10).json()["models"]
    assert {model["model"] for model in loaded} <= {model["model"] for model in models}
    assert all(isinstance(model["expires_at"], str) and isinstance(model["size_vram"], int) for model in loaded)
    body = {
        "model": models[0]["model"],
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": True,
        "options": {"temperature": 0.8},
        "keep_alive": "5m",
    }
    lines = ndjson(requests.post(url + "/api/chat", headers=bearer(), json=body, timeout=30))
    assert "".join(line["message"]["content"] for line in lines) == " Hello, world!"


TURN_ON = {
    "type": "function",
    "function": {
        "name": "HassTurnOn",
        "description": "Turns on/opens a device or entity",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "area": {"type": "string"},
                "domain": {"type": "array", "items": {"type": "string"}},
            },
            "required": [],
        },
    },
}


def test_home_assistant_chat_with_tools(proxies, replay):
    replay.tokens = tuple(HERMES_CALL)
    client = ollama.Client(host=proxies[1].url, headers=bearer())
    messages = [{"role": "system", "content": "You control a home."}, {"role": "user", "content": "Weather?"}]
    chunks = list(
        client.chat(
            model="qwen3:4b",
            messages=messages,
            tools=[TURN_ON, WEATHER],
            stream=True,
            keep_alive="300s",
            options={"num_ctx": 8192},
            think=None,
            format=None,
        )
    )
    calls = [call for chunk in chunks for call in chunk["message"].get("tool_calls") or ()]
    assert [(call["function"]["name"], dict(call["function"]["arguments"])) for call in calls] == [
        ("get_weather", {"city": "Zürich", "unit": "c"})
    ]
    replay.tokens = (" It", " is", " sunny", ".")
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [{"function": calls[0]["function"]}]},
        {"role": "tool", "content": json.dumps({"data": {"sky": "sunny"}, "error": None})},
    ]
    chunks = list(
        client.chat(
            model="qwen3:4b", messages=messages, tools=[TURN_ON, WEATHER], stream=True, keep_alive=-1, options={"num_ctx": 8192}
        )
    )
    assert "".join(chunk["message"]["content"] for chunk in chunks) == " It is sunny."
    assert '"sky": "sunny"' in replay.requests[-1]["prompt"]


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
