"""Anthropic's answer with the model's thought: a signed thinking block first, streamed as Anthropic
streams it (thinking_delta, then one signature_delta before the block stops), the streamed message
equal to the folded one whatever the display; and the context edits reported with the stop reason."""

from __future__ import annotations

import json

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.anthropic import THINKING
from api_like_oai.dialects.anthropic_edits import ContextEdits, ContextManagement
from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.sealing import Seal
from api_like_oai.services.generation import ChoiceFold
from api_like_oai.tools.parser import ToolCallDelta

SEAL = Seal(lambda: b"this installation's key")
THOUGHT = "The user wants Oslo's weather."
EVENTS = [
    GenerationEvent(reasoning="The user wants", prompt_tokens=5, completion_tokens=1),
    GenerationEvent(reasoning=" Oslo's weather.", completion_tokens=2),
    GenerationEvent(text="Checking.", completion_tokens=3),
    GenerationEvent(
        tool_calls=(ToolCallDelta(index=0, id="call_1", name="get_weather", arguments='{"city": '),), completion_tokens=4
    ),
    GenerationEvent(tool_calls=(ToolCallDelta(index=0, id=None, name=None, arguments='"Oslo"}'),)),
    GenerationEvent(finish_reason="tool_calls", prompt_tokens=5, completion_tokens=6),
]
USAGE = {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}}


def shape(display: str | None = "summarized", edits: ContextEdits | None = None) -> MessagesShape:
    return MessagesShape("claude", None, SEAL, display, edits)


def streamed(messages_shape: MessagesShape) -> list[dict]:
    chunks = list(messages_shape.openings(0))
    for event in EVENTS:
        frame = messages_shape.content_frame(event)
        chunks += [json.loads(frame.split(b"\ndata: ")[1])] if frame else messages_shape.chunks(event)
    return chunks + messages_shape.closings(USAGE)


def folded(messages_shape: MessagesShape) -> dict:
    fold = ChoiceFold(1)
    for event in EVENTS:
        fold.add(event)
    return messages_shape.response(fold.choices(), USAGE)


def message_of(chunks: list[dict]) -> dict:
    """The message a client builds from the stream, as Anthropic's SDK accumulates it."""
    message = chunks[0]["message"]
    for chunk in chunks[1:]:
        if chunk["type"] == "content_block_start":
            message["content"].append(dict(chunk["content_block"]))
        elif chunk["type"] == "content_block_delta":
            block, delta = message["content"][chunk["index"]], chunk["delta"]
            field = {
                "text_delta": "text",
                "thinking_delta": "thinking",
                "signature_delta": "signature",
                "input_json_delta": "partial_json",
            }[delta["type"]]
            block[field] = block.get(field, "") + delta[field]
        elif chunk["type"] == "message_delta":
            # the SDK updates the message's usage with the counts message_delta carries (a subset of its fields)
            message |= chunk["delta"] | {key: chunk[key] for key in chunk if key not in ("type", "delta", "usage")}
            message["usage"] |= chunk["usage"]
    for block in message["content"]:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("partial_json"))
    return message


@pytest.mark.parametrize("display", ["summarized", "omitted", None])
def test_the_streamed_message_is_the_folded_one(display):
    chunks = streamed(shape(display))
    message = message_of(chunks)
    assert message == folded(shape(display)) | {"id": message["id"]}


def test_the_thought_comes_first_as_a_signed_thinking_block():
    chunks = streamed(shape())
    thinking_events = [chunk for chunk in chunks if chunk.get("index") == 0]
    assert thinking_events == [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user wants"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": " Oslo's weather."}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": SEAL.sign(THINKING, THOUGHT)},
        },
        {"type": "content_block_stop", "index": 0},
    ]
    content = folded(shape())["content"]
    assert [block["type"] for block in content] == ["thinking", "text", "tool_use"]
    assert SEAL.verify(THINKING, content[0]["thinking"], content[0]["signature"])
    assert content[0]["thinking"] == THOUGHT


def test_an_omitted_thought_is_an_empty_block_whose_signature_carries_it():
    chunks = streamed(shape("omitted"))
    assert not [chunk for chunk in chunks if chunk.get("delta", {}).get("type") == "thinking_delta"]
    (thinking,) = [block for block in folded(shape("omitted"))["content"] if block["type"] == "thinking"]
    assert thinking["thinking"] == "" and SEAL.unwrap(THINKING, thinking["signature"]) == THOUGHT


def test_with_thinking_disabled_there_is_no_thinking_block():
    message = message_of(streamed(shape(None)))
    assert [block["type"] for block in message["content"]] == ["text", "tool_use"]
    assert [block["type"] for block in folded(shape(None))["content"]] == ["text", "tool_use"]


def test_the_context_edits_are_reported_with_the_stop_reason():
    edits = ContextEdits(ContextManagement.model_validate({"edits": [{"type": "clear_thinking_20251015"}]}).edits)
    edits.applied = [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": 40}]
    report = {"applied_edits": edits.applied}
    delta = [chunk for chunk in streamed(shape(edits=edits)) if chunk["type"] == "message_delta"]
    assert [chunk["context_management"] for chunk in delta] == [report]
    assert folded(shape(edits=edits))["context_management"] == report
    assert "context_management" not in folded(shape())
