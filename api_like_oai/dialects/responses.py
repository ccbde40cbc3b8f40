"""OpenAI's Responses API: request and answer models, and the request's translation into the
internal chat request (`to_chat_request`). The answer's shape is in responses_shape.py; what is
stored (`store`, `previous_response_id`, `conversation`) is services/stored_responses.py's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag, model_validator

from ..errors import InvalidRequest
from ..protocol import _TOOL_NAME, STRICT, ChatCompletionRequest, Request, check_parameters, check_schema
from .common import refuse_tool_types


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
    """Images, files and audio: recognised so that the answer is a 400 saying so."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["input_image", "input_file", "input_audio"]


ContentPart = Annotated[InputText | OutputText | Refusal | UnsupportedContent, Field(discriminator="type")]


class MessageItem(_Strict):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: StrictStr | list[ContentPart]
    id: StrictStr | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: StrictStr
    name: StrictStr
    arguments: StrictStr
    id: StrictStr | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: StrictStr
    output: StrictStr | list[ContentPart]
    id: StrictStr | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class ReasoningItem(BaseModel):
    """An earlier answer's reasoning, as agents send it back: accepted and left out of the prompt."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["reasoning"]


def _item_type(item) -> str:
    """The tag of an input item; a message may leave its `type` out."""
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    return kind or "message"


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")], Discriminator(_item_type)]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: StrictStr = Field(pattern=_TOOL_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of type object.")
    strict: bool | None = None


class FunctionChoice(_Strict):
    type: Literal["function"]
    name: StrictStr


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
    verbosity: Literal["low", "medium", "high"] | None = Field(None, description="Accepted and ignored.")


class ReasoningConfig(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class StreamOptions(_Strict):
    include_obfuscation: bool | None = Field(None, description="Accepted and ignored (no obfuscation is added).")


class ConversationRef(_Strict):
    id: StrictStr


class ResponsesRequest(Request):
    model: StrictStr | None = None
    input: StrictStr | list[InputItem]
    instructions: StrictStr | None = None
    max_output_tokens: int | None = Field(None, ge=1, description="An upper bound, like Anthropic's max_tokens.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    tools: list[FunctionTool] | None = Field(None, max_length=512)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = Field(
        None, description="`effort` reaches the chat template as `reasoning_effort`, as on chat completions.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    store: bool | None = Field(None, description="Keep the response (default true; false with --store none).")
    previous_response_id: StrictStr | None = Field(
        None, description="Continue a stored response: its input and output come before this input.")
    conversation: StrictStr | ConversationRef | None = Field(
        None, description="A conversation (its id): its items come before this input, and this turn is added to it.")
    metadata: dict[str, StrictStr] | None = None
    user: StrictStr | None = None
    include: list[StrictStr] | None = Field(None, description="Accepted and ignored.")
    truncation: Literal["auto", "disabled"] | None = Field(None, description="Accepted; context fitting always applies.")
    prompt_cache_key: StrictStr | None = Field(None, description="Accepted and ignored.")
    safety_identifier: StrictStr | None = Field(None, description="Accepted and ignored.")
    service_tier: StrictStr | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="before")
    @classmethod
    def only_function_tools(cls, data):
        refuse_tool_types(data, ("function",), "this proxy runs only function tools")
        return data

    @model_validator(mode="after")
    def is_answerable(self):
        for n, tool in enumerate(self.tools or ()):
            check_parameters(tool.parameters, f"tools.{n}.parameters")
        if isinstance(self.input, list) and not self.input:
            raise InvalidRequest("input is an empty list", param="input")
        return self


# --- translation -----------------------------------------------------------------------------

def to_chat_request(request: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request `request` becomes: instructions and input, tools and tool choice, sampling."""
    fields: dict[str, Any] = {"model": request.model, "messages": chat_messages(request),
                              "stream": bool(request.stream)}
    if request.max_output_tokens is not None:
        fields["max_tokens"] = request.max_output_tokens
    fields |= {name: value for name in ("temperature", "top_p", "parallel_tool_calls")
               if (value := getattr(request, name)) is not None}
    if request.tools:
        fields["tools"] = [{"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
                           for tool in request.tools]
    if request.tool_choice is not None:
        fields["tool_choice"] = request.tool_choice if isinstance(request.tool_choice, str) else \
            {"type": "function", "function": {"name": request.tool_choice.name}}
    response_format = _response_format(request.text)
    if response_format:
        fields["response_format"] = response_format
    if request.reasoning is not None and request.reasoning.effort is not None:
        fields["reasoning_effort"] = request.reasoning.effort   # onto the template, as for chat
    return ChatCompletionRequest.model_validate(fields)


def chat_messages(request: ResponsesRequest) -> list[dict]:
    """Instructions as the system message, then the input items as chat turns: system and developer
    messages before the first turn join the instructions (many templates take one system message, first),
    function calls join the assistant turn before them, their outputs become `tool` messages, reasoning
    items are left out."""
    messages = [{"role": "system", "content": request.instructions}] if request.instructions else []
    if isinstance(request.input, str):
        return [*messages, {"role": "user", "content": request.input}]
    for n, item in enumerate(request.input):
        if item.type == "function_call":
            _add_call(messages, item)
        elif item.type == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output, f"input.{n}.output")})
        elif item.type != "reasoning":
            role = "system" if item.role == "developer" else item.role
            _add_message(messages, role, _text(item.content, f"input.{n}.content"))
    return messages


def _add_message(messages: list[dict], role: str, content: str) -> None:
    if role == "system" and messages and all(message["role"] == "system" for message in messages):
        messages[0]["content"] += "\n\n" + content
    else:
        messages.append({"role": role, "content": content})


def _add_call(messages: list[dict], item: FunctionCallItem) -> None:
    call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _text(content: str | list, param: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for m, part in enumerate(content):
        if part.type in ("input_image", "input_file", "input_audio"):
            raise InvalidRequest(f"{part.type} content is not supported by this proxy (text only)", param=f"{param}.{m}")
        texts.append(part.refusal if part.type == "refusal" else part.text)
    return "".join(texts)


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
    arguments: str = Field(description="The arguments as a JSON object's text.")


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


class ResponseObject(BaseModel):
    """A response; streamed (`stream: true`), the named events response.created, response.in_progress,
    response.output_item.added, response.content_part.added, response.output_text.delta, ...,
    response.completed (or response.incomplete, response.failed), each with a sequence_number."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress", "failed"]
    error: dict[str, Any] | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[Annotated[OutputMessage | OutputFunctionCall, Field(discriminator="type")]]
    parallel_tool_calls: bool
    previous_response_id: str | None
    store: bool
    temperature: float | None
    top_p: float | None
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    usage: ResponseUsage | None
    user: str | None
    metadata: dict[str, str]
    conversation: ConversationRef | None = None
