"""Anthropic's Messages API: request and answer models, and the request's translation into the
internal chat request (`to_chat_request`). The answer's shape is in anthropic_shape.py."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from ..errors import InvalidRequest
from ..protocol import STRICT, TOOL_NAME, ChatCompletionRequest, Request
from .common import chat_request, function_tool, given, named_tool_choice, refuse_tool_types, text_only

CacheControl = Annotated[dict[str, Any] | None,
                         Field(None, description="Prompt caching hint: accepted and ignored (llama.cpp caches prefixes itself).")]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    cache_control: CacheControl = None


class TextBlock(_Block):
    type: Literal["text"]
    text: StrictStr
    citations: list[dict[str, Any]] | None = Field(None, description="Accepted and ignored.")


class UnsupportedBlock(BaseModel):
    """Images and documents: recognised so that the answer is a 400 saying so, not a schema error."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["image", "document"]


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: StrictStr
    name: StrictStr
    input: dict[str, Any]
    caller: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    toolset_name: StrictStr | None = Field(None, description="Accepted and ignored.")


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: StrictStr
    content: StrictStr | list[Annotated[TextBlock | UnsupportedBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: StrictStr
    signature: StrictStr | None = None


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: StrictStr


ContentBlock = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
                         | UnsupportedBlock, Field(discriminator="type")]


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    role: Literal["user", "assistant"]
    content: StrictStr | list[ContentBlock]


class CustomTool(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["custom"] | None = None
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    input_schema: dict[str, Any] = Field(description="A JSON schema of type object.")
    cache_control: CacheControl = None


class _ToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAuto(_ToolChoice):
    type: Literal["auto"]


class ToolChoiceAny(_ToolChoice):
    type: Literal["any"]


class ToolChoiceTool(_ToolChoice):
    type: Literal["tool"]
    name: StrictStr


class ToolChoiceNone(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["none"]


ToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")]


class ThinkingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)
    display: Literal["summarized", "omitted"] | None = None


class MessagesMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    user_id: StrictStr | None = None


class CountTokensRequest(Request):
    """The request of /v1/messages/count_tokens, and what /v1/messages adds generation options to."""

    model: StrictStr = Field(description="A model name or alias; without a config file any name is served.")
    messages: list[InputMessage] = Field(min_length=1)
    system: StrictStr | list[TextBlock] | None = None
    tools: list[CustomTool] | None = Field(None, max_length=512)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = Field(
        None, description="enabled/disabled reach the chat template as `enable_thinking` (Qwen3's switch).")
    cache_control: CacheControl = None
    context_management: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    output_config: dict[str, Any] | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="before")
    @classmethod
    def only_client_tools(cls, data):
        refuse_tool_types(data, ("custom", None), "this proxy runs only client tools (name, description, input_schema)")
        return data


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1, description="An upper bound: generation stops earlier if the context has no more room.")
    stop_sequences: list[StrictStr] | None = None
    stream: bool | None = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: MessagesMetadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = Field(None, description="Accepted and ignored.")
    speed: Literal["standard", "fast"] | None = Field(None, description="Accepted and ignored.")
    inference_geo: StrictStr | None = Field(None, description="Accepted and ignored.")


# --- translation -----------------------------------------------------------------------------

def to_chat_request(request: CountTokensRequest) -> ChatCompletionRequest:
    """The chat request `request` becomes: system and messages, tools and tool choice, sampling; the
    chat schema checks the tools (a refusal names `tools.N.input_schema`)."""
    messages = chat_messages(request)
    fields: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        fields["tools"] = [function_tool(tool.name, tool.description, tool.input_schema) for tool in request.tools]
    fields |= _tool_choice_fields(request.tool_choice)
    if _continues_last_message(request):
        fields |= {"add_generation_prompt": False, "continue_final_message": True}
    if isinstance(request, MessagesRequest):
        fields |= {"max_tokens": request.max_tokens, "stream": bool(request.stream)}
        fields |= given(request, ("temperature", "top_p", "top_k"))
        if request.stop_sequences:
            fields["stop"] = list(request.stop_sequences)
        if request.metadata is not None and request.metadata.user_id:
            fields["user"] = request.metadata.user_id   # a session key for routing (backends/routing.py)
        if request.thinking is not None and request.thinking.type != "adaptive":
            # Qwen3's (and SmolLM3's) switch, as llama-server and vLLM users set it.
            fields["chat_template_kwargs"] = {"enable_thinking": request.thinking.type == "enabled"}
    return chat_request(fields, [f"tools.{n}.input_schema" for n in range(len(request.tools or ()))])


def chat_messages(request: CountTokensRequest) -> list[dict]:
    """The system prompt and the turns as chat messages: tool results become `tool` messages,
    tool uses an assistant's `tool_calls`; thinking blocks are left out."""
    messages = []
    system = system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    for n, message in enumerate(request.messages):
        if message.role == "user":
            messages += _user_turn(message, n)
        else:
            messages.append(_assistant_turn(message, n))
    return messages


def system_text(system: str | list[TextBlock] | None) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    return "\n".join(block.text for block in system)


def _user_turn(message: InputMessage, n: int) -> list[dict]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    turns: list[dict] = []
    for m, block in enumerate(message.content):
        if block.type == "tool_result":
            turns.append({"role": "tool", "tool_call_id": block.tool_use_id,
                          "content": _result_text(block, f"messages.{n}.content.{m}")})
        elif block.type == "text":
            if turns and turns[-1]["role"] == "user":
                turns[-1]["content"] += "\n" + block.text
            else:
                turns.append({"role": "user", "content": block.text})
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "user")
    return turns or [{"role": "user", "content": ""}]


def _assistant_turn(message: InputMessage, n: int) -> dict:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts, calls = [], []
    for m, block in enumerate(message.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "assistant")
    turn: dict = {"role": "assistant", "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        turn["tool_calls"] = calls
    return turn


def _result_text(block: ToolResultBlock, param: str) -> str:
    if block.content is None or isinstance(block.content, str):
        text = block.content or ""
    else:
        for m, part in enumerate(block.content):
            if part.type != "text":
                raise _unsupported(part.type, f"{param}.content.{m}", "tool_result")
        text = "\n".join(part.text for part in block.content)
    return f"Error: {text}" if block.is_error else text


def _unsupported(kind: str, param: str, where: str) -> InvalidRequest:
    if kind in ("image", "document"):
        return text_only(kind, param)
    return InvalidRequest(f"a {kind!r} block cannot be in a {where} message", param=param)


def _tool_choice_fields(choice) -> dict:
    if choice is None:
        return {}
    if choice.type == "none":
        return {"tool_choice": "none"}
    fields: dict[str, Any] = {"tool_choice": {"auto": "auto", "any": "required"}.get(choice.type) or
                              named_tool_choice(choice.name)}
    if choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    return fields


def _continues_last_message(request: CountTokensRequest) -> bool:
    """Anthropic's prefill: a conversation that ends with an assistant's text is continued, not answered."""
    last = request.messages[-1]
    if last.role != "assistant":
        return False
    return isinstance(last.content, str) or all(block.type == "text" for block in last.content)


# --- answers (documented in /openapi.json; the shape writes plain dicts) ------------------------

class TextContent(BaseModel):
    type: Literal["text"]
    text: str


class ToolUseContent(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(description="The parsed arguments of the call.")


class MessageUsage(BaseModel):
    input_tokens: int = Field(description="Prompt tokens llama.cpp computed (not read from its cache).")
    cache_creation_input_tokens: int = Field(description="Always 0: llama.cpp caches every prompt by itself.")
    cache_read_input_tokens: int = Field(description="Prompt tokens llama.cpp took from its cache.")
    output_tokens: int


class MessageResponse(BaseModel):
    """A message; streamed (`stream: true`), the named events message_start, content_block_start,
    content_block_delta, content_block_stop, message_delta and message_stop."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[Annotated[TextContent | ToolUseContent, Field(discriminator="type")]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: MessageUsage


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail
