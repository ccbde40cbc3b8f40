"""Anthropic's Messages API: the request's models (the schema in /openapi.json).

Its translation into the internal chat request is anthropic_translation.py's, its answer's models
anthropic_answers.py's and its shape anthropic_shape.py's; the context editing a request may ask for
is anthropic_edits.py's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag

from ..protocol import STRICT, TOOL_NAME, Request
from .anthropic_edits import ContextManagement
from .anthropic_mcp import TOOLSET, McpServerDefinition, McpToolListingBlock, McpToolResultBlock, McpToolUseBlock

CacheControl = Annotated[
    dict[str, Any] | None,
    Field(None, description="Prompt caching hint: accepted and ignored (llama.cpp caches prefixes itself)."),
]
THINKING = "thinking"  # the seal's purpose for a thought handed out as a thinking block's signature


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
    media_type: StrictStr | None = Field(
        None, description="base64: image/png, image/jpeg, image/gif (or image/webp, which llama.cpp does not read)."
    )
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
    content: (
        StrictStr
        | list[Annotated[TextBlock | ToolReferenceBlock | ImageBlock | UnsupportedBlock, Field(discriminator="type")]]
        | None
    ) = None
    is_error: bool | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: StrictStr
    signature: StrictStr | None = Field(
        None,
        description="This proxy's signature reaches the template as `reasoning_content`; a thought signed elsewhere is left out.",
    )


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: StrictStr


ContentBlock = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | UnsupportedBlock
    | McpToolUseBlock
    | McpToolResultBlock
    | McpToolListingBlock
)


class ToolChangeBlock(_Block):
    """A mid-conversation tool change (`mid-conversation-tool-changes` beta). Every declared tool is
    offered from the start here, so the change is written in place, for the model to read."""

    type: Literal["tool_addition", "tool_removal"]
    tool: dict[str, Any] = Field(
        description="A tool_reference {name}, a tool_definition {definition}, or an "
        "MCP reference (set aside: no MCP connector here)."
    )

    def note(self) -> str:
        name = self.tool.get("name") or (self.tool.get("definition") or {}).get("name")
        if self.tool.get("type") not in ("tool_reference", "tool_definition") or not isinstance(name, str):
            return ""
        return (
            f"The tool {name} is available from here on."
            if self.type == "tool_addition"
            else f"The tool {name} is no longer available: do not call it."
        )


class SystemOutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="The effort from this turn on: reaches the chat template as `reasoning_effort`."
    )


class InputMessage(BaseModel):
    """A turn. A `system` turn (text and tool changes) keeps its place in the conversation, as a chat
    system message; output_config and clear_at belong to system turns only."""

    model_config = ConfigDict(extra="forbid", **STRICT)
    role: Literal["user", "assistant", "system"]
    content: StrictStr | list[Annotated[ContentBlock | ToolChangeBlock, Field(discriminator="type")]]
    output_config: SystemOutputConfig | None = None
    clear_at: Literal["next_user_message", "never"] | None = Field(
        None, description="next_user_message: left out of the prompt once a later user message exists."
    )


class CustomTool(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["custom"] | None = None
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    input_schema: dict[str, Any] = Field(description="A JSON schema of type object.")
    cache_control: CacheControl = None
    defer_loading: bool | None = Field(
        None, description="Offered like the other tools: a local server has no tool search to load it later."
    )
    strict: bool | None = Field(None, description="Accepted: a call is held to the schema whenever a grammar applies.")
    eager_input_streaming: bool | None = Field(None, description="Accepted: arguments stream whenever a grammar holds the call.")
    input_examples: list[dict[str, Any]] | None = Field(
        None, max_length=64, description="Written into the tool's description for the model to read."
    )
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
        "adaptive leaves the template's default."
    )
    budget_tokens: int | None = Field(None, ge=0, description="Accepted; the thought counts against max_tokens.")
    display: Literal["summarized", "omitted"] | None = Field(
        None, description="omitted: the thinking block's text is empty and its signature carries the thought."
    )


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema", description="The answer is held to this JSON schema.")


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Reaches the chat template as `reasoning_effort`."
    )
    format: OutputFormat | None = None


class MessagesMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    user_id: StrictStr | None = Field(None, description="Accepted and ignored.")


class CountTokensRequest(Request):
    """The request of /v1/messages/count_tokens, and what /v1/messages adds generation options to."""

    model: StrictStr = Field(description="A model name or alias; without a config file any name is served.")
    messages: list[InputMessage] = Field(min_length=1)
    system: StrictStr | list[TextBlock] | None = Field(
        None,
        description="Claude Code's per-request `x-anthropic-billing-header` line is taken out (it is "
        "metadata, and would change the prompt's start on every request).",
    )
    tools: list[Tool] | None = Field(None, max_length=512)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: CacheControl = None
    context_management: ContextManagement | None = Field(
        None, description="clear_tool_uses and clear_thinking edits are applied to the prompt as Anthropic defines them."
    )
    output_config: OutputConfig | None = None
    mcp_servers: list[McpServerDefinition] | None = Field(
        None,
        max_length=32,
        description=("MCP servers whose tools the proxy lists, offers to the model and calls itself (the MCP connector)."),
    )
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
        return [tool.name or tool.type for tool in self.tools or () if isinstance(tool, ServerTool) and tool.type != TOOLSET]

    def mcp_toolsets(self) -> list[dict]:
        """The mcp_toolset tools (the MCP connector's later shape), as sent."""
        return [tool.model_dump() for tool in self.tools or () if isinstance(tool, ServerTool) and tool.type == TOOLSET]


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
