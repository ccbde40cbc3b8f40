"""Anthropic's Messages API against a scripted replay llama.cpp: the exact event sequence of a stream
(text, a tool call as a tool-trained model writes it, a failure after the start), the stop reasons,
the prompt and n_predict sent upstream, and the SDK's view of the same answers."""

from __future__ import annotations

import json

import anthropic
import pytest
import requests

from .conftest import FAKE_CONTEXT, HERMES_ARGUMENTS, HERMES_CALL

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
QUESTION = [{"role": "user", "content": "Weather in Zürich?"}]
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": QUESTION}


def delta_usage(output_tokens: int, input_tokens: int = 3, cached_tokens: int = 0) -> dict:
    """message_delta's usage for the fake's 3-token prompt, by default none of it from llama.cpp's cache."""
    return {
        "input_tokens": input_tokens - cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
        "output_tokens": output_tokens,
        "output_tokens_details": {"thinking_tokens": 0},
        "server_tool_use": None,
    }


def usage(output_tokens: int, input_tokens: int = 3, cached_tokens: int = 0) -> dict:
    """The message's usage: message_delta's, and nothing written to the cache, the standard tier and speed."""
    return delta_usage(output_tokens, input_tokens, cached_tokens) | {
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "speed": "standard",
        "inference_geo": None,
    }


# Fields of the message and of message_delta's delta that never apply here (tests/faults/test_anthropic_fields.py)
NOT_APPLICABLE = {"stop_details": None, "container": None}


def events_of(response: requests.Response) -> list[tuple[str, dict]]:
    """(event name, data) of each event, checking each is exactly `event: NAME`, `data: JSON`, a blank line,
    and that the name is the data's type."""
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    raw_events = response.text.split("\n\n")
    assert raw_events[-1] == ""
    events = []
    for raw in raw_events[:-1]:
        event_line, data_line = raw.split("\n")
        name, data = event_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert event_line.startswith("event: ") and data_line.startswith("data: ") and data["type"] == name
        events.append((name, data))
    return events


def post(qwen_proxy, body: dict, path: str = "/v1/messages") -> requests.Response:
    return requests.post(qwen_proxy.url + path, json=body, timeout=30)


def test_text_stream_is_anthropics_event_sequence(qwen_proxy):
    events = events_of(post(qwen_proxy, {**BODY, "stream": True}))
    [(_, start)] = events[:1]
    message = start["message"]
    assert message["id"].startswith("msg_") and message["model"] == "claude-sonnet-4-5"
    assert message == {
        "id": message["id"],
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        **NOT_APPLICABLE,
        "diagnostics": None,
        "usage": usage(0),
    }
    assert events[1:] == [
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": None}},
        ),
        *[
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}})
            for t in (" Hello", ",", " world", "!")
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None, **NOT_APPLICABLE},
                "usage": delta_usage(4),
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


@pytest.mark.parametrize(
    "tool_choice, argument_pieces",
    [
        ({"type": "auto"}, [HERMES_ARGUMENTS]),  # no grammar: the call is given out once complete
        ({"type": "tool", "name": "get_weather"}, None),  # a grammar holds it: the arguments stream as written
    ],
)
def test_tool_use_stream_is_anthropics_event_sequence(replay, qwen_proxy, tool_choice, argument_pieces):
    replay.tokens = HERMES_CALL
    events = events_of(post(qwen_proxy, {**BODY, "stream": True, "tools": [WEATHER], "tool_choice": tool_choice}))
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "content_block_delta"]
    text_deltas = [data["delta"]["text"] for name, data in events if data.get("index") == 0 and name == "content_block_delta"]
    assert "".join(text_deltas) == "Let me check. "
    tool_events = [data for _, data in events if data.get("index") == 1]
    assert tool_events[0]["type"] == "content_block_start"
    call = tool_events[0]["content_block"]
    assert call == {
        "type": "tool_use",
        "id": call["id"],
        "name": "get_weather",
        "input": {},
        "caller": {"type": "direct"},
        "toolset_name": None,
    }
    assert call["id"].startswith("call_")
    pieces = [data["delta"]["partial_json"] for data in tool_events[1:-1]]
    assert all(data["delta"]["type"] == "input_json_delta" for data in tool_events[1:-1])
    assert "".join(pieces) == HERMES_ARGUMENTS
    if argument_pieces is not None:
        assert pieces == argument_pieces
    else:
        assert len(pieces) > 1
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * len(text_deltas),
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * len(pieces),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None, **NOT_APPLICABLE}
    assert events[-2][1]["usage"] == delta_usage(len(HERMES_CALL))


def test_streamed_and_non_streamed_tool_use_agree(replay, qwen_proxy):
    replay.tokens = HERMES_CALL
    body = {**BODY, "tools": [WEATHER]}
    message = post(qwen_proxy, body).json()
    call_id = message["content"][1]["id"]
    assert message == {
        "id": message["id"],
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Let me check. ", "citations": None},
            {
                "type": "tool_use",
                "id": call_id,
                "name": "get_weather",
                "input": {"city": "Zürich", "unit": "c"},
                "caller": {"type": "direct"},
                "toolset_name": None,
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        **NOT_APPLICABLE,
        "diagnostics": None,
        "usage": usage(len(HERMES_CALL)),
    }
    client = anthropic.Anthropic(base_url=qwen_proxy.url, api_key="k", max_retries=0)
    with client.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    assert [block.type for block in streamed.content] == ["text", "tool_use"]
    assert streamed.content[0].text == "Let me check. "
    assert (streamed.content[1].name, streamed.content[1].input) == ("get_weather", {"city": "Zürich", "unit": "c"})
    assert streamed.stop_reason == "tool_use"


@pytest.mark.parametrize(
    "stop_type, stopping_word, expected",
    [
        ("word", "\n\n", ("stop_sequence", "\n\n")),  # one of the request's stop_sequences
        ("word", "<|im_end|>", ("end_turn", None)),  # the template's end of turn
        ("eos", "", ("end_turn", None)),
        ("limit", "", ("max_tokens", None)),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reasons(replay, qwen_proxy, stop_type, stopping_word, expected, stream):
    replay.stop_type, replay.stopping_word = stop_type, stopping_word
    body = {**BODY, "stop_sequences": ["\n\n", "END"], "stream": stream}
    if stream:
        delta = events_of(post(qwen_proxy, body))[-2][1]["delta"]
        assert (delta["stop_reason"], delta["stop_sequence"]) == expected
    else:
        message = post(qwen_proxy, body).json()
        assert (message["stop_reason"], message["stop_sequence"]) == expected
    assert replay.requests[-1]["stop"][-2:] == ["\n\n", "END"]


def test_max_tokens_is_clamped_to_what_the_context_leaves(replay, qwen_proxy):
    assert post(qwen_proxy, BODY).status_code == 200
    sent = replay.requests[-1]
    prompt_tokens = len(sent["prompt"].split())  # how the replay counts tokens
    assert sent["n_predict"] == FAKE_CONTEXT - prompt_tokens
    assert post(qwen_proxy, {**BODY, "max_tokens": 7}).status_code == 200
    assert replay.requests[-1]["n_predict"] == 7


def test_a_tool_round_trip_reaches_the_prompt(replay, qwen_proxy):
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Zürich"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "22 degrees, sunny"}]},
                {"type": "text", "text": "Thanks!", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    body = {
        **BODY,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": history,
        "tools": [WEATHER],
    }
    assert post(qwen_proxy, body).status_code == 200
    prompt = replay.requests[-1]["prompt"]
    assert prompt.startswith("<|im_start|>system\nBe brief.")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>' in prompt
    assert "<tool_response>\n22 degrees, sunny\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n")


def test_a_final_assistant_message_is_continued(replay, qwen_proxy):
    body = {**BODY, "messages": [*QUESTION, {"role": "assistant", "content": "It is"}]}
    assert post(qwen_proxy, body).status_code == 200
    assert replay.requests[-1]["prompt"].endswith("<|im_start|>assistant\nIt is")


def test_count_tokens_is_the_rendered_prompts(replay, qwen_proxy):
    body = {"model": "claude-haiku-4-5", "messages": QUESTION, "tools": [WEATHER]}
    response = post(qwen_proxy, body, "/v1/messages/count_tokens?beta=true")
    assert response.status_code == 200
    assert post(qwen_proxy, {**body, "max_tokens": 5}).status_code == 200
    assert response.json() == {"input_tokens": len(replay.requests[-1]["prompt"].split())}
    without_tools = post(qwen_proxy, {"model": "m", "messages": QUESTION}, "/v1/messages/count_tokens").json()
    assert without_tools["input_tokens"] < response.json()["input_tokens"]


def test_a_failure_after_the_start_is_an_error_event(replay, qwen_proxy):
    replay.behaviour = "die_mid_stream"
    events = events_of(post(qwen_proxy, {**BODY, "stream": True}))
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "error",
    ]
    error = events[-1][1]  # the connection to llama.cpp died: the upstream is unavailable
    assert error["error"]["type"] == "overloaded_error" and "llama.cpp" in error["error"]["message"]
    assert set(error) == {"type", "error"} and set(error["error"]) == {"type", "message"}
    client = anthropic.Anthropic(base_url=qwen_proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"), client.messages.stream(**BODY) as stream:
        stream.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_loading_is_529_overloaded(replay, qwen_proxy, stream):
    replay.behaviour = "loading"
    response = post(qwen_proxy, {**BODY, "stream": stream})
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"
    assert response.headers.get("Retry-After")
    with pytest.raises(anthropic.OverloadedError):
        anthropic.Anthropic(base_url=qwen_proxy.url, api_key="k", max_retries=0).messages.create(**{**BODY, "max_tokens": 100})


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_use_cut_by_max_tokens_has_json_input_or_is_text(replay, qwen_proxy, stream):
    """A grammar holds the call, so its arguments stream as written: cut by the token limit, the
    stream closes them into JSON (Claude Code parses every input); the fold gives the text back."""
    replay.tokens, replay.stop_type = HERMES_CALL[:12], "limit"
    body = {**BODY, "stream": stream, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}}
    if not stream:
        message = post(qwen_proxy, body).json()
        assert [block["type"] for block in message["content"]] == ["text"]
        assert message["content"][0]["text"] == "".join(HERMES_CALL[:12]) and message["stop_reason"] == "max_tokens"
        return
    events = events_of(post(qwen_proxy, body))
    pieces = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert json.loads("".join(pieces)) == {"city": "Zür"}
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
