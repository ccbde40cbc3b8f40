"""The answers' models of OpenAI's APIs and the internal routes (chat completions and their chunks,
text completions, embeddings, models, tokens, requests in flight, errors), in OpenAI's field order.

They document /openapi.json, and the tests check answers against them; the answers themselves are
plain dicts, written by the shapes (dialects/openai_shape.py) and the routes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    """The base of the answers' models. They document /openapi.json (and the tests check answers
    against them) but never validate anything at run time, so pydantic builds their validators when
    first asked (defer_build), not at start-up: idle memory (benchmarks/PROFILE.md)."""

    model_config = ConfigDict(defer_build=True)


class PromptTokensDetails(Answer):
    cached_tokens: int = Field(description="Prompt tokens llama.cpp took from its cache instead of computing them.")


class Usage(Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class ModelCard(Answer):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llama.cpp"
    # Not OpenAI's; what clients of local servers read to size their prompts and pick features.
    context_length: int | None = Field(
        description="Tokens one request may use (prompt and answer): the config's context_length, else "
        "llama.cpp's context per slot; null while the upstream has not answered. As OpenRouter "
        "and LM Studio name it."
    )
    max_model_len: int | None = Field(description="The same number, as vLLM names it.")
    capabilities: list[Literal["completion", "chat", "tools", "embeddings", "vision", "rerank"]] = Field(
        description="What the model can be asked for: completion (/v1/completions), chat "
        "(/v1/chat/completions), tools (tool calling), embeddings (/v1/embeddings), vision "
        "(images in chat), rerank (/v1/rerank)."
    )
    input_modalities: list[Literal["text", "image", "audio"]] = Field(
        ["text"],
        description="What the model reads: image (audio) when its llama-server's projector (--mmproj) "
        "has a vision (audio) encoder, as its /props says (text only until the upstream "
        "has answered).",
    )
    status: ModelStatus | None = Field(
        None,
        description="For a model the proxy starts itself: where it is in "
        "its life, as llama.cpp's router mode and llama-swap report it.",
    )


class ModelStatus(Answer):
    model_config = ConfigDict(defer_build=True, extra="allow")  # and in_flight, queued, loads, evictions, ...

    value: Literal["loaded", "loading", "unloaded", "failed"]
    memory_mib: int | None = Field(
        description="The memory it needs (all replicas), estimated from its GGUF file "
        "or its config's memory:, in MiB (null for the moment after start-up "
        "before its file's header is read)."
    )
    file: dict | None = Field(
        None, description="What its GGUF file's header says: architecture, context_length (trained), parameters, quantization."
    )
    stage: str | None = Field(None, description="What a load or unload is doing now.")
    exit_code: int | None = Field(None, description="How its llama-server last exited, when it failed.")
    error: str | None = Field(None, description="Why it failed, with its llama-server's last log lines.")


class ModelList(Answer):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ModelLoadResponse(Answer):
    success: bool = True
    model: str
    status: ModelStatus


class ErrorDetail(Answer):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Answer):
    error: ErrorDetail


class TopLogprob(Answer):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobItem(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Answer):
    content: list[TokenLogprobItem] | None
    refusal: list[TokenLogprobItem] | None = None


class ResponseFunctionCall(Answer):
    name: str
    arguments: str = Field(description='The arguments as a JSON object\'s text; "{}" when there are none.')


class ResponseToolCall(Answer):
    id: str
    type: Literal["function"]
    function: ResponseFunctionCall


class AssistantMessage(Answer):
    role: str
    content: str | None
    refusal: str | None = None
    tool_calls: list[ResponseToolCall] | None = None
    function_call: ResponseFunctionCall | None = Field(None, description="Only for requests with `functions`.")
    reasoning_content: str | None = Field(None, description="The model's thought, when split from the answer.")


class ChatChoice(Answer):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls", "function_call"] | None


class ChatCompletion(Answer):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str | None = None
    service_tier: str | None = Field(None, description='"default", when the request named a tier.')
    choices: list[ChatChoice]
    usage: Usage


class ChunkFunctionCall(Answer):
    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(Answer):
    index: int
    id: str | None = Field(None, description="On a call's first delta only, with type and function.name.")
    type: Literal["function"] | None = None
    function: ChunkFunctionCall


class ChunkDelta(Answer):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None
    function_call: ChunkFunctionCall | None = None
    reasoning_content: str | None = None


class ChunkChoice(Answer):
    index: int
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls", "function_call"] | None


class ChatCompletionChunk(Answer):
    """One `data:` event of a chat stream (text/event-stream), ended by `data: [DONE]`."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None = None
    service_tier: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(Answer):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Answer):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"] | None


class Completion(Answer):
    """A text completion; streamed, each `data:` event has this shape (object text_completion)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None


class Embedding(Answer):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingList(Answer):
    object: Literal["list"]
    model: str
    data: list[Embedding]
    usage: dict[str, int]


class EncodeResponse(Answer):
    tokens: list[int]
    length: int


class DecodeResponse(Answer):
    text: str


class TokenCountResponse(Answer):
    length: int


class ChatPromptResponse(Answer):
    prompt: str
    stop: list[str]
    tool_call_format: str | None = Field(None, description="How tool calls are written and parsed, with tools.")
    grammar: str | None = Field(None, description="The GBNF grammar that would be sent upstream, if any.")
    grammar_lazy: bool | None = Field(None, description="Whether it applies only once a call begins.")


class StopGenerationResponse(Answer):
    stopped: int


class LiveRequest(Answer):
    """A request in flight as /v1/internal/requests lists it (observability.RequestRecord.live)."""

    request_id: str
    endpoint: str
    model: str
    upstream: str
    phase: Literal["queued", "loading model", "prefill", "generating"]
    elapsed_seconds: float
    prefill_percent: float | None = Field(
        None, description="How much of the prompt's uncached part llama.cpp has read (with phase prefill and after)."
    )
    prompt_tokens: int | None = Field(None, description="The prompt's tokens, once llama.cpp reported progress.")
    generated_tokens: int
    tokens_per_second: float | None = Field(None, description="Generated tokens per second since the first token.")
    stoppable: bool = Field(description="Whether it is generating (stop-generation would end it).")


class LiveRequestList(Answer):
    object: Literal["list"] = "list"
    data: list[LiveRequest]
