"""The Responses API's request as the internal chat request (`translate`): instructions and input
items as chat messages (thoughts handed out as encrypted_content opened with the seal), tools and tool
choice (responses_tools.py), sampling and the text format; with what was set aside on the way, which
the answer's headers name (`Translation.headers`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..protocol import ChatCompletionRequest
from ..sealing import Seal
from .common import SET_ASIDE_TOOLS_HEADER, chat_request, given, header_list, image_part, text_only
from .responses import (
    COMPACTION_PURPOSE,
    INPUT_SET_ASIDE_HEADER,
    REASONING_PURPOSE,
    InputImage,
    ReasoningItem,
    ResponsesRequest,
    SetAsideItem,
    TextConfig,
)
from .responses_mcp import CALL, MCP, call_result_text
from .responses_tools import (
    CHOICE_SET_ASIDE_HEADER,
    CUSTOM,
    FUNCTION,
    LOCAL_SHELL,
    TOOL_SEARCH,
    ChoicePlan,
    Toolbox,
    chat_tools,
    custom_arguments,
    local_shell_arguments,
    plan_choice,
)

# How a compaction item's summary is put to the model: a user turn saying what it is (Codex's local
# compaction writes its summary as a user message too).
SUMMARY_PREFIX = "Summary of the conversation before this point (the earlier turns were compacted into it):\n\n"


@dataclass(frozen=True)
class Translation:
    """A Responses request as the chat request, and what of it was knowingly set aside on the way: tools
    only OpenAI's servers run, a tool_choice of one of them, input items that carry nothing the model
    can be given (by their position in the input: a continued turn's own come after the stored ones)."""

    chat: ChatCompletionRequest
    tools_set_aside: tuple[str, ...] = ()
    choice_set_aside: str | None = None
    items_set_aside: tuple[tuple[int, str], ...] = ()  # (position in the input, item type)
    toolbox: Toolbox | None = None  # the functions offered, and what each stands for (the MCP loop asks)

    def headers(self, first_item: int = 0) -> dict[str, str]:
        """The response headers naming what was set aside; of the input items, those from `first_item`
        on (the request's own, after the stored items of the turns it continues)."""
        headers = {SET_ASIDE_TOOLS_HEADER: header_list(self.tools_set_aside)} if self.tools_set_aside else {}
        if self.choice_set_aside:
            headers[CHOICE_SET_ASIDE_HEADER] = header_list([self.choice_set_aside])
        items = [kind for position, kind in self.items_set_aside if position >= first_item]
        if items:
            headers[INPUT_SET_ASIDE_HEADER] = header_list(items)
        return headers


def to_chat_request(request: ResponsesRequest, seal: Seal | None = None) -> ChatCompletionRequest:
    """The chat request `request` becomes (see `translate`)."""
    return translate(request, seal).chat


def translate(request: ResponsesRequest, seal: Seal | None = None) -> Translation:
    """The chat request `request` becomes: instructions and input, tools and tool choice, sampling;
    with what was set aside. `seal` opens the thoughts this installation handed out as encrypted_content."""
    box = request.toolbox()
    turns = chat_turns(request, box, seal)
    if not turns.messages:
        raise InvalidRequest(
            "every input item is of a kind set aside here (X-Input-Items-Set-Aside names them): nothing is left to answer",
            param="input",
            code="nothing_to_answer",
        )
    fields: dict[str, Any] = {"model": request.model, "messages": turns.messages, "stream": bool(request.stream)}
    if request.max_output_tokens is not None:
        fields["max_tokens"] = request.max_output_tokens
    fields |= given(request, ("temperature", "top_p", "parallel_tool_calls", "prompt_cache_key", "user"))
    choice = plan_choice(request.tool_choice, box)
    tool_fields, tool_params = _tool_fields(request, box, choice)
    fields |= tool_fields
    response_format = _response_format(request.text)
    if response_format:
        fields["response_format"] = response_format
    if request.reasoning is not None and request.reasoning.effort is not None:
        fields["reasoning_effort"] = request.reasoning.effort  # onto the template, as for chat
    if request.text is not None and request.text.verbosity is not None:
        fields["verbosity"] = request.text.verbosity
    return Translation(chat_request(fields, tool_params), box.set_aside, choice.set_aside, tuple(turns.set_aside), box)


def _tool_fields(request: ResponsesRequest, box: Toolbox, choice: ChoicePlan) -> tuple[dict, list[str]]:
    """(the chat request's tools, tool_choice and parallel_tool_calls, where each tool's parameters came
    from). "auto", "required" or "none" among tools that were all set aside is left out (the chat
    schema refuses a choice without tools, as it should when the request has none, or names a function
    that is not there); max_tool_calls 0 offers no tools, 1 allows no parallel calls."""
    tools, tool_params = chat_tools(box, choice.allowed)
    fields: dict[str, Any] = {"tools": tools} if tools else {}
    if choice.chat_choice is not None and (tools or not box.set_aside or isinstance(choice.chat_choice, dict)):
        fields["tool_choice"] = choice.chat_choice
    if request.max_tool_calls == 0 and tools:
        fields["tool_choice"] = "none"
    elif request.max_tool_calls == 1:
        fields["parallel_tool_calls"] = False
    return fields, tool_params


class _Turns:
    """Chat messages built from input items in order. A recalled thought waits for the assistant turn
    after it (as `reasoning_content`, which templates read); one followed by no assistant turn is dropped."""

    def __init__(self, instructions: str | None):
        self.messages: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
        self.thoughts: list[str] = []
        self.set_aside: list[tuple[int, str]] = []  # (position in the input, type) of the items set aside

    def add_message(self, role: str, content: str) -> None:
        messages = self.messages
        if role == "system" and messages and all(message["role"] == "system" for message in messages):
            messages[0]["content"] += "\n\n" + content
            return
        messages.append({"role": role, "content": content})
        if role == "assistant":
            self._assistant_turn(new=True)
        else:
            self.thoughts.clear()

    def add_call(self, call_id: str, name: str, arguments: str) -> None:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        new = not self.messages or self.messages[-1]["role"] != "assistant"
        if new:
            self.messages.append({"role": "assistant", "content": None})
        self.messages[-1].setdefault("tool_calls", []).append(call)
        self._assistant_turn(new)

    def add_output(self, call_id: str, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        self.thoughts.clear()

    def _assistant_turn(self, new: bool) -> None:
        """The thoughts waiting go to the last (assistant) message, after any it already has."""
        if not self.thoughts:
            return
        message = self.messages[-1]
        earlier = [] if new or not message.get("reasoning_content") else [message["reasoning_content"]]
        message["reasoning_content"] = "\n\n".join(earlier + self.thoughts)
        self.thoughts.clear()


def chat_messages(request: ResponsesRequest, box: Toolbox | None = None, seal: Seal | None = None) -> list[dict]:
    """Instructions as the system message, then the input items as chat turns: system and developer
    messages before the first turn join the instructions (many templates take one system message, first),
    calls join the assistant turn before them (under the names the model is offered), their outputs
    become `tool` messages, recalled thoughts the next assistant turn's reasoning_content; items of
    other kinds are set aside; an mcp_call is a call and its result, the other mcp items say nothing
    to the model (their tools are offered, their approvals answered before)."""
    return chat_turns(request, box if box is not None else request.toolbox(), seal).messages


def chat_turns(request: ResponsesRequest, box: Toolbox, seal: Seal | None) -> _Turns:
    """The chat messages of chat_messages, with the items set aside."""
    turns = _Turns(request.instructions)
    if isinstance(request.input, str):
        turns.add_message("user", request.input)
        return turns
    compacted_before = _last_compaction(request.input, seal)
    for n, item in enumerate(request.input):
        if n < compacted_before and not _user_message(item):
            continue  # the compaction item after it stands for it
        _add_item(turns, item, n, box, seal)
    if request.reasoning is not None and request.reasoning.context == "current_turn":
        _forget_earlier_thoughts(turns.messages)
    return turns


def _add_item(turns: _Turns, item, n: int, box: Toolbox, seal: Seal | None) -> None:
    kind = item.type or "message"
    if kind == "function_call":
        turns.add_call(item.call_id, box.name_for(FUNCTION, item.name, item.namespace), item.arguments)
    elif kind == "custom_tool_call":
        turns.add_call(item.call_id, box.name_for(CUSTOM, item.name, item.namespace), custom_arguments(item.input))
    elif kind == "local_shell_call":
        turns.add_call(
            item.call_id or item.id or f"call_{n}",
            box.name_for(LOCAL_SHELL, LOCAL_SHELL),
            local_shell_arguments(item.action.model_dump()),
        )
    elif kind in ("function_call_output", "custom_tool_call_output"):
        turns.add_output(item.call_id, _content(item.output, f"input.{n}.output"))
    elif kind == "local_shell_call_output":
        turns.add_output(item.call_id or item.id, item.output)
    elif kind == "tool_search_call":
        turns.add_call(
            item.call_id or item.id or f"call_{n}",
            box.name_for(TOOL_SEARCH, TOOL_SEARCH),
            json.dumps(item.arguments, ensure_ascii=False),
        )
    elif kind == "tool_search_output":
        names = box.names_of(item.tools)
        turns.add_output(
            item.call_id or item.id or f"call_{n}",
            "Tools found, callable from now on: " + ", ".join(names) if names else "No tools found.",
        )
    elif kind == CALL:
        turns.add_call(item.id, box.name_for(MCP, item.name, item.server_label), item.arguments)
        turns.add_output(item.id, call_result_text(item))
    elif kind == "reasoning":
        thought = recalled_thought(item, seal)
        if thought:
            turns.thoughts.append(thought)
        else:
            turns.set_aside.append((n, kind))
    elif kind == "compaction":
        summary = seal.unwrap(COMPACTION_PURPOSE, item.encrypted_content) if seal is not None else None
        if summary:
            turns.add_message("user", SUMMARY_PREFIX + summary)
        else:
            turns.set_aside.append((n, kind))
    elif kind == "message":
        role = "system" if item.role == "developer" else item.role
        turns.add_message(
            role, _content(item.content, f"input.{n}.content") if role == "user" else _text(item.content, f"input.{n}.content")
        )
    if isinstance(item, SetAsideItem):
        turns.set_aside.append((n, item.type))


def _last_compaction(items: list, seal: Seal | None) -> int:
    """The position of the last compaction item this installation sealed (0: none). It stands for every
    item before it but the user messages, as /v1/responses/compact's output does: an answer compacted
    automatically (context_management) and continued with previous_response_id is read the same way."""
    for n in range(len(items) - 1, -1, -1):
        item = items[n]
        if item.type == "compaction" and seal is not None and seal.unwrap(COMPACTION_PURPOSE, item.encrypted_content):
            return n
    return 0


def _user_message(item) -> bool:
    return (item.type or "message") == "message" and item.role == "user"


def recalled_thought(item: ReasoningItem, seal: Seal | None) -> str | None:
    """The thought a reasoning item carries back: its encrypted_content when this installation sealed
    it, else its reasoning_text content; None when it has neither (it is set aside)."""
    if seal is not None and item.encrypted_content:
        thought = seal.unwrap(REASONING_PURPOSE, item.encrypted_content)
        if thought is not None:
            return thought
    return "".join(part.text or "" for part in item.content or () if part.type == "reasoning_text") or None


def _forget_earlier_thoughts(messages: list[dict]) -> None:
    """reasoning.context "current_turn": thoughts only on the assistant turns after the last user message."""
    last_user = max((n for n, message in enumerate(messages) if message["role"] == "user"), default=-1)
    for message in messages[:last_user]:
        message.pop("reasoning_content", None)


def _text(content: str | list, param: str) -> str:
    if isinstance(content, str):
        return content
    return "".join(_part_text(part, f"{param}.{m}") for m, part in enumerate(content))


def _part_text(part, param: str) -> str:
    if part.type == "input_image":
        raise InvalidRequest(
            "input_image belongs in user messages and function call outputs", param=param, code="block_not_allowed"
        )
    if part.type in ("input_file", "input_audio"):  # audio is taken where images are (_content), not here
        raise text_only(part.type, param)
    return part.refusal if part.type == "refusal" else part.text


def _content(content: str | list, param: str) -> str | list[dict]:
    """A user message's or a call output's content: its text, or text, image and audio parts when it holds media."""
    if isinstance(content, str) or all(part.type not in MEDIA for part in content):
        return _text(content, param)
    return [
        _media_part(part, f"{param}.{m}") if part.type in MEDIA else {"type": "text", "text": _part_text(part, f"{param}.{m}")}
        for m, part in enumerate(content)
    ]


MEDIA = ("input_image", "input_audio")


def _media_part(part, param: str) -> dict:
    if part.type == "input_audio":  # this server's extension: Chat Completions' part as it is
        return {"type": "input_audio", "input_audio": part.input_audio.model_dump()}
    return _image_part(part, param)


def _image_part(part: InputImage, param: str) -> dict:
    if not part.image_url:
        what = "file_id images are not read from the Files API here" if part.file_id else "an input_image needs image_url"
        raise InvalidRequest(f"{what}; send image_url (an http(s) URL or a base64 data URL)", param=param, code="not_supported")
    return image_part(part.image_url, param)


def _response_format(text: TextConfig | None) -> dict | None:
    text_format = text.format if text is not None else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": text_format.name or "response", "schema": text_format.json_schema}}
