"""The fast per-token frame is byte for byte what encoding the whole chunk would give."""

from __future__ import annotations

import json

import pytest

from api_like_oai import sse
from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.openai_shape import ChatShape, CompletionShape


@pytest.mark.parametrize("shape", [ChatShape("m"), CompletionShape("m")], ids=["chat", "completion"])
@pytest.mark.parametrize("text", [" Paris", "\n", 'quote " and \\ backslash', "é ✓ 🐱 你好", "\u2028", "\x00"])
@pytest.mark.parametrize("index", [0, 7, 12])
def test_content_frame_equals_the_encoded_chunk(shape, text, index):
    event = GenerationEvent(text=text, index=index)
    (chunk,) = shape.chunks(event)
    assert shape.content_frame(event) == sse.frame(chunk)
    assert json.loads(shape.content_frame(event)[6:])["choices"][0]["index"] == index


def test_events_needing_more_than_text_take_the_general_path():
    assert ChatShape("m").content_frame(GenerationEvent(text="x", finish_reason="stop")) is None
    assert ChatShape("m", logprobs=True).content_frame(GenerationEvent(text="x")) is None
    assert CompletionShape("m", logprobs=1).content_frame(GenerationEvent(text="x")) is None
    assert ChatShape("m").content_frame(GenerationEvent(text="")) is None


@pytest.mark.parametrize("arguments", ['{"city": "Zü', 'rich"}', '\\" \n', ""])
@pytest.mark.parametrize("index, call_index", [(0, 0), (3, 12)])
def test_a_tool_call_arguments_frame_equals_the_encoded_chunk(arguments, index, call_index):
    from api_like_oai.tools.parser import ToolCallDelta

    shape = ChatShape("m", service_tier="default")
    event = GenerationEvent(index=index, tool_calls=(ToolCallDelta(call_index, arguments=arguments),))
    (chunk,) = shape.chunks(event)
    assert shape.content_frame(event) == sse.frame(chunk)


def test_a_call_s_first_delta_and_legacy_functions_take_the_general_path():
    from api_like_oai.tools.parser import ToolCallDelta

    first = GenerationEvent(tool_calls=(ToolCallDelta(0, "call_x", "f"),))
    assert ChatShape("m").content_frame(first) is None
    piece = GenerationEvent(tool_calls=(ToolCallDelta(0, arguments="{}"),))
    assert ChatShape("m", legacy_functions=True).content_frame(piece) is None
