"""OpenAI's Responses API: request and answer models, and the request's translation into the
internal chat request (`to_chat_request`). The answer's shape is in responses_shape.py; what is
stored (`store`, `previous_response_id`, `conversation`) is services/stored_responses.py's.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag, model_validator

from ..errors import InvalidRequest
from ..protocol import STRICT, ChatCompletionRequest, Request, check_schema
from ..sealing import Seal
from .common import SET_ASIDE_TOOLS_HEADER, chat_request, given, image_part, text_only
from .responses_tools import (
    CHOICE_SET_ASIDE_HEADER,
    CUSTOM,
    FUNCTION,
    LOCAL_SHELL,
    TOOL_SEARCH,
    Tool,
    Toolbox,
    ToolChoice,
    chat_tools,
    custom_arguments,
    local_shell_arguments,
    other_than,
    plan_choice,
    toolbox,
)

INPUT_SET_ASIDE_HEADER = "X-Input-Items-Set-Aside"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)


class InputText(_Strict):
    type: Literal["input_text"]
    text: StrictStr


class OutputText(_Strict):
    type: Literal["output_text"]
    text: StrictStr
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: StrictStr


class UnsupportedContent(BaseModel):
    """Files and audio: recognised so that the answer is a 400 saying so."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["input_file", "input_audio"]


class InputImage(_Strict):
    type: Literal["input_image"]
    image_url: StrictStr | None = Field(None, description="An http(s) URL the proxy fetches, or a base64 data URL.")
    file_id: StrictStr | None = Field(None, description="Refused: there is no Files API here.")
    detail: Literal["low", "high", "auto", "original"] | None = Field(
        None, description="Accepted and ignored: the model's projector decides the resolution.")


ContentPart = Annotated[InputText | OutputText | Refusal | InputImage | UnsupportedContent, Field(discriminator="type")]


class MessageItem(_Strict):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: StrictStr | list[ContentPart]
    id: StrictStr | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


_Status = Literal["in_progress", "completed", "incomplete"] | None


class _CallItem(_Strict):
    """What every call item and call output item has besides its own fields."""

    call_id: StrictStr
    id: StrictStr | None = None
    status: _Status = None
    caller: dict[str, Any] | None = Field(None, description="Accepted and ignored.")


class _CallOutputItem(_CallItem):
    output: StrictStr | list[ContentPart]


class FunctionCallItem(_CallItem):
    type: Literal["function_call"]
    name: StrictStr
    arguments: StrictStr
    namespace: StrictStr | None = Field(None, description="The namespace tool `name` belongs to, if any.")


class FunctionCallOutputItem(_CallOutputItem):
    type: Literal["function_call_output"]


class CustomToolCallItem(_CallItem):
    type: Literal["custom_tool_call"]
    name: StrictStr
    input: StrictStr
    namespace: StrictStr | None = None


class CustomToolCallOutputItem(_CallOutputItem):
    type: Literal["custom_tool_call_output"]


class LocalShellAction(_Strict):
    type: Literal["exec"]
    command: list[StrictStr]
    env: dict[str, StrictStr] | None = None
    timeout_ms: int | None = None
    user: StrictStr | None = None
    working_directory: StrictStr | None = None


class LocalShellCallItem(_Strict):
    type: Literal["local_shell_call"]
    action: LocalShellAction
    call_id: StrictStr | None = None
    id: StrictStr | None = None
    status: _Status = None


class LocalShellCallOutputItem(_Strict):
    type: Literal["local_shell_call_output"]
    id: StrictStr = Field(description="The id of the local shell call this answers.")
    output: StrictStr
    call_id: StrictStr | None = None
    status: _Status = None


class _ToolSearchItem(_Strict):
    call_id: StrictStr | None = None
    id: StrictStr | None = None
    execution: Literal["server", "client"] | None = None
    status: _Status = None
    created_by: StrictStr | None = None


class ToolSearchCallItem(_ToolSearchItem):
    type: Literal["tool_search_call"]
    arguments: Any = Field(description="The search's arguments, as an object.")


class ToolSearchOutputItem(_ToolSearchItem):
    type: Literal["tool_search_output"]
    tools: list[Tool] = Field(max_length=512, description="Offered to the model from this request on.")


class ReasoningText(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)
    type: StrictStr
    text: StrictStr | None = None


class ReasoningItem(BaseModel):
    """An earlier answer's thought: its `encrypted_content` (this proxy's own, sealed) or its
    `reasoning_text` content goes back to the model with the next assistant turn; one this proxy
    cannot read (another server's) is set aside."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["reasoning"]
    id: StrictStr | None = None
    summary: list[ReasoningText] | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: StrictStr | None = None
    status: _Status = None


_ITEM_TYPES = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
               "local_shell_call", "local_shell_call_output", "tool_search_call", "tool_search_output", "reasoning")


class SetAsideItem(BaseModel):
    """An input item of a kind that carries nothing this proxy can give the model (a hosted tool's
    call, an item reference to a stored item, ...): set aside, named in X-Input-Items-Set-Aside."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: StrictStr = Field(json_schema_extra=other_than(*_ITEM_TYPES))


def _item_type(item) -> str:
    """The tag of an input item; a message may leave its `type` out, an unknown kind is set aside."""
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    kind = kind or "message"
    return kind if kind in _ITEM_TYPES else "set_aside"


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
                      | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
                      | Annotated[LocalShellCallItem, Tag("local_shell_call")]
                      | Annotated[LocalShellCallOutputItem, Tag("local_shell_call_output")]
                      | Annotated[ToolSearchCallItem, Tag("tool_search_call")]
                      | Annotated[ToolSearchOutputItem, Tag("tool_search_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")]
                      | Annotated[SetAsideItem, Tag("set_aside")], Discriminator(_item_type)]


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: StrictStr | None = None
    description: StrictStr | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def schema_is_usable(self):
        if self.type == "json_schema":
            if self.json_schema is None:
                raise InvalidRequest("text.format of type json_schema needs a schema", param="text.format.schema")
            check_schema(self.json_schema, "text.format.schema")
        return self


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = Field(
        None, description="Reaches the chat template as the variable `verbosity`, as on chat completions.")


class ReasoningConfig(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Reaches the chat template as `reasoning_effort`, as on chat completions.")
    summary: Literal["auto", "concise", "detailed"] | None = Field(
        None, description="Any value: the reasoning item's summary is the model's thought itself.")
    generate_summary: Literal["auto", "concise", "detailed"] | None = Field(None, description="Deprecated: summary.")
    context: Literal["auto", "current_turn", "all_turns"] | None = Field(
        None, description="current_turn: thoughts of assistant turns before the last user message are left "
                          "out of the prompt; otherwise every recalled thought reaches the template.")
    mode: StrictStr | None = Field(None, description="Accepted and ignored.")

    def wants_summary(self) -> bool:
        return (self.summary or self.generate_summary) is not None


class StreamOptions(_Strict):
    include_obfuscation: bool | None = Field(None, description="Accepted and ignored (no obfuscation is added).")


ENCRYPTED_REASONING = "reasoning.encrypted_content"
REASONING_PURPOSE = "reasoning"   # the Seal's purpose for a thought handed out as encrypted_content


class ConversationRef(_Strict):
    id: StrictStr


class ResponsesRequest(Request):
    model: StrictStr | None = None
    input: StrictStr | list[InputItem]
    instructions: StrictStr | None = None
    max_output_tokens: int | None = Field(None, ge=1, description="An upper bound, like Anthropic's max_tokens.")
    max_tool_calls: int | None = Field(None, ge=0, description="At most this many calls in the answer: a call past "
                                                               "it ends the answer.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    tools: list[Tool] | None = Field(None, max_length=512, description=(
        "function, namespace, custom and local_shell tools are offered to the model; others (web_search, "
        "file_search, code_interpreter, image_generation, computer use, remote mcp, ...) are set aside and named "
        "in the X-Tools-Set-Aside response header."))
    tool_choice: ToolChoice | None = Field(None, description=(
        "Every form; a choice of a tool set aside becomes auto (X-Tool-Choice-Set-Aside)."))
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    background: bool | None = Field(None, description="Only false: a response is generated while the client waits.")
    store: bool | None = Field(None, description="Keep the response (default true; false with --store none).")
    previous_response_id: StrictStr | None = Field(
        None, description="Continue a stored response: its input and output come before this input.")
    conversation: StrictStr | ConversationRef | None = Field(
        None, description="A conversation (its id): its items come before this input, and this turn is added to it.")
    metadata: dict[str, StrictStr] | None = None
    client_metadata: dict[str, Any] | None = Field(None, description="Accepted and ignored (Codex's).")
    user: StrictStr | None = None
    include: list[StrictStr] | None = Field(None, description=(
        "Every value accepted: reasoning.encrypted_content adds the thought, sealed, to reasoning items; the "
        "others name outputs this proxy does not make."))
    truncation: Literal["auto", "disabled"] | None = Field(None, description="Accepted; context fitting always applies.")
    prompt_cache_key: StrictStr | None = Field(
        None, description="A conversation's key: with several upstreams, a new conversation is placed by it.")
    prompt_cache_retention: StrictStr | None = Field(None, description="Accepted and ignored.")
    safety_identifier: StrictStr | None = Field(None, description="Accepted and ignored.")
    service_tier: StrictStr | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="after")
    def is_answerable(self):
        if self.background:
            raise InvalidRequest("background responses are not supported: this proxy generates a response only "
                                 "while the client waits (streamed or not), so there is none to poll or cancel "
                                 "while it runs; a stored one (store) can be read back once answered with "
                                 "GET /v1/responses/{id}; send background: false", param="background")
        if isinstance(self.input, list) and not self.input:
            raise InvalidRequest("input is an empty list", param="input")
        return self

    def includes_encrypted_reasoning(self) -> bool:
        return ENCRYPTED_REASONING in (self.include or ())

    def toolbox(self) -> Toolbox:
        """The functions offered for this request: its tools, and those its client's tool searches found
        (made once: the translation, the answer's shape and the headers each ask for it)."""
        return self._toolbox

    @functools.cached_property
    def _toolbox(self) -> Toolbox:
        found = [] if isinstance(self.input, str) else [
            (f"input.{n}.tools", item.tools) for n, item in enumerate(self.input) if item.type == "tool_search_output"]
        return toolbox(self.tools, found)


# --- translation -----------------------------------------------------------------------------

def to_chat_request(request: ResponsesRequest, seal: Seal | None = None) -> ChatCompletionRequest:
    """The chat request `request` becomes: instructions and input, tools and tool choice, sampling.
    `seal` opens the thoughts this installation handed out as encrypted_content."""
    box = request.toolbox()
    fields: dict[str, Any] = {"model": request.model, "messages": chat_messages(request, box, seal),
                              "stream": bool(request.stream)}
    if request.max_output_tokens is not None:
        fields["max_tokens"] = request.max_output_tokens
    fields |= given(request, ("temperature", "top_p", "parallel_tool_calls", "prompt_cache_key", "user"))
    tool_fields, tool_params = _tool_fields(request, box)
    fields |= tool_fields
    response_format = _response_format(request.text)
    if response_format:
        fields["response_format"] = response_format
    if request.reasoning is not None and request.reasoning.effort is not None:
        fields["reasoning_effort"] = request.reasoning.effort   # onto the template, as for chat
    if request.text is not None and request.text.verbosity is not None:
        fields["verbosity"] = request.text.verbosity
    return chat_request(fields, tool_params)


def _tool_fields(request: ResponsesRequest, box: Toolbox) -> tuple[dict, list[str]]:
    """(the chat request's tools, tool_choice and parallel_tool_calls, where each tool's parameters came
    from). "auto", "required" or "none" among tools that were all set aside is left out (the chat
    schema refuses a choice without tools, as it should when the request has none, or names a function
    that is not there); max_tool_calls 0 offers no tools, 1 allows no parallel calls."""
    choice = plan_choice(request.tool_choice, box)
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
    other kinds are set aside."""
    turns = _Turns(request.instructions)
    if isinstance(request.input, str):
        turns.add_message("user", request.input)
        return turns.messages
    box = box if box is not None else request.toolbox()
    for n, item in enumerate(request.input):
        _add_item(turns, item, n, box, seal)
    if request.reasoning is not None and request.reasoning.context == "current_turn":
        _forget_earlier_thoughts(turns.messages)
    return turns.messages


def _add_item(turns: _Turns, item, n: int, box: Toolbox, seal: Seal | None) -> None:
    kind = item.type or "message"
    if kind == "function_call":
        turns.add_call(item.call_id, box.name_for(FUNCTION, item.name, item.namespace), item.arguments)
    elif kind == "custom_tool_call":
        turns.add_call(item.call_id, box.name_for(CUSTOM, item.name, item.namespace), custom_arguments(item.input))
    elif kind == "local_shell_call":
        turns.add_call(item.call_id or item.id or f"call_{n}", box.name_for(LOCAL_SHELL, LOCAL_SHELL),
                       local_shell_arguments(item.action.model_dump()))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        turns.add_output(item.call_id, _content(item.output, f"input.{n}.output"))
    elif kind == "local_shell_call_output":
        turns.add_output(item.call_id or item.id, item.output)
    elif kind == "tool_search_call":
        turns.add_call(item.call_id or item.id or f"call_{n}", box.name_for(TOOL_SEARCH, TOOL_SEARCH),
                       json.dumps(item.arguments, ensure_ascii=False))
    elif kind == "tool_search_output":
        names = box.names_of(item.tools)
        turns.add_output(item.call_id or item.id or f"call_{n}",
                         "Tools found, callable from now on: " + ", ".join(names) if names else "No tools found.")
    elif kind == "reasoning":
        thought = recalled_thought(item, seal)
        if thought:
            turns.thoughts.append(thought)
    elif kind == "message":
        role = "system" if item.role == "developer" else item.role
        turns.add_message(role, _content(item.content, f"input.{n}.content") if role == "user"
                          else _text(item.content, f"input.{n}.content"))


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


def set_aside_headers(request: ResponsesRequest, seal: Seal | None = None) -> dict[str, str]:
    """The response headers that name what of `request` was knowingly set aside: tools only OpenAI's
    servers run, a tool_choice of one of them, input items that carry nothing the model can be given."""
    box = request.toolbox()
    headers = {SET_ASIDE_TOOLS_HEADER: ", ".join(box.set_aside)} if box.set_aside else {}
    choice = plan_choice(request.tool_choice, box)
    if choice.set_aside:
        headers[CHOICE_SET_ASIDE_HEADER] = choice.set_aside
    items = [] if isinstance(request.input, str) else [
        item.type for item in request.input
        if isinstance(item, SetAsideItem) or (item.type == "reasoning" and not recalled_thought(item, seal))]
    if items:
        headers[INPUT_SET_ASIDE_HEADER] = ", ".join(dict.fromkeys(items))
    return headers


def _text(content: str | list, param: str) -> str:
    if isinstance(content, str):
        return content
    return "".join(_part_text(part, f"{param}.{m}") for m, part in enumerate(content))


def _part_text(part, param: str) -> str:
    if part.type == "input_image":
        raise InvalidRequest("input_image belongs in user messages and function call outputs", param=param)
    if part.type in ("input_file", "input_audio"):
        raise text_only(part.type, param)
    return part.refusal if part.type == "refusal" else part.text


def _content(content: str | list, param: str) -> str | list[dict]:
    """A user message's or a call output's content: its text, or text and image parts when it holds images."""
    if isinstance(content, str) or all(part.type != "input_image" for part in content):
        return _text(content, param)
    return [_image_part(part, f"{param}.{m}") if part.type == "input_image"
            else {"type": "text", "text": _part_text(part, f"{param}.{m}")} for m, part in enumerate(content)]


def _image_part(part: InputImage, param: str) -> dict:
    if not part.image_url:
        what = "file_id images need OpenAI's Files API, which this server does not have" if part.file_id \
            else "an input_image needs image_url"
        raise InvalidRequest(f"{what}; send image_url (an http(s) URL or a base64 data URL)", param=param)
    return image_part(part.image_url, param)


def _response_format(text: TextConfig | None) -> dict | None:
    text_format = text.format if text is not None else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": text_format.name or "response",
                                                   "schema": text_format.json_schema}}


# --- answers (documented in /openapi.json; the shape writes plain dicts) ------------------------

class OutputTextContent(BaseModel):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]]
    logprobs: list[dict[str, Any]]


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"]
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"]
    content: list[OutputTextContent]


class OutputFunctionCall(BaseModel):
    id: str
    type: Literal["function_call"]
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    name: str
    namespace: str | None = Field(None, description="The namespace tool the function belongs to; absent for "
                                                    "a top-level function.")
    arguments: str = Field(description="The arguments as a JSON object's text.")


class OutputCustomToolCall(BaseModel):
    id: str
    type: Literal["custom_tool_call"]
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    name: str
    namespace: str | None = None
    input: str


class OutputLocalShellCall(BaseModel):
    id: str
    type: Literal["local_shell_call"]
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    action: dict[str, Any] = Field(description='{"type": "exec", "command": [...], "env": {...}, "timeout_ms", '
                                               '"working_directory", "user"}')


class OutputToolSearchCall(BaseModel):
    id: str
    type: Literal["tool_search_call"]
    status: Literal["in_progress", "completed", "incomplete"]
    call_id: str
    execution: Literal["client"]
    arguments: dict[str, Any] = Field(description="The search's arguments, as the model wrote them.")


class ReasoningPart(BaseModel):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class OutputReasoning(BaseModel):
    id: str
    type: Literal["reasoning"]
    status: Literal["in_progress", "completed", "incomplete"]
    summary: list[ReasoningPart] = Field(description="The thought again, when reasoning.summary is set.")
    content: list[ReasoningPart] = Field(description="The model's thought, split from its answer.")
    encrypted_content: str | None = Field(
        None, description="With include: [\"reasoning.encrypted_content\"]: the thought, sealed with this "
                          "installation's key; sent back in input, it reaches the next turn's prompt.")


OutputItem = Annotated[OutputReasoning | OutputMessage | OutputFunctionCall | OutputCustomToolCall
                       | OutputLocalShellCall | OutputToolSearchCall, Field(discriminator="type")]


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class InputTokenCount(BaseModel):
    object: Literal["response.input_tokens"]
    input_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class EchoedFunctionTool(BaseModel):
    """A function tool as the answer repeats it (other tool kinds are repeated as sent)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool = Field(description="As sent; false when left out.")


class ResponseObject(BaseModel):
    """A response; streamed (`stream: true`), the named events response.created, response.in_progress,
    response.output_item.added, response.content_part.added, response.output_text.delta, ...,
    response.completed (or response.incomplete, response.failed), each with a sequence_number. Every
    field of Open Responses' ResponseResource is there, with the values used where the request left
    one out."""

    id: str
    object: Literal["response"]
    created_at: int
    completed_at: int | None = Field(description="When it completed; null unless status is completed.")
    status: Literal["completed", "incomplete", "in_progress", "failed"]
    error: dict[str, Any] | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    store: bool
    temperature: float = Field(description="The temperature used: the request's, else the model's default "
                                           "(configured, else the upstream's own).")
    top_p: float = Field(description="The top_p used, as temperature.")
    presence_penalty: float = Field(description="The presence penalty used (the model's configured default or "
                                                "override, else the upstream's own).")
    frequency_penalty: float = Field(description="The frequency penalty used, as presence_penalty.")
    top_logprobs: int = Field(description="Always 0: no log probabilities are returned.")
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[EchoedFunctionTool | dict[str, Any]]
    truncation: Literal["auto", "disabled"] = Field(description="As sent (default disabled); either way, a "
                                                                "prompt is fitted to the context as the model's "
                                                                "context_overflow setting says.")
    usage: ResponseUsage | None
    user: str | None
    metadata: dict[str, str]
    reasoning: dict[str, Any] = Field(description="The request's reasoning settings (effort, summary).")
    max_tool_calls: int | None
    background: Literal[False]
    service_tier: Literal["default"]
    safety_identifier: str | None = Field(description="As sent.")
    prompt_cache_key: str | None = Field(description="As sent.")
    conversation: ConversationRef | None = None
