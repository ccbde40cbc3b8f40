"""Anthropic's Messages API end to end: the official `anthropic` SDK against the proxy in front of the
real llama-server with SmolLM2, as Claude Code reaches it (model names like claude-sonnet-4-5, any
max_tokens, x-api-key or a bearer token)."""

from __future__ import annotations

import anthropic
import jsonschema_rs
import pytest
import requests

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
# Today's SDK no longer has `temperature` (Claude Code and older SDKs send it); the proxy takes it.
SAMPLING = {"model": "claude-sonnet-4-5", "max_tokens": 200, "extra_body": {"temperature": 0}}


def claude_client(url: str, **options) -> anthropic.Anthropic:
    options.setdefault("api_key", "sk-no-key")
    return anthropic.Anthropic(base_url=url, max_retries=0, timeout=120, **options)


@pytest.fixture(scope="module")
def claude(proxy) -> anthropic.Anthropic:
    return claude_client(proxy.url)


def test_create_answers_with_a_message(claude):
    message = claude.messages.create(messages=HELLO, **SAMPLING)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sonnet-4-5"
    [block] = message.content
    assert block.type == "text" and block.text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 200


def test_max_tokens_beyond_the_context_is_an_upper_bound(claude):
    """Claude Code asks for 32000 tokens; a slot of this llama-server has 1024 tokens of context."""
    with claude.messages.stream(messages=HELLO, **{**SAMPLING, "max_tokens": 32000}) as stream:
        message = stream.get_final_message()
    assert message.content[0].text.strip()
    assert message.usage.input_tokens + message.usage.output_tokens <= 1024


def test_stream_text_is_the_final_message_and_the_non_streamed_one(claude):
    with claude.messages.stream(messages=HELLO, **SAMPLING) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text == final.content[0].text
    assert streamed_text == claude.messages.create(messages=HELLO, **SAMPLING).content[0].text


def test_stop_sequences_end_with_stop_sequence(claude):
    message = claude.messages.create(
        messages=[{"role": "user", "content": "Count from 1 to 20, one per line."}], stop_sequences=["5"], **SAMPLING
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "5")
    assert "5" not in message.content[0].text


def test_tool_use_with_a_named_tool_and_the_result_round_trip(claude):
    request = {"messages": QUESTION, "tools": [WEATHER], **SAMPLING}
    message = claude.messages.create(tool_choice={"type": "tool", "name": "get_weather"}, **request)
    assert message.stop_reason == "tool_use"
    [call] = [block for block in message.content if block.type == "tool_use"]
    assert call.name == "get_weather" and call.id
    jsonschema_rs.validate(WEATHER["input_schema"], call.input)

    history = [
        *QUESTION,
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "22 degrees celsius and sunny"}]},
    ]
    answer = claude.messages.create(**{**request, "messages": history}, tool_choice={"type": "none"})
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [block.type for block in answer.content] == ["text"] and answer.content[0].text.strip()


def test_streamed_tool_use_is_the_non_streamed_one(claude):
    request = {"messages": QUESTION, "tools": [WEATHER], "tool_choice": {"type": "any"}, **SAMPLING}
    plain = claude.messages.create(**request)
    partial_json = []
    with claude.messages.stream(**request) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial_json.append(event.delta.partial_json)
        streamed = stream.get_final_message()
    assert len(partial_json) > 3  # held to a grammar, the arguments arrive as written
    assert [(b.name, b.input) for b in streamed.content if b.type == "tool_use"] == [
        (b.name, b.input) for b in plain.content if b.type == "tool_use"
    ]
    assert streamed.stop_reason == plain.stop_reason == "tool_use"


def test_count_tokens_is_the_prompt_the_model_reads(claude):
    counted = claude.messages.count_tokens(model="claude-haiku-4-5", messages=HELLO, system="Be brief.")
    message = claude.messages.create(messages=HELLO, system="Be brief.", **{**SAMPLING, "max_tokens": 5})
    # as in Anthropic's API, the prompt is what was computed plus what was read from the cache
    assert counted.input_tokens == message.usage.input_tokens + message.usage.cache_read_input_tokens > 0
    with_tools = claude.messages.count_tokens(model="claude-haiku-4-5", messages=HELLO, system="Be brief.", tools=[WEATHER])
    assert with_tools.input_tokens > counted.input_tokens


def test_images_to_a_text_only_model_are_refused_in_anthropics_error_shape(claude):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            messages=[{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}], **SAMPLING
        )
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.0.content.1: model 'llama.cpp' does not take images: its llama-server was started "
            "without a vision projector (--mmproj)",
        },
    }


def test_keys_by_x_api_key_or_bearer_token(llama_server, start_proxy):
    proxy = start_proxy("--llama-api", llama_server.url, "--api-key", "sk-team")
    by_header = claude_client(proxy.url, api_key="sk-team").messages.create(messages=HELLO, **{**SAMPLING, "max_tokens": 5})
    assert by_header.content
    # Claude Code with ANTHROPIC_AUTH_TOKEN sends `Authorization: Bearer`.
    by_token = claude_client(proxy.url, api_key=None, auth_token="sk-team")
    assert by_token.messages.count_tokens(model="m", messages=HELLO).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError) as caught:
        claude_client(proxy.url, api_key="sk-wrong").messages.create(messages=HELLO, **SAMPLING)
    assert caught.value.body["error"]["type"] == "authentication_error"
    response = requests.post(proxy.url + "/v1/messages/count_tokens", json={"model": "m", "messages": HELLO}, timeout=30)
    assert response.status_code == 401 and response.json()["type"] == "error"
