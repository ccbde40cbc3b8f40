"""Anthropic's Messages API: request and answer models, and the request's translation into the
internal chat request (`to_chat_request`). The answer's shape is in anthropic_shape.py; the
context editing a request may ask for is in anthropic_edits.py."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag

from ..errors import InvalidRequest
from ..protocol import STRICT, TOOL_NAME, ChatCompletionRequest, Request, check_schema
from ..sealing import Seal
from .anthropic_edits import ContextManagement
from .common import chat_request, function_tool, given, image_part, named_tool_choice, text_only

CacheControl = Annotated[dict[str, Any] | None,
                         Field(None, description="Prompt caching hint: accepted and ignored (llama.cpp caches prefixes itself).")]
THINKING = "thinking"   # the seal's purpose for a thought handed out as a thinking block's signature


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    cache_control: CacheControl = None


class TextBlock(_Block):
    type: Literal["text"]
    text: StrictStr
    citations: list[dict[str, Any]] | None = Field(None, description="Accepted and ignored.")


class UnsupportedBlock(BaseModel):
    """Documents: recognised so that the answer is a 400 saying so, not a schema error."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["document"]


class ImageSource(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["base64", "url", "file"]
    media_type: StrictStr | None = Field(None, description="base64: image/png, image/jpeg, image/gif (or image/webp, "
                                                           "which llama.cpp does not read).")
    data: StrictStr | None = Field(None, description="base64: the image's bytes, base64 encoded.")
    url: StrictStr | None = Field(None, description="url: an http(s) URL the proxy fetches.")
    file_id: StrictStr | None = Field(None, description="file: refused (no Files API here).")


class ImageBlock(_Block):
    type: Literal["image"]
    source: ImageSource


class ToolReferenceBlock(_Block):
    """A tool search's result naming a tool to load: every tool is loaded here, so it is left out."""

    type: Literal["tool_reference"]
    tool_name: StrictStr


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
    content: StrictStr | list[Annotated[TextBlock | ToolReferenceBlock | ImageBlock | UnsupportedBlock,
                                        Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: StrictStr
    signature: StrictStr | None = Field(None, description="This proxy's signature reaches the template as "
                                                          "`reasoning_content`; a thought signed elsewhere is left out.")


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: StrictStr


ContentBlock = (TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | ImageBlock
                | UnsupportedBlock)


class ToolChangeBlock(_Block):
    """A mid-conversation tool change (`mid-conversation-tool-changes` beta). Every declared tool is
    offered from the start here, so the change is written in place, for the model to read."""

    type: Literal["tool_addition", "tool_removal"]
    tool: dict[str, Any] = Field(description="A tool_reference {name}, a tool_definition {definition}, or an "
                                             "MCP reference (set aside: no MCP connector here).")

    def note(self) -> str:
        name = self.tool.get("name") or (self.tool.get("definition") or {}).get("name")
        if self.tool.get("type") not in ("tool_reference", "tool_definition") or not isinstance(name, str):
            return ""
        return f"The tool {name} is available from here on." if self.type == "tool_addition" else \
            f"The tool {name} is no longer available: do not call it."


class SystemOutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="The effort from this turn on: reaches the chat template as `reasoning_effort`.")


class InputMessage(BaseModel):
    """A turn. A `system` turn (text and tool changes) keeps its place in the conversation, as a chat
    system message; output_config and clear_at belong to system turns only."""

    model_config = ConfigDict(extra="forbid", **STRICT)
    role: Literal["user", "assistant", "system"]
    content: StrictStr | list[Annotated[ContentBlock | ToolChangeBlock, Field(discriminator="type")]]
    output_config: SystemOutputConfig | None = None
    clear_at: Literal["next_user_message", "never"] | None = Field(
        None, description="next_user_message: left out of the prompt once a later user message exists.")


class CustomTool(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["custom"] | None = None
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    input_schema: dict[str, Any] = Field(description="A JSON schema of type object.")
    cache_control: CacheControl = None
    defer_loading: bool | None = Field(
        None, description="Offered like the other tools: a local server has no tool search to load it later.")
    strict: bool | None = Field(None, description="Accepted: a call is held to the schema whenever a grammar applies.")
    eager_input_streaming: bool | None = Field(None, description="Accepted: arguments stream whenever a grammar holds the call.")
    input_examples: list[dict[str, Any]] | None = Field(
        None, max_length=64, description="Written into the tool's description for the model to read.")
    allowed_callers: list[StrictStr] | None = Field(None, description="Accepted and ignored (the model calls directly).")


class ServerTool(BaseModel):
    """A tool Anthropic's servers run or define (web search, code execution, tool search, ...): set aside,
    left out of the prompt and named in the X-Tools-Set-Aside response header."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: StrictStr
    name: StrictStr | None = None


def _tool_kind(tool) -> str:
    kind = tool.get("type") if isinstance(tool, dict) else getattr(tool, "type", None)
    return "custom" if kind in (None, "custom") else "server"


Tool = Annotated[Annotated[CustomTool, Tag("custom")] | Annotated[ServerTool, Tag("server")], Discriminator(_tool_kind)]


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
    type: Literal["enabled", "disabled", "adaptive", "between_tools"] = Field(
        description="enabled/disabled (and between_tools: off) reach the chat template as `enable_thinking`; "
                    "adaptive leaves the template's default.")
    budget_tokens: int | None = Field(None, ge=0, description="Accepted; the thought counts against max_tokens.")
    display: Literal["summarized", "omitted"] | None = Field(
        None, description="omitted: the thinking block's text is empty and its signature carries the thought.")


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema", description="The answer is held to this JSON schema.")


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Reaches the chat template as `reasoning_effort`.")
    format: OutputFormat | None = None


class MessagesMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    user_id: StrictStr | None = Field(None, description="Accepted and ignored.")


class CountTokensRequest(Request):
    """The request of /v1/messages/count_tokens, and what /v1/messages adds generation options to."""

    model: StrictStr = Field(description="A model name or alias; without a config file any name is served.")
    messages: list[InputMessage] = Field(min_length=1)
    system: StrictStr | list[TextBlock] | None = Field(
        None, description="Claude Code's per-request `x-anthropic-billing-header` line is taken out (it is "
                          "metadata, and would change the prompt's start on every request).")
    tools: list[Tool] | None = Field(None, max_length=512)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: CacheControl = None
    context_management: ContextManagement | None = Field(
        None, description="clear_tool_uses and clear_thinking edits are applied to the prompt as Anthropic defines them.")
    output_config: OutputConfig | None = None
    mcp_servers: list[dict[str, Any]] | None = Field(None, description="Set aside: a local server connects to no MCP server.")
    container: StrictStr | dict[str, Any] | None = Field(None, description="Accepted and ignored (no code execution).")

    def client_tools(self) -> list[tuple[int, CustomTool]]:
        """(index in `tools`, tool) of the tools the model may call: deferred ones (defer_loading) after
        the others, so that a client loading one more changes the prompt as late as possible."""
        tools = [(n, tool) for n, tool in enumerate(self.tools or ()) if isinstance(tool, CustomTool)]
        return sorted(tools, key=lambda numbered: bool(numbered[1].defer_loading))

    def effort(self) -> str | None:
        """The effort in force: the latest system turn's output_config, else the request's."""
        for message in reversed(self.messages):
            if message.output_config is not None and message.output_config.effort is not None:
                return message.output_config.effort
        return self.output_config.effort if self.output_config is not None else None

    def set_aside_tools(self) -> list[str]:
        """The tools only Anthropic's servers can run, by name (or type), left out of the prompt."""
        return [tool.name or tool.type for tool in self.tools or () if isinstance(tool, ServerTool)]


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
    diagnostics: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    user_profile_id: StrictStr | None = Field(None, description="Accepted and ignored.")
    workspace_id: StrictStr | None = Field(None, description="Accepted and ignored.")

    def thinking_display(self) -> str | None:
        """How the model's thought is given back: "summarized" (as written), "omitted" (an empty
        thinking block whose signature carries it), or None (no thinking block: thinking disabled)."""
        if self.thinking is None:
            return "summarized"
        if self.thinking.type == "disabled":
            return None
        return self.thinking.display or "summarized"


# --- translation -----------------------------------------------------------------------------

def to_chat_request(request: CountTokensRequest, seal: Seal | None = None) -> ChatCompletionRequest:
    """The chat request `request` becomes: system and messages, tools and tool choice, sampling; the
    chat schema checks the tools (a refusal names `tools.N.input_schema`). A thinking block reaches the
    template only when `seal` verifies its signature."""
    messages = chat_messages(request, seal)
    fields: dict[str, Any] = {"model": request.model, "messages": messages}
    tools = request.client_tools()
    if tools:
        fields["tools"] = [function_tool(tool.name, _described(tool), tool.input_schema) for _, tool in tools]
    fields |= _tool_choice_fields(request.tool_choice)
    if _continues_last_message(request):
        fields |= {"add_generation_prompt": False, "continue_final_message": True}
    fields |= _template_fields(request)
    if isinstance(request, MessagesRequest):
        fields |= {"max_tokens": request.max_tokens, "stream": bool(request.stream)}
        fields |= given(request, ("temperature", "top_p", "top_k"))
        if request.stop_sequences:
            fields["stop"] = list(request.stop_sequences)
        if request.metadata is not None and request.metadata.user_id:
            fields["user"] = request.metadata.user_id   # a session key for routing (backends/routing.py)
    return chat_request(fields, [f"tools.{n}.input_schema" for n, _ in tools])


def _template_fields(request: CountTokensRequest) -> dict:
    """thinking (Qwen3's `enable_thinking` switch, as llama-server and vLLM users set it) and the
    effort (`reasoning_effort`) as template variables; output_config.format as the response format."""
    variables: dict[str, Any] = {}
    if request.thinking is not None and request.thinking.type != "adaptive":
        variables["enable_thinking"] = request.thinking.type == "enabled"
    if request.effort() is not None:
        variables["reasoning_effort"] = request.effort()   # "max" too: the template gets the value as sent
    fields: dict[str, Any] = {"chat_template_kwargs": variables} if variables else {}
    output = request.output_config
    if output is not None and output.format is not None:
        check_schema(output.format.json_schema, "output_config.format.schema")
        fields["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "output", "schema": output.format.json_schema}}
    return fields


def _described(tool: CustomTool) -> str | None:
    """The tool's description, with its input examples written after it for the model to read."""
    if not tool.input_examples:
        return tool.description
    examples = "\n".join(json.dumps(example, ensure_ascii=False) for example in tool.input_examples)
    return f"{tool.description or ''}\n\nInput examples:\n{examples}".lstrip()


def chat_messages(request: CountTokensRequest, seal: Seal | None = None) -> list[dict]:
    """The system prompt and the turns as chat messages: tool results become `tool` messages, tool
    uses an assistant's `tool_calls`, this proxy's thoughts its `reasoning_content`; `system` turns
    keep their place (one to be cleared at the next user message, until there is one)."""
    messages = []
    system = system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    last_user = max((n for n, message in enumerate(request.messages) if message.role == "user"), default=-1)
    for n, message in enumerate(request.messages):
        _check_system_only_fields(message, n)
        if message.role == "user":
            messages += _user_turn(message, n)
        elif message.role == "system":
            if message.clear_at != "next_user_message" or n > last_user:
                messages.append({"role": "system", "content": _system_turn_text(message, n)})
        else:
            messages.append(_assistant_turn(message, n, seal))
    return messages


# Claude Code's first system block (2.1.36 on): `x-anthropic-billing-header: cc_version=...; cch=...;`,
# whose cch changes with every request; at the prompt's start it would defeat llama.cpp's prefix cache.
_BILLING_HEADER = re.compile(r"^x-anthropic-billing-header:[^\n]*(\n|$)", re.IGNORECASE | re.MULTILINE)


def system_text(system: str | list[TextBlock] | None) -> str:
    """The system prompt's text, without Claude Code's per-request billing header line."""
    texts = [system or ""] if system is None or isinstance(system, str) else [block.text for block in system]
    return "\n".join(kept for text in texts if (kept := _BILLING_HEADER.sub("", text)))


def _check_system_only_fields(message: InputMessage, n: int) -> None:
    for name in ("output_config", "clear_at"):
        if message.role != "system" and getattr(message, name) is not None:
            raise InvalidRequest(f"{name} belongs to system messages only", param=f"messages.{n}.{name}")


def _system_turn_text(message: InputMessage, n: int) -> str:
    """A system turn's text, its tool changes written as notes in place."""
    if isinstance(message.content, str):
        return message.content
    for m, block in enumerate(message.content):
        if block.type not in ("text", "tool_addition", "tool_removal"):
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "system")
    texts = (block.text if block.type == "text" else block.note() for block in message.content)
    return "\n".join(text for text in texts if text)


def _user_turn(message: InputMessage, n: int) -> list[dict]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    turns: list[dict] = []
    for m, block in enumerate(message.content):
        param = f"messages.{n}.content.{m}"
        if block.type == "tool_result":
            turns.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_content(block, param)})
        elif block.type in ("text", "image"):
            if not turns or turns[-1]["role"] != "user":
                turns.append({"role": "user", "content": []})
            turns[-1]["content"].append(_user_part(block, param, follows_text=bool(turns[-1]["content"])))
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block.type, param, "user")
    return [_joined(turn) for turn in turns] or [{"role": "user", "content": ""}]


def _user_part(block, param: str, follows_text: bool) -> dict:
    """A text or image block as a chat content part; a text block after another part starts a new line."""
    if block.type == "image":
        return _image_part(block, param)
    return {"type": "text", "text": ("\n" if follows_text else "") + block.text}


def _joined(turn: dict) -> dict:
    """A user turn of text parts only as one string, as before images were taken."""
    parts = turn["content"]
    if isinstance(parts, list) and all(part["type"] == "text" for part in parts):
        return {**turn, "content": "".join(part["text"] for part in parts)}
    return turn


def _image_part(block: ImageBlock, param: str) -> dict:
    """An image block as the chat request's image_url part (a data URL for base64, the URL for url)."""
    source = block.source
    if source.type == "file" or (source.type == "base64" and not source.data) or (source.type == "url" and not source.url):
        what = "file sources (the Files API) are not supported" if source.type == "file" else \
            f"a {source.type} source needs its {'data' if source.type == 'base64' else 'url'}"
        raise InvalidRequest(f"image: {what}; send a base64 or a url source", param=f"{param}.source")
    url = source.url if source.type == "url" else f"data:{source.media_type or 'image/png'};base64,{source.data}"
    return image_part(url, param)


def _assistant_turn(message: InputMessage, n: int, seal: Seal | None) -> dict:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts, calls, thoughts = [], [], []
    for m, block in enumerate(message.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        elif block.type in ("thinking", "redacted_thinking"):
            thoughts.append(thought_of(block, seal))
        else:
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "assistant")
    turn: dict = {"role": "assistant", "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        turn["tool_calls"] = calls
    if any(thoughts):
        turn["reasoning_content"] = "\n\n".join(thought for thought in thoughts if thought)
    return turn


def thought_of(block: ThinkingBlock | RedactedThinkingBlock, seal: Seal | None) -> str | None:
    """The thought a thinking block carries back, if this installation signed it: the text its signature
    verifies, or (display "omitted", redacted) the text its token wraps; None for another server's."""
    if seal is None:
        return None
    if block.type == "redacted_thinking":
        return seal.unwrap(THINKING, block.data)
    if block.thinking:
        return block.thinking if seal.verify(THINKING, block.thinking, block.signature) else None
    return seal.unwrap(THINKING, block.signature)


def _result_content(block: ToolResultBlock, param: str) -> str | list[dict]:
    """A tool result's content: its text, or text and image parts when it holds images."""
    prefix = "Error: " if block.is_error else ""
    if block.content is None or isinstance(block.content, str):
        return prefix + (block.content or "")
    parts = [{"type": "text", "text": prefix}] if prefix else []
    for m, part in enumerate(block.content):
        if part.type == "image":
            parts.append(_image_part(part, f"{param}.content.{m}"))
        elif part.type in ("text", "tool_reference"):
            # A tool search's result names the tools it loaded; here every tool is offered from the start.
            text = part.text if part.type == "text" else f"Tool loaded: {part.tool_name}"
            parts.append({"type": "text", "text": ("\n" if len(parts) > bool(prefix) else "") + text})
        else:
            raise _unsupported(part.type, f"{param}.content.{m}", "tool_result")
    return _joined({"content": parts})["content"]


def _unsupported(kind: str, param: str, where: str) -> InvalidRequest:
    if kind == "document":
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
    citations: None = Field(description="Always null: citations are of documents, which this proxy does not take.")


class DirectCaller(BaseModel):
    type: Literal["direct"] = Field(description="The model wrote the call itself (no code execution here).")


class ToolUseContent(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(description="The parsed arguments of the call.")
    caller: DirectCaller
    toolset_name: None = Field(description="Always null: no MCP toolsets here.")


class ThinkingContent(BaseModel):
    type: Literal["thinking"]
    thinking: str = Field(description="The model's thought; empty with display \"omitted\".")
    signature: str = Field(description="This installation's signature (HMAC) of the thought; with display "
                                       "\"omitted\", a token that carries the thought back.")


class CacheCreation(BaseModel):
    ephemeral_5m_input_tokens: int = Field(description="Always 0 (see cache_creation_input_tokens).")
    ephemeral_1h_input_tokens: int = Field(description="Always 0.")


class OutputTokensDetails(BaseModel):
    thinking_tokens: int = Field(description="Of output_tokens, those the model's thought took.")


class MessageDeltaUsage(BaseModel):
    """message_delta's usage: the counts at the end of the answer."""

    input_tokens: int = Field(description="Prompt tokens llama.cpp computed (not read from its cache).")
    cache_creation_input_tokens: int = Field(description="Always 0: llama.cpp caches every prompt by itself.")
    cache_read_input_tokens: int = Field(description="Prompt tokens llama.cpp took from its cache.")
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    server_tool_use: None = Field(description="Always null: no server tool runs here.")


class MessageUsage(MessageDeltaUsage):
    """The message's usage (in message_start: the prompt's counts, output_tokens 0)."""

    cache_creation: CacheCreation
    service_tier: Literal["standard"]
    speed: Literal["standard"]
    inference_geo: None = Field(description="Always null: the answer was computed here, not in one of Anthropic's regions.")


class MessageResponse(BaseModel):
    """A message; streamed (`stream: true`), the named events message_start, content_block_start,
    content_block_delta, content_block_stop, message_delta and message_stop. Every field of the
    `anthropic` SDK's Message is present, null where it does not apply here."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[Annotated[ThinkingContent | TextContent | ToolUseContent, Field(discriminator="type")]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    stop_details: None = Field(description="Always null: a refusal is the model's plain text here.")
    container: None = Field(description="Always null: no code-execution container here.")
    diagnostics: None = Field(description="Always null: llama.cpp does not say why part of a prompt missed its cache.")
    usage: MessageUsage
    context_management: dict[str, Any] | None = Field(
        None, description="With context_management: {\"applied_edits\": [...]}, what each edit cleared.")


class TokenCount(BaseModel):
    input_tokens: int = Field(description="The prompt's tokens, after any context_management edits.")
    context_management: dict[str, int] | None = Field(
        None, description="With context_management: {\"original_input_tokens\": the count before the edits}.")


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail
