"""An OpenAI-compatible upstream's chat stream as the proxy's generation events (backends/openai.py)."""

from __future__ import annotations

import json

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.backends.openai import chat_events, sse_data, stream_chunks
from api_like_oai.errors import UpstreamError
from api_like_oai.tools.parser import ToolCallDelta


def chunk(delta: dict | None = None, finish_reason: str | None = None, usage: dict | None = None, **choice) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason, **choice}]
    return {"object": "chat.completion.chunk", "choices": choices, **({"usage": usage} if usage else {})}


def events(*chunks: dict) -> list[GenerationEvent]:
    return list(chat_events(chunks, new_id=lambda: "call_new"))


def test_content_reasoning_and_the_finish_with_usage_last():
    assert events(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "Hm."}),
        chunk({"reasoning": " Ok."}),
        chunk({"content": "Hi"}),
        chunk({}, "stop"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
    ) == [
        GenerationEvent(reasoning="Hm."),
        GenerationEvent(reasoning=" Ok."),
        GenerationEvent(text="Hi"),
        GenerationEvent(finish_reason="stop", prompt_tokens=5, completion_tokens=2),
    ]


def test_a_call_gives_its_id_and_name_once_then_arguments():
    got = events(
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": '{"x"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
    )
    assert [event.tool_calls for event in got[:-1]] == [
        (ToolCallDelta(0, "call_a", "f", ""),),
        (ToolCallDelta(0, arguments='{"x"'),),
        (ToolCallDelta(0, arguments=": 1}"),),
    ]
    assert got[-1].finish_reason == "tool_calls"


def test_calls_without_index_id_or_name_first_are_still_whole_calls():
    """Some servers send a whole call per delta without `index`, no id, or the name after the id."""
    got = events(
        chunk(
            {
                "tool_calls": [
                    {"id": "call_a", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "call_b", "function": {"name": "g", "arguments": "{}"}},
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 7, "function": {"arguments": '{"late": '}}]}),
        chunk({"tool_calls": [{"index": 7, "function": {"name": "h", "arguments": "1}"}}]}),
        chunk({}, "stop"),
    )
    assert [delta for event in got for delta in event.tool_calls or ()] == [
        ToolCallDelta(0, "call_a", "f", "{}"),
        ToolCallDelta(1, "call_b", "g", "{}"),
        ToolCallDelta(2, "call_new", "h", '{"late": 1}'),
    ]
    assert got[-1].finish_reason == "tool_calls"  # "stop" after calls is a tool-calls finish, as ours is


@pytest.mark.parametrize(
    "upstream, ours", [("stop", "stop"), ("length", "length"), ("function_call", "tool_calls"), ("content_filter", "stop")]
)
def test_finish_reasons(upstream, ours):
    assert events(chunk({}, upstream))[-1].finish_reason == ours


def test_vllms_stop_reason_is_the_stop_word():
    assert events(chunk({}, "stop", stop_reason="END"))[-1].stop_word == "END"
    assert events(chunk({}, "stop", stop_reason=128001))[-1].stop_word is None  # a token id


def test_a_stream_that_ends_before_finishing_is_an_upstream_error():
    with pytest.raises(UpstreamError, match="ended its stream before the answer finished"):
        events(chunk({"content": "Hi"}))


def test_sse_lines_split_anywhere_and_an_error_in_the_stream():
    raw = (
        b"".join(b"data: " + json.dumps(item).encode() + b"\n\n" for item in (chunk({"content": "a"}), chunk({}, "stop")))
        + b": keep-alive\n\ndata: [DONE]\n\n"
    )
    for size in (1, 7, len(raw)):
        pieces = [raw[start : start + size] for start in range(0, len(raw), size)]
        assert [event.text for event in chat_events(stream_chunks(sse_data(pieces), "u"))] == ["a", ""]
    with pytest.raises(UpstreamError, match="u: overloaded"):
        list(stream_chunks(sse_data([b'data: {"error": {"message": "overloaded"}}\n\n']), "u"))
    with pytest.raises(UpstreamError, match="malformed"):
        list(stream_chunks(sse_data([b"data: {nope\n\n"]), "u"))
