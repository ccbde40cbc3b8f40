"""The Responses API's answers' models: the response object with its output items and usage, and the
input token count. They document /openapi.json, and the tests check answers against them; the answers
themselves are plain dicts, written by responses_shape.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .responses import ConversationRef


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
    namespace: str | None = Field(
        None, description="The namespace tool the function belongs to; absent for a top-level function."
    )
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
    action: dict[str, Any] = Field(
        description='{"type": "exec", "command": [...], "env": {...}, "timeout_ms", "working_directory", "user"}'
    )


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
        None,
        description='With include: ["reasoning.encrypted_content"]: the thought, sealed with this '
        "installation's key; sent back in input, it reaches the next turn's prompt.",
    )


OutputItem = Annotated[
    OutputReasoning | OutputMessage | OutputFunctionCall | OutputCustomToolCall | OutputLocalShellCall | OutputToolSearchCall,
    Field(discriminator="type"),
]


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class CompactionOutput(BaseModel):
    id: str
    type: Literal["compaction"]
    encrypted_content: str = Field(description="The model's summary, sealed: readable only by this installation.")


class InputMessage(BaseModel):
    id: str
    type: Literal["message"]
    status: str
    role: Literal["user"]
    content: list[dict[str, Any]]


class CompactedResponse(BaseModel):
    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[Annotated[InputMessage | CompactionOutput, Field(discriminator="type")]] = Field(
        description="The user messages, then one compaction item standing for everything else."
    )
    usage: ResponseUsage


class InputTokenCount(BaseModel):
    object: Literal["response.input_tokens"]
    input_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "max_tool_calls", "steered"]


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
    temperature: float = Field(
        description="The temperature used: the request's, else the model's default (configured, else the upstream's own)."
    )
    top_p: float = Field(description="The top_p used, as temperature.")
    presence_penalty: float = Field(
        description="The presence penalty used (the model's configured default or override, else the upstream's own)."
    )
    frequency_penalty: float = Field(description="The frequency penalty used, as presence_penalty.")
    top_logprobs: int = Field(description="Always 0: no log probabilities are returned.")
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[EchoedFunctionTool | dict[str, Any]]
    truncation: Literal["auto", "disabled"] = Field(
        description="As sent (default disabled); either way, a "
        "prompt is fitted to the context as the model's "
        "context_overflow setting says."
    )
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
