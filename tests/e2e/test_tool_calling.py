"""Tool calling end to end: the real llama-server with SmolLM2 (its template knows nothing of tools,
so the proxy describes them and a grammar holds the answer to them), driven by the clients agents use."""

from __future__ import annotations

import json
import os

import jsonschema_rs
import pytest
import requests

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The current time."}}
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather like in Paris today?"},
]
SAMPLING = {"temperature": 0, "seed": 7, "max_tokens": 300}


def assert_valid_weather_call(name: str, arguments: str) -> dict:
    assert name == "get_weather"
    parsed = json.loads(arguments)
    jsonschema_rs.validate(WEATHER["function"]["parameters"], parsed)
    return parsed


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
def test_forced_choice_gives_a_valid_call(client, tool_choice):
    answer = client.chat.completions.create(
        model="smollm", messages=MESSAGES, tools=[WEATHER, CLOCK], tool_choice=tool_choice, **SAMPLING
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    if isinstance(tool_choice, dict):
        assert len(calls) == 1
    call = calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    if call.function.name == "get_weather" or isinstance(tool_choice, dict):
        assert_valid_weather_call(call.function.name, call.function.arguments)
    else:
        assert (call.function.name, call.function.arguments) == ("get_time", "{}")


def test_streamed_call_is_the_non_streamed_call(client):
    request = {
        "model": "smollm",
        "messages": MESSAGES,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        **SAMPLING,
    }
    plain = client.chat.completions.create(**request).choices[0].message.tool_calls[0]
    chunks = list(client.chat.completions.create(**request, stream=True))
    deltas = [call for chunk in chunks for call in (chunk.choices[0].delta.tool_calls or ())]
    assert [d.id for d in deltas if d.id] == [deltas[0].id]  # the id exactly once
    assert [d.function.name for d in deltas if d.function.name] == ["get_weather"]
    assert len(deltas) > 3  # arguments arrive as written
    assert "".join(d.function.arguments or "" for d in deltas) == plain.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert_valid_weather_call("get_weather", plain.function.arguments)


def test_the_sdk_stream_helper_assembles_the_same_call(client):
    request = {"model": "smollm", "messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required", **SAMPLING}
    plain = client.chat.completions.create(**request).choices[0].message
    with client.chat.completions.stream(**request) as stream:
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in final.message.tool_calls] == [
        (c.function.name, c.function.arguments) for c in plain.tool_calls
    ]


def test_a_round_trip_with_the_tool_result(client, proxy):
    first = (
        client.chat.completions.create(model="smollm", messages=MESSAGES, tools=[WEATHER], tool_choice="required", **SAMPLING)
        .choices[0]
        .message
    )
    call = first.tool_calls[0]
    history = [
        *MESSAGES,
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "22 degrees celsius and sunny"},
    ]
    prompt = requests.post(
        proxy.url + "/v1/internal/chat-prompt", timeout=30, json={"messages": history, "tools": [WEATHER]}
    ).json()["prompt"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": ' in prompt
    assert "22 degrees celsius and sunny" in prompt
    answer = client.chat.completions.create(
        model="smollm", messages=history, tools=[WEATHER], tool_choice="none", **SAMPLING
    ).choices[0]
    assert answer.finish_reason in ("stop", "length")
    assert answer.message.content and answer.message.tool_calls is None


def test_auto_lets_the_model_answer_in_text(client):
    answer = client.chat.completions.create(
        model="smollm",
        tools=[WEATHER],
        tool_choice="auto",
        **SAMPLING,
        messages=[{"role": "user", "content": "Say hello in French, nothing else."}],
    ).choices[0]
    assert answer.message.content or answer.message.tool_calls
    if answer.message.tool_calls:  # a call made under the lazy grammar is still a valid call
        assert answer.finish_reason == "tool_calls"
        assert_valid_weather_call(answer.message.tool_calls[0].function.name, answer.message.tool_calls[0].function.arguments)


def test_langchain_bind_tools_invoke_and_stream(proxy):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        base_url=proxy.url + "/v1", api_key="sk-no-key", model="smollm", temperature=0, max_tokens=120, max_retries=0
    )
    bound = model.bind_tools([WEATHER], tool_choice="get_weather")
    message = bound.invoke(MESSAGES)
    [call] = message.tool_calls
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    jsonschema_rs.validate(WEATHER["function"]["parameters"], call["args"])
    gathered = None
    for chunk in bound.stream(MESSAGES):
        gathered = chunk if gathered is None else gathered + chunk
    assert [(c["name"], c["args"]) for c in gathered.tool_calls] == [(call["name"], call["args"])]


def test_litellm_gets_tool_calls(proxy, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    response = litellm.completion(
        model="openai/smollm",
        api_base=proxy.url + "/v1",
        api_key="sk-no-key",
        messages=MESSAGES,
        tools=[WEATHER],
        tool_choice="required",
        **SAMPLING,
    )
    call = response.choices[0].message.tool_calls[0]
    assert response.choices[0].finish_reason == "tool_calls"
    assert_valid_weather_call(call.function.name, call.function.arguments)
