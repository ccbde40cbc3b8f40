"""OpenAI's Responses API: the request's models (strict; the schema in /openapi.json).

Its translation into the internal chat request is responses_translation.py's, its tool kinds
responses_tools.py's, its answer's models responses_answers.py's and its shape responses_shape.py's;
what is stored (`store`, `previous_response_id`, `conversation`) is services/stored_responses.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag, model_validator

from ..errors import InvalidRequest
from ..protocol import STRICT, Request, check_schema
from .responses_mcp import (
    APPROVAL_REQUEST,
    APPROVAL_RESPONSE,
    CALL,
    LIST_TOOLS,
    MCP,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
)
from .responses_tools import (
    Tool,
    Toolbox,
    ToolChoice,
    other_than,
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
    """Files: recognised so that the answer is a 400 saying so."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["input_file"]


class AudioData(_Strict):
    data: StrictStr = Field(description="The audio, base64")
    format: Literal["wav", "mp3", "flac"]


class InputAudio(_Strict):
    """An extension of this server (OpenAI's Responses API takes no audio): Chat Completions' audio part,
    for a model whose projector hears (docs/images-and-audio.md)."""

    type: Literal["input_audio"]
    input_audio: AudioData


_IMAGE_FROM = {
    "anyOf": [
        {"required": ["image_url"], "properties": {"image_url": {"type": "string", "minLength": 1}}},
        {"required": ["file_id"], "properties": {"file_id": {"type": "string", "minLength": 1}}},
    ]
}


class InputImage(_Strict):
    model_config = ConfigDict(json_schema_extra=_IMAGE_FROM)
    type: Literal["input_image"]
    image_url: StrictStr | None = Field(None, description="An http(s) URL the proxy fetches, or a base64 data URL.")
    file_id: StrictStr | None = Field(None, description="Refused when generating: images are not read from files here.")
    detail: Literal["low", "high", "auto", "original"] | None = Field(
        None, description="Accepted and ignored: the model's projector decides the resolution."
    )

    @model_validator(mode="after")
    def names_its_image(self):
        if not self.image_url and not self.file_id:
            raise InvalidRequest("an input_image needs image_url (an http(s) URL or a base64 data URL)", param="image_url")
        return self


ContentPart = Annotated[
    InputText | OutputText | Refusal | InputImage | InputAudio | UnsupportedContent, Field(discriminator="type")
]


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


class CompactionItem(BaseModel):
    """What POST /v1/responses/compact made of a conversation: the model's summary, sealed by this
    installation. It goes back to the model as a user turn saying it is the summary (one this proxy
    cannot read, another server's, is set aside)."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["compaction"]
    id: StrictStr | None = None
    encrypted_content: StrictStr
    created_by: StrictStr | None = None


_ITEM_TYPES = (
    "message",
    "compaction",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "reasoning",
    LIST_TOOLS,
    CALL,
    APPROVAL_REQUEST,
    APPROVAL_RESPONSE,
)


class SetAsideItem(BaseModel):
    """An input item of a kind that carries nothing this proxy can give the model (a hosted tool's
    call, an item reference to a stored item, ...): set aside, named in X-Input-Items-Set-Aside."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: StrictStr = Field(json_schema_extra=other_than(*_ITEM_TYPES, ""))  # "": a message's, as left out


def _item_type(item) -> str:
    """The tag of an input item; a message may leave its `type` out, an unknown kind is set aside."""
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")
    kind = kind or "message"
    return kind if kind in _ITEM_TYPES else "set_aside"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[LocalShellCallItem, Tag("local_shell_call")]
    | Annotated[LocalShellCallOutputItem, Tag("local_shell_call_output")]
    | Annotated[ToolSearchCallItem, Tag("tool_search_call")]
    | Annotated[ToolSearchOutputItem, Tag("tool_search_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[CompactionItem, Tag("compaction")]
    | Annotated[McpListToolsItem, Tag(LIST_TOOLS)]
    | Annotated[McpCallItem, Tag(CALL)]
    | Annotated[McpApprovalRequestItem, Tag(APPROVAL_REQUEST)]
    | Annotated[McpApprovalResponseItem, Tag(APPROVAL_RESPONSE)]
    | Annotated[SetAsideItem, Tag("set_aside")],
    Discriminator(_item_type),
]


class TextFormat(_Strict):
    model_config = ConfigDict(  # a json_schema format has its schema (schema_is_usable)
        json_schema_extra={
            "anyOf": [
                {"properties": {"type": {"enum": ["text", "json_object"]}}},
                {"properties": {"type": {"const": "json_schema"}, "schema": {"type": "object"}}, "required": ["schema"]},
            ]
        }
    )
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
        None, description="Reaches the chat template as the variable `verbosity`, as on chat completions."
    )


class ReasoningConfig(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Reaches the chat template as `reasoning_effort`, as on chat completions."
    )
    summary: Literal["auto", "concise", "detailed"] | None = Field(
        None, description="Any value: the reasoning item's summary is the model's thought itself."
    )
    generate_summary: Literal["auto", "concise", "detailed"] | None = Field(None, description="Deprecated: summary.")
    context: Literal["auto", "current_turn", "all_turns"] | None = Field(
        None,
        description="current_turn: thoughts of assistant turns before the last user message are left "
        "out of the prompt; otherwise every recalled thought reaches the template.",
    )
    mode: StrictStr | None = Field(None, description="Accepted and ignored.")

    def wants_summary(self) -> bool:
        return (self.summary or self.generate_summary) is not None


class ContextManagement(_Strict):
    type: StrictStr = Field(description="compaction: compact when the prompt passes the threshold; other types are set aside.")
    compact_threshold: int | None = Field(
        None, ge=1, description="In tokens of the prompt; default: four fifths of the model's context."
    )


class StreamOptions(_Strict):
    include_obfuscation: bool | None = Field(None, description="Accepted and ignored (no obfuscation is added).")


ENCRYPTED_REASONING = "reasoning.encrypted_content"
REASONING_PURPOSE = "reasoning"  # the Seal's purpose for a thought handed out as encrypted_content
COMPACTION_PURPOSE = "compaction"  # the Seal's purpose for a summary handed out in a compaction item


class ConversationRef(_Strict):
    id: StrictStr


def _some_items(schema: dict) -> None:
    """/openapi.json: a list input has at least one item (an empty one is refused with its own message)."""
    for option in schema.get("anyOf", ()):
        if option.get("type") == "array":
            option["minItems"] = 1


class ResponsesRequest(Request):
    model: StrictStr | None = None
    input: StrictStr | list[InputItem] = Field(json_schema_extra=_some_items)  # [] refused by is_answerable
    instructions: StrictStr | None = None
    max_output_tokens: int | None = Field(None, ge=1, description="An upper bound, like Anthropic's max_tokens.")
    max_tool_calls: int | None = Field(
        None, ge=0, description="At most this many calls in the answer: a call past it ends the answer."
    )
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    tools: list[Tool] | None = Field(
        None,
        max_length=512,
        description=(
            "function, namespace, custom and local_shell tools are offered to the model; mcp servers' tools are "
            "listed, offered and called by the proxy; others (web_search, "
            "file_search, code_interpreter, image_generation, computer use, ...) are set aside and named "
            "in the X-Tools-Set-Aside response header."
        ),
    )
    tool_choice: ToolChoice | None = Field(
        None, description=("Every form; a choice of a tool set aside becomes auto (X-Tool-Choice-Set-Aside).")
    )
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    background: bool | None = Field(
        None, description="Only false: a response is generated while the client waits.", json_schema_extra={"enum": [False, None]}
    )
    store: bool | None = Field(None, description="Keep the response (default true; false with --store none).")
    previous_response_id: StrictStr | None = Field(
        None, description="Continue a stored response: its input and output come before this input."
    )
    conversation: StrictStr | ConversationRef | None = Field(
        None, description="A conversation (its id): its items come before this input, and this turn is added to it."
    )
    context_management: list[ContextManagement] | None = Field(
        None,
        max_length=8,
        description="compaction: a prompt past compact_threshold is compacted first (the compaction item leads the output).",
    )
    metadata: dict[str, StrictStr] | None = None
    client_metadata: dict[str, Any] | None = Field(None, description="Accepted and ignored (Codex's).")
    user: StrictStr | None = None
    include: list[StrictStr] | None = Field(
        None,
        description=(
            "Every value accepted: reasoning.encrypted_content adds the thought, sealed, to reasoning items; the "
            "others name outputs this proxy does not make."
        ),
    )
    truncation: Literal["auto", "disabled"] | None = Field(None, description="Accepted; context fitting always applies.")
    prompt_cache_key: StrictStr | None = Field(
        None, description="A conversation's key: with several upstreams, a new conversation is placed by it."
    )
    prompt_cache_retention: StrictStr | None = Field(None, description="Accepted and ignored.")
    safety_identifier: StrictStr | None = Field(None, description="Accepted and ignored.")
    service_tier: StrictStr | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="after")
    def is_answerable(self):
        if self.background:
            raise InvalidRequest(
                "background responses are not supported: this proxy generates a response only "
                "while the client waits (streamed or not), so there is none to poll or cancel "
                "while it runs; a stored one (store) can be read back once answered with "
                "GET /v1/responses/{id}; send background: false",
                param="background",
            )
        if isinstance(self.input, list) and not self.input:
            raise InvalidRequest("input is an empty list", param="input")
        return self

    def compact_threshold(self, context_length: Callable[[], int]) -> int | None:
        """The prompt tokens past which this request is compacted first (context_management); None: never.
        `context_length` is asked only then: an OpenAI-compatible upstream cannot tell it."""
        for entry in self.context_management or ():
            if entry.type == "compaction":
                return entry.compact_threshold or context_length() * 4 // 5
        return None

    def includes_encrypted_reasoning(self) -> bool:
        return ENCRYPTED_REASONING in (self.include or ())

    def toolbox(self) -> Toolbox:
        """The functions offered for this request: its tools, and those its client's tool searches found
        (made once: the translation, the answer's shape and the headers each ask for it)."""
        return self._toolbox

    def model_copy(self, *, update=None, deep=False):
        """A copy whose toolbox is made anew: pydantic copies the instance's `__dict__`, cached toolbox
        included, so a copy with other `tools` (the MCP servers' own, services/responses.py) would offer
        the original's."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("_toolbox", None)
        return copied

    @functools.cached_property
    def _toolbox(self) -> Toolbox:
        found = (
            []
            if isinstance(self.input, str)
            else [(f"input.{n}.tools", item.tools) for n, item in enumerate(self.input) if item.type == "tool_search_output"]
        )
        return toolbox(self.tools, found, self._mcp_listed())

    def mcp_tools(self) -> list:
        """The request's `mcp` tools."""
        return [tool for tool in self.tools or () if tool.type == MCP]

    def _mcp_listed(self) -> list[tuple]:
        """(where, mcp tool, listed tools) of the last mcp_list_tools item in the input of each of the
        request's mcp servers (by server_label)."""
        servers = {tool.server_label: tool for tool in self.mcp_tools()}
        if not servers or isinstance(self.input, str):
            return []
        latest = {
            item.server_label: (f"input.{n}.tools", item)
            for n, item in enumerate(self.input)
            if item.type == LIST_TOOLS and item.server_label in servers
        }
        return [
            (where, servers[label], [tool.model_dump(exclude_none=True) for tool in item.tools])
            for label, (where, item) in latest.items()
        ]


# The conversation a compaction needs (has_a_conversation), as /openapi.json says it.
_SOME_INPUT = {"required": ["input"], "properties": {"input": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}}}
_GIVEN_ID = {"properties": {"previous_response_id": {"type": "string"}}}


class CompactRequest(Request):
    """POST /v1/responses/compact: the conversation to compact, as a response would continue it."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [_SOME_INPUT, {"required": ["previous_response_id"], **_GIVEN_ID}]})

    model: StrictStr | None = None
    input: StrictStr | list[InputItem] | None = None
    instructions: StrictStr | None = None
    previous_response_id: StrictStr | None = Field(None, description="A stored response: its input and output come first.")
    tools: list[dict[str, Any]] | None = Field(None, description="Accepted and ignored (the summary calls no tool).")
    parallel_tool_calls: bool | None = Field(None, description="Accepted and ignored.")
    reasoning: ReasoningConfig | None = Field(None, description="Accepted and ignored.")
    text: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    prompt_cache_key: StrictStr | None = Field(None, description="A conversation's key, as for POST /v1/responses.")
    prompt_cache_retention: StrictStr | None = Field(None, description="Accepted and ignored.")
    prompt_cache_options: dict[str, Any] | None = Field(None, description="Accepted and ignored.")
    service_tier: StrictStr | None = Field(None, description="Accepted and ignored.")
    image: dict[str, Any] | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="after")
    def has_a_conversation(self):
        if (self.input is None or self.input == []) and self.previous_response_id is None:
            raise InvalidRequest("input or previous_response_id is needed: there is nothing to compact", param="input")
        return self
