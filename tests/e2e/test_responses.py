"""OpenAI's Responses API end to end: the official `openai` SDK (strict response validation) against the
proxy in front of the real llama-server with SmolLM2, as Codex and the Agents SDK reach it."""

from __future__ import annotations

import json

import jsonschema_rs
import openai
import pytest
import requests

from ..open_responses import resource, spec_event

WEATHER = {
    "type": "function",
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
}
QUESTION = "What is the weather like in Paris today?"
SAMPLING = {"model": "gpt-5-codex", "temperature": 0, "max_output_tokens": 200}


def test_create_answers_with_output_text(client):
    response = client.responses.create(input="Say hello in one short sentence.", instructions="Be brief.", **SAMPLING)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed" and response.model == "gpt-5-codex"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.output_text.strip() and response.output_text == message.content[0].text
    assert (
        response.usage.input_tokens > 0
        and response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    )


def test_streamed_deltas_are_the_output_text(client):
    request = {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say hello in one short sentence."}]}],
        **SAMPLING,
    }
    events = list(client.responses.create(**request, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:4]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type == "response.completed"
    assert deltas and deltas == events[-1].response.output_text
    assert deltas == client.responses.create(**request).output_text
    with client.responses.stream(**request) as stream:
        assert stream.get_final_response().output_text == deltas


def test_max_output_tokens_ends_incomplete(client):
    response = client.responses.create(**{**SAMPLING, "max_output_tokens": 3}, input="Write a long story about a cat.")
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3


def test_a_function_call_and_its_output_round_trip(client):
    request = {"input": QUESTION, "tools": [WEATHER], **SAMPLING}
    first = client.responses.create(**request, tool_choice={"type": "function", "name": "get_weather"})
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema_rs.validate(WEATHER["parameters"], json.loads(call.arguments))

    history = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "22 degrees celsius and sunny"},
    ]
    answer = client.responses.create(**{**request, "input": history}, tool_choice="none")
    assert answer.status in ("completed", "incomplete")
    assert [item.type for item in answer.output] == ["message"] and answer.output_text.strip()


def test_streamed_function_call_is_the_non_streamed_one(client):
    request = {"input": QUESTION, "tools": [WEATHER], "tool_choice": "required", **SAMPLING}
    plain = [item for item in client.responses.create(**request).output if item.type == "function_call"]
    events = list(client.responses.create(**request, stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    argument_deltas = [
        e.delta for e in events if e.type == "response.function_call_arguments.delta" and e.item_id == done[0].item_id
    ]
    assert len(argument_deltas) > 3 and "".join(argument_deltas) == done[0].arguments == plain[0].arguments
    streamed = [item for item in events[-1].response.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(c.name, c.arguments) for c in plain]


def test_json_schema_text_format(client):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 20}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        input="What is the capital of France?",
        **SAMPLING,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema}},
    )
    jsonschema_rs.validate(schema, json.loads(response.output_text))


def test_unknown_responses_are_clear_errors(client):
    with pytest.raises(openai.NotFoundError, match="Response with id 'resp_123' not found"):
        client.responses.retrieve("resp_123")
    with pytest.raises(openai.NotFoundError, match="Previous response with id 'resp_123' not found") as caught:
        client.responses.create(input="Hi", previous_response_id="resp_123", **SAMPLING)
    assert caught.value.body["code"] == "previous_response_not_found"


def test_tools_only_openai_runs_are_set_aside_and_named(client):
    raw = client.responses.with_raw_response.create(
        input=QUESTION,
        tools=[{"type": "web_search"}, WEATHER, {"type": "code_interpreter", "container": "auto"}],
        tool_choice={"type": "web_search_preview"},
        **SAMPLING,
    )
    assert raw.headers["X-Tools-Set-Aside"] == "web_search, code_interpreter"
    assert raw.headers["X-Tool-Choice-Set-Aside"] == "web_search_preview"
    response = raw.parse()
    assert response.status in ("completed", "incomplete")  # SmolLM2 may talk on past max_output_tokens
    assert [tool.type for tool in response.tools] == ["web_search", "function", "code_interpreter"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_answer_is_open_responses_resource_with_llama_servers_own_sampling(proxy, stream):
    """Left out, the sampling values are those llama-server says it uses (its /props: 0.8 and 0.95 unless
    started otherwise); every response object, streamed or not, is the spec's ResponseResource."""
    body = {"model": "gpt-5-codex", "input": "Say hello.", "max_output_tokens": 8, "stream": stream}
    reply = requests.post(proxy.url + "/v1/responses", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]
    responses = [event["response"] for event in events if "response" in event] if stream else [reply.json()]
    for response in responses:
        resource(response)
        assert (response["temperature"], response["top_p"], response["presence_penalty"], response["frequency_penalty"]) == (
            0.8,
            0.95,
            0.0,
            0.0,
        )
    assert all(spec_event(event) is not None for event in events)
