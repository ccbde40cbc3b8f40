"""The API schema: pydantic models of every request and response, in OpenAI's field order.

These models are the single source of request validation and of /openapi.json. Fields that
OpenAI defines come first; llama.cpp's own options follow, each described. A request model
turns itself into the upstream's payload with `to_llamacpp()`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

Stop = Annotated[str | list[StrictStr] | None,
                 Field(description="Up to any number of strings at which generation stops.")]


class Request(BaseModel):
    # Unknown fields are refused (400 naming them) rather than silently dropped.
    model_config = ConfigDict(extra="forbid")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: StrictStr
    text: StrictStr | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ... reach Jinja templates
    role: StrictStr
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool | None = None


class SamplingFields(Request):
    """Sampling options shared by chat and completions; OpenAI's first, then llama.cpp's."""

    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    max_tokens: int | None = Field(None, ge=0)
    n: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: Stop = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    user: str | None = None
    # llama.cpp's own sampling options, passed through only when given.
    top_k: int | None = Field(None, description="llama.cpp: keep only the k most likely tokens.")
    min_p: float | None = Field(None, description="llama.cpp: minimum probability relative to the best token.")
    repeat_penalty: float | None = Field(None, description="llama.cpp: penalty for repeated tokens.")
    mirostat: int | None = Field(None, description="llama.cpp: Mirostat sampling (0 off, 1, 2).")
    mirostat_tau: float | None = Field(None, description="llama.cpp: Mirostat target entropy.")
    mirostat_eta: float | None = Field(None, description="llama.cpp: Mirostat learning rate.")
    grammar: str | None = Field(None, description="llama.cpp: GBNF grammar constraining the output.")
    cache_prompt: bool | None = Field(None, description="llama.cpp: reuse the KV cache of a shared prompt prefix.")

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def token_limit(self) -> int | None:
        return self.max_tokens

    def sampling_payload(self) -> dict:
        """llama.cpp /completion fields for the sampling options that were given."""
        payload = {"n_predict": -1 if self.token_limit() is None else self.token_limit()}
        for name in _PASSTHROUGH:
            value = getattr(self, name)
            if value is not None:
                payload[name] = value
        if self.logit_bias:
            payload["logit_bias"] = [[int(token), bias] for token, bias in self.logit_bias.items()]
        return payload


_PASSTHROUGH = ("frequency_penalty", "presence_penalty", "seed", "temperature", "top_p", "top_k",
                "min_p", "repeat_penalty", "mirostat", "mirostat_tau", "mirostat_eta", "grammar",
                "cache_prompt")


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=0)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    # Chat-template options (vLLM's names).
    add_generation_prompt: bool = Field(True, description="Open a new assistant turn at the end of the prompt.")
    continue_final_message: bool = Field(
        False, description="Continue the last (assistant) message instead of opening a new turn.")
    echo: bool = Field(False, description="Prefix the reply with the last message's content when it has the response role.")

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[StrictStr] | list[int] | list[list[int]] = ""
    model: str | None = None
    best_of: int | None = None
    echo: bool | None = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None


# --- responses ---------------------------------------------------------------------------

class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "llama.cpp"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
