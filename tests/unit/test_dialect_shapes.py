"""The Anthropic and Responses shapes without a server: blocks, the fast per-token frame (byte for byte
what encoding the event gives), and a folded answer equal to what its stream builds."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.dialects.blocks import DELTA, REASONING, START, STOP, TEXT, Blocks
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_answers import ResponseObject
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.sealing import Seal
from api_like_oai.services.generation import ChoiceFold
from api_like_oai.tools.parser import ToolCallDelta

CALL = ToolCallDelta(index=0, id="call_1", name="get_weather", arguments='{"city": ')
EVENTS = [
    GenerationEvent(text="Let me", prompt_tokens=5, completion_tokens=1),
    GenerationEvent(text=" check.", completion_tokens=2),
    GenerationEvent(tool_calls=(CALL,), completion_tokens=3),
    GenerationEvent(tool_calls=(ToolCallDelta(index=0, id=None, name=None, arguments='"Oslo"}'),)),
    GenerationEvent(text=" Done.", completion_tokens=4),
    GenerationEvent(finish_reason="tool_calls", prompt_tokens=5, completion_tokens=4),
]
USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}}


def shapes():
    return {
        "anthropic": lambda: MessagesShape("claude", ["END"]),
        "responses": lambda: ResponsesShape("gpt", ResponsesRequest(input="hi")),
    }


def test_blocks_cut_text_and_calls_in_order():
    blocks = Blocks()
    changes = [change for event in EVENTS for change in blocks.add(event)] + blocks.close()
    assert [(kind, block.index, piece) for kind, block, piece in changes] == [
        (START, 0, ""),
        (DELTA, 0, "Let me"),
        (DELTA, 0, " check."),
        (STOP, 0, ""),
        (START, 1, ""),
        (DELTA, 1, '{"city": '),
        (DELTA, 1, '"Oslo"}'),
        (STOP, 1, ""),
        (START, 2, ""),
        (DELTA, 2, " Done."),
        (STOP, 2, ""),
    ]
    assert blocks.text() == "Let me check. Done."
    assert blocks.tool_calls() == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    ]


def test_blocks_put_the_thought_in_its_own_block_before_the_text():
    blocks = Blocks()
    thought = [
        GenerationEvent(reasoning="Paris is"),
        GenerationEvent(reasoning=" the capital."),
        GenerationEvent(text="Paris.", reasoning=""),
    ]
    changes = [change for event in thought for change in blocks.add(event)] + blocks.close()
    assert [(kind, block.kind, piece) for kind, block, piece in changes] == [
        (START, REASONING, ""),
        (DELTA, REASONING, "Paris is"),
        (DELTA, REASONING, " the capital."),
        (STOP, REASONING, ""),
        (START, TEXT, ""),
        (DELTA, TEXT, "Paris."),
        (STOP, TEXT, ""),
    ]
    assert (blocks.reasoning(), blocks.text()) == ("Paris is the capital.", "Paris.")


@pytest.mark.parametrize(
    "event",
    [
        GenerationEvent(text=" more", reasoning="a thought"),
        GenerationEvent(text=" more", tool_calls=(CALL,)),
        GenerationEvent(text=" more", finish_reason="stop"),
        GenerationEvent(text=""),
    ],
)
def test_only_plain_text_extends_the_open_text_block_on_the_fast_path(event):
    """The one test every shape and the fold use to skip `add`: a thought, a call or a finish in the event
    (or no text) leaves the blocks to `add`, so none of them is lost."""
    blocks = Blocks()
    blocks.add(GenerationEvent(text="Some"))
    assert not blocks.extend_open_text(event)
    assert blocks.text() == "Some"
    assert blocks.extend_open_text(GenerationEvent(text=" more"))
    assert blocks.text() == "Some more"
    blocks.add(GenerationEvent(reasoning="then a thought"))
    assert not blocks.extend_open_text(GenerationEvent(text=" text"))  # the open block is the thought's


def test_a_fold_keeps_text_that_comes_with_a_thought_or_the_finish():
    folded = ChoiceFold(1)
    for event in (
        GenerationEvent(text="Hello"),
        GenerationEvent(text=" there", reasoning="why"),
        GenerationEvent(text="!", finish_reason="stop"),
    ):
        folded.add(event)
    (choice,) = folded.choices()
    assert (choice["text"], choice["reasoning"], choice["finish_reason"]) == ("Hello there!", "why", "stop")


@pytest.mark.parametrize("name", ["anthropic", "responses"])
@pytest.mark.parametrize("text", [" Paris", "\n", 'quote " and \\ backslash', "é ✓ 🐱 你好", "\u2028", "\x00"])
def test_content_frame_equals_the_encoded_event(name, text):
    fast, general = shapes()[name](), shapes()[name]()
    general.__dict__.update(id=fast.id, hex=getattr(fast, "hex", None))  # the same answer, written twice
    for shape in (fast, general):
        shape.openings(0)
        shape.chunks(GenerationEvent(tool_calls=(CALL,)))
        shape.chunks(GenerationEvent(text="first", prompt_tokens=5))  # a second block, open
    event = GenerationEvent(text=text)
    frame = fast.content_frame(event)
    (chunk,) = general.chunks(event)
    assert frame == general.frame(chunk)
    data = json.loads(frame.split(b"\ndata: ")[1])
    assert data.get("index", data.get("output_index")) == 1


@pytest.mark.parametrize("name", ["anthropic", "responses"])
def test_events_needing_more_than_text_take_the_general_path(name):
    shape = shapes()[name]()
    assert shape.content_frame(GenerationEvent(text="x", prompt_tokens=1)) is None  # no text block open yet
    shape.chunks(GenerationEvent(text="x", prompt_tokens=1))
    assert shape.content_frame(GenerationEvent(text="x", finish_reason="stop")) is None
    assert shape.content_frame(GenerationEvent(tool_calls=(CALL,))) is None
    assert shape.content_frame(GenerationEvent(text="")) is None


def fold(shape, events=EVENTS) -> dict:
    folded = ChoiceFold(1)
    for event in events:
        folded.add(event)
    return shape.response(folded.choices(), USAGE)


def stream(shape, events=EVENTS) -> list[dict]:
    chunks = list(shape.openings(0))
    for event in events:
        frame = shape.content_frame(event)
        chunks += [json.loads(frame.split(b"\ndata: ")[1])] if frame else shape.chunks(event)
    return chunks + shape.closings(USAGE)


def test_anthropic_stream_builds_the_folded_message():
    streamed = stream(MessagesShape("claude"))
    message = streamed[0]["message"]
    for chunk in streamed[1:]:
        if chunk["type"] == "content_block_start":
            message["content"].append(
                chunk["content_block"] | ({"text": ""} if chunk["content_block"]["type"] == "text" else {"input": ""})
            )
        elif chunk["type"] == "content_block_delta":
            block = message["content"][chunk["index"]]
            delta = chunk["delta"]
            block["text" if "text" in delta else "input"] += delta.get("text", delta.get("partial_json", ""))
        elif chunk["type"] == "message_delta":
            message |= chunk["delta"]
            message["usage"] |= chunk["usage"]  # as the SDK does: message_delta's counts update the message's
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


@pytest.mark.parametrize(
    "finish_reason, stop_word, expected",
    [
        ("stop", None, ("end_turn", None)),
        ("stop", "END", ("stop_sequence", "END")),
        ("stop", "<|im_end|>", ("end_turn", None)),
        ("length", None, ("max_tokens", None)),
        ("tool_calls", None, ("tool_use", None)),
    ],
)
def test_anthropic_stop_reasons(finish_reason, stop_word, expected):
    choice = {"blocks": [], "finish_reason": finish_reason, "stop_word": stop_word}
    message = MessagesShape("claude", ["END"]).response([choice], USAGE)
    assert (message["stop_reason"], message["stop_sequence"]) == expected


# --- Responses: reasoning items and the tool kinds (issue 16) ---------------------------------------

SEAL = Seal(lambda: b"k" * 32)
SDK_EVENT = TypeAdapter(ResponseStreamEvent)
THOUGHT = [
    GenerationEvent(reasoning="Paris is", prompt_tokens=5, completion_tokens=2),
    GenerationEvent(reasoning=" the capital.", completion_tokens=3),
    GenerationEvent(text="Paris.", completion_tokens=4),
    GenerationEvent(finish_reason="stop", prompt_tokens=5, completion_tokens=4),
]


def without_numbers(events: list[dict]) -> list[dict]:
    return [{key: value for key, value in event.items() if key != "sequence_number"} for event in events]


def responses_shape(**request) -> ResponsesShape:
    return ResponsesShape("gpt", ResponsesRequest.model_validate({"input": "hi", **request}), SEAL)


def streamed_and_folded(shape_of, events) -> tuple[list[dict], dict]:
    """The stream of one shape and the fold of another (the same answer written twice), checked alike:
    numbered in order, ending with the folded response, each item done as the response holds it."""
    shape = shape_of()
    streamed, folded = stream(shape, events), fold(shape_of(), events)
    folded |= {"id": shape.id, "created_at": shape.created_at, "completed_at": shape.completed_at}
    folded["output"] = [
        item | {"id": done["id"]} for item, done in zip(folded["output"], streamed[-1]["response"]["output"], strict=True)
    ]
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert streamed[-1]["response"] == folded
    assert [e["item"] for e in streamed if e["type"] == "response.output_item.done"] == folded["output"]
    return streamed, folded


@pytest.mark.parametrize("summary", [None, "auto"])
def test_responses_thought_is_a_reasoning_item_before_the_message(summary):
    request = {"reasoning": {"summary": summary}, "include": ["reasoning.encrypted_content"]}
    streamed, folded = streamed_and_folded(lambda: responses_shape(**request), THOUGHT)
    reasoning, message = folded["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_") and message["type"] == "message"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Paris is the capital."}]
    assert reasoning["summary"] == ([{"type": "summary_text", "text": "Paris is the capital."}] if summary else [])
    assert SEAL.unwrap("reasoning", reasoning["encrypted_content"]) == "Paris is the capital."
    assert folded["usage"]["output_tokens_details"] == {"reasoning_tokens": 3}
    where = {"item_id": reasoning["id"], "output_index": 0}
    summary_events = (
        [
            {
                "type": "response.reasoning_summary_part.added",
                **where,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            },
            {"type": "response.reasoning_summary_text.delta", **where, "summary_index": 0, "delta": "Paris is the capital."},
            {"type": "response.reasoning_summary_text.done", **where, "summary_index": 0, "text": "Paris is the capital."},
            {
                "type": "response.reasoning_summary_part.done",
                **where,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": "Paris is the capital."},
            },
        ]
        if summary
        else []
    )
    assert without_numbers(streamed[2:-7]) == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": reasoning["id"], "type": "reasoning", "status": "in_progress", "summary": [], "content": []},
        },
        {"type": "response.content_part.added", **where, "content_index": 0, "part": {"type": "reasoning_text", "text": ""}},
        {"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": "Paris is"},
        {"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": " the capital."},
        {"type": "response.reasoning_text.done", **where, "content_index": 0, "text": "Paris is the capital."},
        {
            "type": "response.content_part.done",
            **where,
            "content_index": 0,
            "part": {"type": "reasoning_text", "text": "Paris is the capital."},
        },
        *summary_events,
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
    ]
    assert [e["type"] for e in streamed[-7:]] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_responses_thought_is_sealed_only_when_included():
    reasoning, _ = fold(responses_shape(), THOUGHT)["output"]
    assert "encrypted_content" not in reasoning and reasoning["summary"] == []


def test_responses_only_the_item_cut_by_the_token_limit_is_incomplete():
    events = [*THOUGHT[:3], GenerationEvent(text=" The", finish_reason="length", prompt_tokens=5, completion_tokens=5)]
    streamed, folded = streamed_and_folded(responses_shape, events)
    assert [item["status"] for item in folded["output"]] == ["completed", "incomplete"]
    assert folded["status"] == "incomplete" and streamed[-1]["type"] == "response.incomplete"


KIND_TOOLS = [
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}],
    },
    {"type": "custom", "name": "apply_patch"},
    {"type": "local_shell"},
    {"type": "web_search"},
    {"type": "tool_search", "execution": "client"},
]
PATCH = '*** Begin Patch\n+ "quoted" \\ é\n*** End Patch'
PATCH_ARGUMENTS = json.dumps({"input": PATCH})


def call_events(index: int, call_id: str, name: str, arguments: str, pieces: int) -> list[GenerationEvent]:
    """A call as the parser gives it: the first delta with its id and name, the arguments in `pieces` parts."""
    cuts = [len(arguments) * n // pieces for n in range(pieces + 1)]
    return [
        GenerationEvent(
            tool_calls=(
                ToolCallDelta(index, call_id if n == 0 else None, name if n == 0 else None, arguments[cuts[n] : cuts[n + 1]]),
            )
        )
        for n in range(pieces)
    ]


KIND_CALLS = [
    GenerationEvent(text="On it.", prompt_tokens=5, completion_tokens=1),
    *call_events(0, "call_1", "multi_agent_v1.close_agent", '{"target": "a1"}', 2),
    *call_events(1, "call_2", "apply_patch", PATCH_ARGUMENTS, 7),
    *call_events(2, "call_3", "local_shell", '{"command": ["ls", "-la"], "timeout_ms": 500}', 3),
    *call_events(3, "call_4", "tool_search", '{"query": "agents"}', 2),
    GenerationEvent(finish_reason="tool_calls", prompt_tokens=5, completion_tokens=40),
]


def test_responses_calls_are_items_of_their_tool_kinds():
    streamed, folded = streamed_and_folded(lambda: responses_shape(tools=KIND_TOOLS), KIND_CALLS)
    _, function_call, custom_call, shell_call, search_call = folded["output"]
    assert function_call == {
        "id": function_call["id"],
        "type": "function_call",
        "status": "completed",
        "call_id": "call_1",
        "name": "close_agent",
        "namespace": "multi_agent_v1",
        "arguments": '{"target": "a1"}',
    }
    assert custom_call == {
        "id": custom_call["id"],
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": "call_2",
        "name": "apply_patch",
        "input": PATCH,
    }
    assert shell_call == {
        "id": shell_call["id"],
        "type": "local_shell_call",
        "status": "completed",
        "call_id": "call_3",
        "action": {
            "type": "exec",
            "command": ["ls", "-la"],
            "env": {},
            "timeout_ms": 500,
            "working_directory": None,
            "user": None,
        },
    }
    assert search_call == {
        "id": search_call["id"],
        "type": "tool_search_call",
        "status": "completed",
        "call_id": "call_4",
        "execution": "client",
        "arguments": {"query": "agents"},
    }
    assert [item["id"].split("_")[0] for item in folded["output"]] == ["msg", "fc", "ctc", "lsh", "tsc"]
    input_deltas = [e["delta"] for e in streamed if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(input_deltas) == PATCH and len(input_deltas) > 1
    [input_done] = [e for e in streamed if e["type"] == "response.custom_tool_call_input.done"]
    assert input_done["input"] == PATCH and input_done["item_id"] == custom_call["id"]
    for output_index in (3, 4):  # a local shell call and a tool search call come whole
        assert [e["type"] for e in streamed if e.get("output_index") == output_index] == [
            "response.output_item.added",
            "response.output_item.done",
        ]
    added = [e["item"] for e in streamed if e["type"] == "response.output_item.added"]
    assert added[2]["input"] == "" and added[3]["action"]["command"] == []


@pytest.mark.parametrize(
    "request_fields, events",
    [
        ({"tools": KIND_TOOLS}, KIND_CALLS),
        ({"reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"]}, THOUGHT),
        ({}, EVENTS),
    ],
)
def test_responses_events_and_response_are_the_sdks_types(request_fields, events):
    """Every streamed event, and the response, as the official SDK's models read them (their required
    fields, their types, the event union's tags); the response also as /openapi.json documents it."""
    for event in stream(responses_shape(**request_fields), events):
        assert SDK_EVENT.validate_python(event).type == event["type"]
    folded = fold(responses_shape(**request_fields), events)
    Response.model_validate(folded)
    ResponseObject.model_validate(folded)
