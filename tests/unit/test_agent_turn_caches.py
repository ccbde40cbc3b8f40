"""What an agent resends every turn costs as little as it can: the upstream's connection is kept
after a parsed answer."""

from __future__ import annotations

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.protocol import ChatCompletionRequest
from api_like_oai.services import tool_calling

BASH = {"type": "function", "function": {"name": "Bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'


def tool_plan(tools: list[dict], choice="auto") -> tool_calling.ToolPlan:
    request = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice})
    return tool_calling.plan(request, "hermes")


# --- the upstream's connection after a parsed answer ----------------------------------------

def upstream_answer(pieces: list[str], read_to_end: list[bool]):
    """Events of one answer; `read_to_end` holds True once the caller read past the last event, as
    backends/llamacpp.py does to put the connection back in the pool."""
    for piece in pieces:
        yield GenerationEvent(text=piece)
    yield GenerationEvent(finish_reason="stop", completion_tokens=len(pieces))
    read_to_end.append(True)


def test_an_answer_the_upstream_finished_is_read_to_its_end_so_its_connection_is_kept():
    read_to_end: list[bool] = []
    transform = tool_calling.parse_tool_calls(tool_plan([BASH]), stream_arguments=True)
    events = list(transform(upstream_answer(["Let me look.", CALL], read_to_end)))
    assert read_to_end == [True]
    assert events[-1].finish_reason == "tool_calls"


def test_an_answer_cut_short_for_repeating_its_call_ends_the_upstream_generation():
    read_to_end: list[bool] = []
    transform = tool_calling.parse_tool_calls(tool_plan([BASH]), stream_arguments=True)
    events = list(transform(upstream_answer([CALL, "\n", CALL, "\n", CALL], read_to_end)))
    assert read_to_end == []
    assert events[-1].finish_reason == "tool_calls"
