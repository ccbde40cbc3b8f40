"""The Anthropic and Responses shapes without a server: blocks, the fast per-token frame (byte for byte
what encoding the event gives), and a folded answer equal to what its stream builds."""

from __future__ import annotations

import json

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.services.blocks import DELTA, REASONING, START, STOP, TEXT, Blocks
from api_like_oai.services.generation import ChoiceFold
from api_like_oai.tools.parser import ToolCallDelta

CALL = ToolCallDelta(index=0, id="call_1", name="get_weather", arguments='{"city": ')
EVENTS = [GenerationEvent(text="Let me", prompt_tokens=5, completion_tokens=1),
          GenerationEvent(text=" check.", completion_tokens=2),
          GenerationEvent(tool_calls=(CALL,), completion_tokens=3),
          GenerationEvent(tool_calls=(ToolCallDelta(index=0, id=None, name=None, arguments='"Oslo"}'),)),
          GenerationEvent(text=" Done.", completion_tokens=4),
          GenerationEvent(finish_reason="tool_calls", prompt_tokens=5, completion_tokens=4)]
USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}}


def shapes():
    return {"anthropic": lambda: MessagesShape("claude", ["END"]),
            "responses": lambda: ResponsesShape("gpt", ResponsesRequest(input="hi"))}


def test_blocks_cut_text_and_calls_in_order():
    blocks = Blocks()
    changes = [change for event in EVENTS for change in blocks.add(event)] + blocks.close()
    assert [(kind, block.index, piece) for kind, block, piece in changes] == [
        (START, 0, ""), (DELTA, 0, "Let me"), (DELTA, 0, " check."), (STOP, 0, ""),
        (START, 1, ""), (DELTA, 1, '{"city": '), (DELTA, 1, '"Oslo"}'), (STOP, 1, ""),
        (START, 2, ""), (DELTA, 2, " Done."), (STOP, 2, "")]
    assert blocks.text() == "Let me check. Done."
    assert blocks.tool_calls() == [{"id": "call_1", "type": "function",
                                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]


def test_blocks_put_the_thought_in_its_own_block_before_the_text():
    blocks = Blocks()
    thought = [GenerationEvent(reasoning="Paris is"), GenerationEvent(reasoning=" the capital."),
               GenerationEvent(text="Paris.", reasoning="")]
    changes = [change for event in thought for change in blocks.add(event)] + blocks.close()
    assert [(kind, block.kind, piece) for kind, block, piece in changes] == [
        (START, REASONING, ""), (DELTA, REASONING, "Paris is"), (DELTA, REASONING, " the capital."),
        (STOP, REASONING, ""), (START, TEXT, ""), (DELTA, TEXT, "Paris."), (STOP, TEXT, "")]
    assert (blocks.reasoning(), blocks.text()) == ("Paris is the capital.", "Paris.")


@pytest.mark.parametrize("name", ["anthropic", "responses"])
@pytest.mark.parametrize("text", [" Paris", "\n", 'quote " and \\ backslash', "é ✓ 🐱 你好", "\u2028", "\x00"])
def test_content_frame_equals_the_encoded_event(name, text):
    fast, general = shapes()[name](), shapes()[name]()
    general.__dict__.update(id=fast.id, hex=getattr(fast, "hex", None))   # the same answer, written twice
    for shape in (fast, general):
        shape.openings(0)
        shape.chunks(GenerationEvent(tool_calls=(CALL,)))
        shape.chunks(GenerationEvent(text="first", prompt_tokens=5))   # a second block, open
    event = GenerationEvent(text=text)
    frame = fast.content_frame(event)
    (chunk,) = general.chunks(event)
    assert frame == general.frame(chunk)
    data = json.loads(frame.split(b"\ndata: ")[1])
    assert data.get("index", data.get("output_index")) == 1


@pytest.mark.parametrize("name", ["anthropic", "responses"])
def test_events_needing_more_than_text_take_the_general_path(name):
    shape = shapes()[name]()
    assert shape.content_frame(GenerationEvent(text="x", prompt_tokens=1)) is None   # no text block open yet
    shape.chunks(GenerationEvent(text="x", prompt_tokens=1))
    assert shape.content_frame(GenerationEvent(text="x", finish_reason="stop")) is None
    assert shape.content_frame(GenerationEvent(tool_calls=(CALL,))) is None
    assert shape.content_frame(GenerationEvent(text="")) is None


def fold(shape) -> dict:
    folded = ChoiceFold(1)
    for event in EVENTS:
        folded.add(event)
    return shape.response(folded.choices(), USAGE)


def stream(shape) -> list[dict]:
    chunks = list(shape.openings(0))
    for event in EVENTS:
        frame = shape.content_frame(event)
        chunks += [json.loads(frame.split(b"\ndata: ")[1])] if frame else shape.chunks(event)
    return chunks + shape.closings(USAGE)


def test_anthropic_stream_builds_the_folded_message():
    streamed = stream(MessagesShape("claude"))
    message = streamed[0]["message"]
    for chunk in streamed[1:]:
        if chunk["type"] == "content_block_start":
            message["content"].append(chunk["content_block"] | ({"text": ""} if chunk["content_block"]["type"] == "text"
                                                                else {"input": ""}))
        elif chunk["type"] == "content_block_delta":
            block = message["content"][chunk["index"]]
            delta = chunk["delta"]
            block["text" if "text" in delta else "input"] += delta.get("text", delta.get("partial_json", ""))
        elif chunk["type"] == "message_delta":
            message |= chunk["delta"] | {"usage": chunk["usage"]}
    message["content"][1]["input"] = json.loads(message["content"][1]["input"])
    assert message == fold(MessagesShape("claude")) | {"id": message["id"]}
    assert message["stop_reason"] == "tool_use"
    assert [block["type"] for block in message["content"]] == ["text", "tool_use", "text"]


def test_responses_stream_ends_with_the_folded_response():
    shape = ResponsesShape("gpt", ResponsesRequest(input="hi"))
    streamed = stream(shape)
    folded = fold(shape)
    assert streamed[-1]["type"] == "response.completed" and streamed[-1]["response"] == folded
    assert [item["type"] for item in folded["output"]] == ["message", "function_call", "message"]
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    done_items = [e["item"] for e in streamed if e["type"] == "response.output_item.done"]
    assert done_items == folded["output"]


@pytest.mark.parametrize("finish_reason, stop_word, expected", [
    ("stop", None, ("end_turn", None)), ("stop", "END", ("stop_sequence", "END")),
    ("stop", "<|im_end|>", ("end_turn", None)), ("length", None, ("max_tokens", None)),
    ("tool_calls", None, ("tool_use", None)),
])
def test_anthropic_stop_reasons(finish_reason, stop_word, expected):
    choice = {"blocks": [], "finish_reason": finish_reason, "stop_word": stop_word}
    message = MessagesShape("claude", ["END"]).response([choice], USAGE)
    assert (message["stop_reason"], message["stop_sequence"]) == expected
