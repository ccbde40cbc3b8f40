"""Anthropic's Messages API's answers' models: the message with its content blocks and usage, the token
count and the error. They document /openapi.json, and the tests check answers against them; the
answers themselves are plain dicts, written by anthropic_shape.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


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
    thinking: str = Field(description='The model\'s thought; empty with display "omitted".')
    signature: str = Field(
        description="This installation's signature (HMAC) of the thought; with display "
        '"omitted", a token that carries the thought back.'
    )


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
        None, description='With context_management: {"applied_edits": [...]}, what each edit cleared.'
    )


class TokenCount(BaseModel):
    input_tokens: int = Field(description="The prompt's tokens, after any context_management edits.")
    context_management: dict[str, int] | None = Field(
        None, description='With context_management: {"original_input_tokens": the count before the edits}.'
    )


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail
