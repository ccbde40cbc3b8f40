"""Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`, ...): its requests, field for field as
Ollama's API reference has them, and their translation into the chat request (`to_chat_request`,
`generate_to_chat_request`) or the text completion request (`generate_to_completion`: `raw` prompts,
and `suffix`, llama.cpp's fill-in-the-middle /infill). Pure: no I/O.

Unknown fields are ignored, as Ollama ignores them (its clients send fields of newer versions);
`options` llama.cpp cannot honour per request (num_gpu, num_thread, ...) are accepted and named by
`ignored_options`, never refused.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from ..errors import InvalidRequest
from ..protocol import INT32, ROLE_PATTERN, STRICT, TOOL_NAME, ChatCompletionRequest, CompletionRequest, check_bounded_schema
from .common import chat_request, function_tool, image_part

# Strict as the other APIs' models (and as Go's decoder: no "5" for 5); unknown fields ignored, as Ollama does.
_IGNORE_EXTRA = ConfigDict(extra="ignore", **STRICT)
# A Go duration ("5m", "1h30m", "-1"), as keep_alive_seconds reads it.
_GO_DURATION = r"^(-?(\d+(\.\d+)?|(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+))?$"
# (Documented, not enforced by pydantic: keep_alive_seconds refuses another in Go's words, as Ollama does.)
KeepAlive = Annotated[StrictStr, Field(json_schema_extra={"pattern": _GO_DURATION})] | int | float | None
Think = StrictBool | Literal["low", "medium", "high"] | None

# Ollama's option -> the chat request's field (the same name where none is given).
_OPTION_FIELDS = {
    "num_predict": "max_tokens",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "temperature": "temperature",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "stop": "stop",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
    "tfs_z": "tfs_z",
    "num_keep": "n_keep",
    "penalize_newline": "penalize_nl",
}
# Read by the service (num_ctx bounds the context a request may use), not a sampling field.
CONTEXT_OPTION = "num_ctx"
WHOLE_CONTEXT = -1  # repeat_last_n's "as far back as num_ctx", which llama-server does not take


class ToolCallFunction(BaseModel):
    model_config = _IGNORE_EXTRA
    name: StrictStr
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)
    index: int | None = None


class ToolCall(BaseModel):
    model_config = _IGNORE_EXTRA
    id: StrictStr | None = None
    function: ToolCallFunction


class Message(BaseModel):
    model_config = _IGNORE_EXTRA
    role: StrictStr = Field(pattern=ROLE_PATTERN)
    content: StrictStr | None = ""
    thinking: StrictStr | None = None
    images: list[StrictStr] | None = Field(None, description="Base64 images (no data: prefix).")
    tool_calls: list[ToolCall] | None = None
    tool_name: StrictStr | None = Field(None, description="The tool whose result this `tool` message is.")


class ToolFunction(BaseModel):
    model_config = _IGNORE_EXTRA
    name: StrictStr = Field(pattern=TOOL_NAME)  # as the chat request's tools
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = _IGNORE_EXTRA
    type: StrictStr = "function"
    function: ToolFunction


class Options(BaseModel):
    """Ollama's runtime options: the sampling ones map onto llama.cpp's fields; the rest are set aside."""

    model_config = ConfigDict(extra="allow", **STRICT)
    num_ctx: int | None = Field(None, ge=0)
    num_predict: int | None = Field(None, le=INT32)
    temperature: float | None = Field(None, ge=0.0, le=2.0)  # as the chat request's bounds
    top_k: int | None = None
    top_p: float | None = Field(None, ge=0.0, le=1.0)  # as the chat request's bounds
    min_p: float | None = None
    typical_p: float | None = None
    tfs_z: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = Field(None, ge=-1, le=INT32)  # -1: the whole context (services/ollama.py)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)  # as the chat request's bounds
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)  # as the chat request's bounds
    seed: int | None = None
    stop: list[StrictStr] | StrictStr | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    num_keep: int | None = Field(None, ge=-1, le=INT32)
    penalize_newline: bool | None = None


class _Generating(BaseModel):
    model_config = _IGNORE_EXTRA
    model: StrictStr = Field(min_length=1)
    format: Literal["", "json"] | dict[str, Any] | None = None
    options: Options | None = None
    stream: bool = Field(True, description="NDJSON objects as they come (the default); false: one object.")
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = Field(None, description="Accepted; token log probabilities are not returned.")
    top_logprobs: int | None = None


class ChatRequest(_Generating):
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = None


class GenerateRequest(_Generating):
    prompt: StrictStr | None = None
    suffix: StrictStr | None = Field(None, description="Fill in the middle: through llama.cpp's /infill.")
    system: StrictStr | None = None
    template: StrictStr | None = Field(None, description="Accepted and set aside: the model's template is used.")
    context: list[int] | None = Field(None, description="Accepted and set aside: send the conversation instead.")
    raw: bool | None = None
    images: list[StrictStr] | None = None


class EmbedRequest(BaseModel):
    model_config = _IGNORE_EXTRA
    model: StrictStr = Field(min_length=1)
    input: StrictStr | list[StrictStr] = ""
    truncate: bool | None = None
    dimensions: int | None = Field(None, ge=1)
    options: Options | None = None
    keep_alive: KeepAlive = None


class EmbeddingsRequest(BaseModel):
    model_config = _IGNORE_EXTRA
    model: StrictStr = Field(min_length=1)
    prompt: StrictStr = ""
    options: Options | None = None
    keep_alive: KeepAlive = None


class ModelRequest(BaseModel):
    """/api/show and /api/delete: a model by name (`name` is the older spelling)."""

    model_config = _IGNORE_EXTRA
    model: StrictStr | None = None
    name: StrictStr | None = None
    verbose: bool | None = None

    def named(self) -> str:
        name = self.model or self.name
        if not name:
            raise InvalidRequest("model is required", param="model")
        return name


# --- keep_alive ---------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value: KeepAlive) -> float | None:
    """Seconds a model is to stay loaded after the request, as Ollama reads keep_alive: a number is
    seconds, a string a Go duration ("5m", "1h30m", "-1"); negative is for ever (-1.0 here), 0 unload
    at once. None when not given."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return -1.0 if value < 0 else float(value)
    text = value.strip()
    sign, text = (-1.0, text[1:]) if text.startswith("-") else (1.0, text)
    try:
        return -1.0 if sign < 0 and float(text) > 0 else float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise InvalidRequest(f"time: invalid duration {value!r}", param="keep_alive")
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    return -1.0 if sign < 0 and seconds > 0 else seconds


# --- translation --------------------------------------------------------------------------------


def ignored_options(options: Options | None) -> list[str]:
    """The options given that no llama.cpp request field can honour (num_gpu, num_thread, ...)."""
    if options is None:
        return []
    return sorted(options.model_extra or {})


def _sampling_fields(request: _Generating) -> dict:
    options = request.options
    fields: dict[str, Any] = {}
    if options is not None:
        for name, field in _OPTION_FIELDS.items():
            value = getattr(options, name)
            if value is not None:
                fields[field] = value
    if fields.get("max_tokens") is not None and fields["max_tokens"] < 0:
        del fields["max_tokens"]  # Ollama's -1 (and -2, fill the context): as long as the context allows
    if fields.get("repeat_last_n") == WHOLE_CONTEXT:
        del fields["repeat_last_n"]  # llama-server takes no -1: the service writes the model's context in
    return fields


def _format_fields(request: _Generating) -> dict:
    """`format`: "json" is any JSON object, a schema the grammar holds the answer to (a 400 naming
    `format` for one llama.cpp cannot follow)."""
    if request.format == "json":
        return {"response_format": {"type": "json_object"}}
    if isinstance(request.format, dict):
        check_bounded_schema(request.format, "format")
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "format", "schema": request.format}}}
    return {}


def _think_fields(think: Think) -> dict:
    """`think` as the template's switch (`enable_thinking`) and, for a level, `reasoning_effort`."""
    if think is None:
        return {}
    if isinstance(think, str):
        return {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": think}
    return {"chat_template_kwargs": {"enable_thinking": think}}


def _common_fields(request: _Generating) -> dict:
    return {
        "model": request.model,
        "stream": request.stream,
        **_sampling_fields(request),
        **_format_fields(request),
        **_think_fields(request.think),
    }


def chat_messages(messages: list[Message]) -> list[dict]:
    """Ollama's messages as the chat request's: images as image parts, tool calls with arguments as
    JSON text and ids made up (Ollama's have none), a tool result answering the latest call of its
    `tool_name` (else the latest call)."""
    translated, calls = [], []
    for n, message in enumerate(messages):
        entry: dict[str, Any] = {"role": message.role, "content": _content(message, n)}
        if message.thinking and message.role == "assistant":
            entry["reasoning_content"] = message.thinking
        if message.tool_calls:
            entry["tool_calls"] = [_call(call, len(calls) + k) for k, call in enumerate(message.tool_calls)]
            calls.extend(entry["tool_calls"])
        if message.role == "tool":
            entry["tool_call_id"] = _answered_call(calls, message.tool_name)
        translated.append(entry)
    return translated


def _content(message: Message, n: int) -> str | list[dict]:
    if not message.images:
        return message.content or ""
    parts = [image_part(image, f"messages.{n}.images.{k}") for k, image in enumerate(message.images)]
    return [*parts, {"type": "text", "text": message.content or ""}]


def _call(call: ToolCall, ordinal: int) -> dict:
    arguments = call.function.arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call.id or f"call_{ordinal}", "type": "function", "function": {"name": call.function.name, "arguments": text}}


def _answered_call(calls: list[dict], tool_name: str | None) -> str:
    for call in reversed(calls):
        if tool_name is None or call["function"]["name"] == tool_name:
            return call["id"]
    return f"call_{tool_name or 'unknown'}"


def to_chat_request(request: ChatRequest) -> ChatCompletionRequest:
    """/api/chat's request as the chat request (its messages, tools, options, format and think)."""
    fields = {**_common_fields(request), "messages": chat_messages(request.messages)}
    tools = [tool for tool in request.tools or () if tool.type == "function"]
    if tools:
        fields["tools"] = [
            function_tool(tool.function.name, tool.function.description, tool.function.parameters) for tool in tools
        ]
    return chat_request(fields, [f"tools.{n}.function.parameters" for n in range(len(tools))])


def generate_to_chat_request(request: GenerateRequest) -> ChatCompletionRequest:
    """/api/generate's templated request as a chat: its system prompt and its prompt (with its images)
    as one user turn."""
    messages = [Message(role="system", content=request.system)] if request.system else []
    messages.append(Message(role="user", content=request.prompt or "", images=request.images))
    fields = {**_common_fields(request), "messages": chat_messages(messages)}
    return chat_request(fields, [])


def generate_to_completion(request: GenerateRequest) -> CompletionRequest:
    """/api/generate's `raw` prompt, or its `suffix` (fill-in-the-middle), as a text completion."""
    fields = {
        key: value
        for key, value in _common_fields(request).items()
        if key in CompletionRequest.model_fields and key != "response_format"
    }
    if request.format:
        fields |= {"json_schema": {"type": "object"} if request.format == "json" else request.format}
    fields["prompt"] = request.prompt or ""
    if request.suffix is not None:
        fields["suffix"] = request.suffix
    return CompletionRequest.model_validate(fields)


class ErrorBody(BaseModel):
    """Ollama's error (under /api/): the message, the field it is about named in it; /openapi.json's only."""

    error: str
