"""Every answer of the Messages API, streamed and not, field by field against the `anthropic` SDK's own
types (pinned in setup.cfg): the message is `anthropic.types.Message` and each streamed event its Raw*Event
type, read strictly from the JSON (a string is no number), with every field the type declares present
(null where the proxy has nothing to say, not left out) and no field the type does not know, at every
level (usage, content blocks, deltas). Covered: text, a thought (<think>), a tool call, each stop reason,
and usage with a prompt partly read from llama.cpp's cache. A scripted llama.cpp with a thinking template
that calls tools as Hermes does writes the answers."""

from __future__ import annotations

import json

import pytest
import requests
from anthropic import types
from pydantic import BaseModel

from api_like_oai.dialects.anthropic_answers import MessageResponse

from ..scripted_model import THINKING_TEMPLATE
from .conftest import HERMES_CALL
from .test_anthropic_stream import events_of

CHAT_TEMPLATE = THINKING_TEMPLATE  # /props reports it (the `fake` fixture)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "Weather in Zürich?"}],
    "tools": [WEATHER],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
}
THOUGHT = ["<th", "ink>", "\nI need", " the weather.", "\n</th", "ink>", "\n\n"]
EVENT_TYPES: dict[str, type[BaseModel]] = {
    "message_start": types.RawMessageStartEvent,
    "content_block_start": types.RawContentBlockStartEvent,
    "content_block_delta": types.RawContentBlockDeltaEvent,
    "content_block_stop": types.RawContentBlockStopEvent,
    "message_delta": types.RawMessageDeltaEvent,
    "message_stop": types.RawMessageStopEvent,
}
# name -> (what the model writes, how its generation stops, the stop reason, the content block types)
CASES = {
    "text": (["Sunny", " and", " mild."], "eos", "end_turn", ["text"]),
    "thinking": ([*THOUGHT, "Sunny."], "eos", "end_turn", ["thinking", "text"]),
    "tool_use": ([*THOUGHT, *HERMES_CALL], "eos", "tool_use", ["thinking", "text", "tool_use"]),
    "max_tokens": (["Sunny", " and"], "limit", "max_tokens", ["text"]),
    "stop_sequence": (["Sunny", " and"], "word", "stop_sequence", ["text"]),
}


def exactly(model: type[BaseModel], data: dict) -> BaseModel:
    """`data` read as `model` from its JSON, strictly; an AssertionError names the place where a field
    the type declares is missing or one it does not know is present."""
    parsed = model.model_validate_json(json.dumps(data), strict=True)
    _same_fields(parsed, data, model.__name__)
    return parsed


def _same_fields(value, data, path: str) -> None:
    if isinstance(value, BaseModel):
        fields = {field.alias or name: name for name, field in type(value).model_fields.items()}
        assert set(data) == set(fields), f"{path}: missing {set(fields) - set(data)}, unknown {set(data) - set(fields)}"
        for key, name in fields.items():
            _same_fields(getattr(value, name), data[key], f"{path}.{key}")
    elif isinstance(value, list):
        for index, (item, raw) in enumerate(zip(value, data, strict=True)):
            _same_fields(item, raw, f"{path}[{index}]")


@pytest.fixture
def model(fake):
    """The scripted model, set back to a plain end of turn and no cache after each test."""
    yield fake
    fake.stop_type, fake.stopping_word, fake.cached_tokens = "eos", "", None


def answer(proxy, fake, case: str, stream: bool) -> requests.Response:
    tokens, stop_type, _, _ = CASES[case]
    fake.tokens, fake.stop_type, fake.stopping_word = tokens, stop_type, "STOP"
    body = {**BODY, "stream": stream, **({"stop_sequences": ["STOP"]} if stop_type == "word" else {})}
    response = requests.post(proxy.url + "/v1/messages", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_message_is_the_sdks_message_field_by_field(proxy, model, case):
    data = answer(proxy, model, case, stream=False).json()
    message = exactly(types.Message, data)
    MessageResponse.model_validate(data)  # and the answer /openapi.json documents
    _, _, stop_reason, block_types = CASES[case]
    assert message.stop_reason == stop_reason and [block.type for block in message.content] == block_types
    assert message.stop_sequence == ("STOP" if case == "stop_sequence" else None)
    assert message.usage.output_tokens > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_streamed_event_is_its_sdk_type_field_by_field(proxy, model, case):
    events = [exactly(EVENT_TYPES[name], data) for name, data in events_of(answer(proxy, model, case, stream=True))]
    assert [event.type for event in events][:1] + [event.type for event in events][-2:] == [
        "message_start",
        "message_delta",
        "message_stop",
    ]
    _, _, stop_reason, block_types = CASES[case]
    assert [e.content_block.type for e in events if e.type == "content_block_start"] == block_types
    assert events[-2].delta.stop_reason == stop_reason


@pytest.mark.parametrize("stream", [False, True])
def test_the_blocks_say_what_the_model_wrote(proxy, model, stream):
    response = answer(proxy, model, "tool_use", stream)
    if stream:
        deltas = [data["delta"] for name, data in events_of(response) if name == "content_block_delta"]
        assert "".join(d.get("thinking", "") for d in deltas) == "I need the weather."
        assert json.loads("".join(d.get("partial_json", "") for d in deltas)) == {"city": "Zürich", "unit": "c"}
        assert [d["type"] for d in deltas if d["type"] == "signature_delta"] == ["signature_delta"]
        return
    thinking, text, call = exactly(types.Message, response.json()).content
    assert thinking.thinking == "I need the weather." and thinking.signature
    assert text.text == "Let me check. " and text.citations is None
    assert (call.name, call.input, call.caller.type, call.toolset_name) == (
        "get_weather",
        {"city": "Zürich", "unit": "c"},
        "direct",
        None,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_usage_counts_the_cache_and_the_thought(proxy, model, stream):
    model.cached_tokens = 2
    response = answer(proxy, model, "thinking", stream)
    if stream:
        events = events_of(response)
        start, end = events[0][1]["message"]["usage"], events[-2][1]["usage"]
        usage = exactly(types.MessageDeltaUsage, end)
        assert (start["input_tokens"], start["cache_read_input_tokens"], start["output_tokens"]) == (1, 2, 0)
        assert start["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    else:
        usage = exactly(types.Message, response.json()).usage
        assert usage.cache_creation.ephemeral_5m_input_tokens == usage.cache_creation.ephemeral_1h_input_tokens == 0
        assert usage.service_tier == "standard" and usage.server_tool_use is None
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1, 2, 0)
    assert 0 < usage.output_tokens_details.thinking_tokens < usage.output_tokens


def test_the_documented_answer_declares_every_field_of_the_sdks_message():
    """/openapi.json's MessageResponse (the proxy's pydantic answer model) names what the answers carry."""
    assert set(types.Message.model_fields) <= set(MessageResponse.model_fields)
    usage = MessageResponse.model_fields["usage"].annotation
    assert set(types.Usage.model_fields) <= set(usage.model_fields)
