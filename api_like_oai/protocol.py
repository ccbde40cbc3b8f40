"""The API schema of OpenAI's requests: pydantic models of every request (chat and text completions,
embeddings, the internal routes), in OpenAI's field order.

These models are the single source of request validation and of /openapi.json's requests. Fields that
OpenAI defines come first; llama.cpp's own options follow, each described. A request model turns
itself into the upstream's payload with `to_llamacpp()`. The answers' models are answers.py's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictStr, model_validator

from .digests import DigestCache, digest
from .errors import InvalidRequest
from .offload import off_the_loop
from .tools.grammar import SchemaError, check_size
from .tools.raw_grammar import check_grammar

Stop = Annotated[str | list[StrictStr] | None, Field(description="Up to any number of strings at which generation stops.")]


def _llama(description: str, **bounds):
    """A llama.cpp-only field: optional, described in /openapi.json, sent upstream only when given;
    `bounds` (ge, le) are llama-server's own, so that it never refuses what the document allows."""
    return Field(None, description=f"llama.cpp extension. {description}", **bounds)


INT32 = 2**31 - 1  # llama-server reads its counts as 32-bit integers (larger ones wrap around)


LLAMA_CPP_FIELDS = (
    "top_k",
    "min_p",
    "typical_p",
    "tfs_z",
    "repeat_penalty",
    "repeat_last_n",
    "penalize_nl",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "grammar",
    "json_schema",
    "n_keep",
    "ignore_eos",
    "dynatemp_range",
    "dynatemp_exponent",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "xtc_probability",
    "xtc_threshold",
    "samplers",
    "cache_prompt",
    "id_slot",
)


STRICT = {"strict": True, "allow_inf_nan": False}


OFF_THE_LOOP_GRAMMAR_CHARS = 1024  # a raw grammar longer than this is checked off the event loop (shorter: < 1 ms)


class Request(BaseModel):
    # Unknown fields are refused (400 naming them) rather than silently dropped; types are strict
    # ("5" is not an integer) as /openapi.json says; NaN and Infinity are not numbers llama.cpp takes.
    model_config = ConfigDict(extra="forbid", **STRICT)


# What each kind of part holds, as /openapi.json says it (the parts' own checks say why one is refused).
_PART_KINDS = {
    "anyOf": [
        {"properties": {"type": {"const": "text"}, "text": {"type": "string"}}, "required": ["text"]},
        {
            "properties": {
                "type": {"const": "image_url"},
                "image_url": {  # the URL itself, or {url}: clients send both
                    "anyOf": [
                        {"type": "string"},
                        {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
                    ]
                },
            },
            "required": ["image_url"],
        },
        {
            "properties": {
                "type": {"const": "input_audio"},
                "input_audio": {
                    "type": "object",
                    "properties": {"data": {"type": "string"}, "format": {"enum": ["wav", "mp3"]}},
                    "required": ["data", "format"],
                },
            },
            "required": ["input_audio"],
        },
    ]
}


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=_PART_KINDS, **STRICT)
    type: StrictStr  # another kind is refused where the prompt is written, naming it
    text: StrictStr | None = None
    # An input_audio part's bytes and header, decoded once (services/audio_parts.py): admission reads its
    # length for the key's limits, the prompt its bytes.
    _decoded_audio: tuple | None = PrivateAttr(None)


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)
    name: StrictStr
    # A JSON string, as OpenAI sends it; some clients send the object itself.
    arguments: StrictStr | dict[str, Any] = "{}"


class MessageToolCall(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)
    id: StrictStr
    type: Literal["function"] = "function"
    function: FunctionCall


# Any role a template may know (developer, ipython, ...), but a name: an empty role was generated from.
ROLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)  # other keys reach Jinja templates as they are
    role: StrictStr = Field(pattern=ROLE_PATTERN)
    content: StrictStr | list[ContentPart] | None = None
    name: StrictStr | None = None
    tool_calls: list[MessageToolCall] | None = Field(None, description="An assistant's calls of tools.")
    tool_call_id: StrictStr | None = Field(None, description="The call a `tool` message answers.")
    function_call: FunctionCall | None = Field(None, description="Deprecated: an assistant's one function call.")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    include_usage: bool | None = None
    include_obfuscation: bool | None = Field(None, description="Accepted and ignored: no padding is added.")


def _only_pattern_keys(schema: dict) -> None:
    """/openapi.json: an object's keys are only those its patternProperties match (as its key type says)."""
    for option in schema.get("anyOf", ()):
        if "patternProperties" in option:
            option["additionalProperties"] = False


class SamplingFields(Request):
    """Sampling options shared by chat and completions; OpenAI's first, then llama.cpp's."""

    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[Annotated[str, Field(pattern=r"^-?\d{1,10}$")], float] | None = Field(
        None, description="Token id (as a string) -> bias from -100 to 100.", json_schema_extra=_only_pattern_keys
    )
    max_tokens: int | None = Field(None, ge=0, le=INT32)
    n: int | None = Field(None, ge=1, le=INT32)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: Stop = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    user: str | None = None
    # llama.cpp's own options, passed through only when given.
    top_k: int | None = _llama("Keep only the k most likely tokens (0 = all).")
    min_p: float | None = _llama("Drop tokens less likely than min_p times the most likely one.")
    typical_p: float | None = _llama("Locally typical sampling; 1.0 disables it.")
    tfs_z: float | None = _llama("Tail-free sampling; 1.0 disables it (ignored by newer llama.cpp).")
    repeat_penalty: float | None = _llama("Penalty for repeating tokens of the last repeat_last_n.")
    repeat_last_n: int | None = _llama("How many recent tokens the repeat penalty looks at.", ge=0, le=INT32)
    penalize_nl: bool | None = _llama("Whether newlines are penalised as repeats (older llama.cpp).")
    mirostat: int | None = _llama("Mirostat sampling: 0 off, 1 or 2.")
    mirostat_tau: float | None = _llama("Mirostat target entropy.")
    mirostat_eta: float | None = _llama("Mirostat learning rate.")
    grammar: str | None = _llama("A GBNF grammar the output must follow.")
    json_schema: dict[str, Any] | None = _llama("A JSON schema the output must follow.")
    n_keep: int | None = _llama("Prompt tokens kept when the context shifts (-1 = all).", ge=-1, le=INT32)
    ignore_eos: bool | None = _llama("Keep generating past the end-of-sequence token.")
    dynatemp_range: float | None = _llama("Dynamic temperature range (0 disables).")
    dynatemp_exponent: float | None = _llama("Dynamic temperature exponent.")
    dry_multiplier: float | None = _llama("DRY repetition penalty strength (0 disables).")
    dry_base: float | None = _llama("DRY penalty base.")
    dry_allowed_length: int | None = _llama("Repeats up to this length are not DRY-penalised.", ge=0, le=INT32)
    xtc_probability: float | None = _llama("XTC: chance of removing the top tokens.")
    xtc_threshold: float | None = _llama("XTC: probability threshold of the removed tokens.")
    samplers: list[str] | None = _llama("The order in which llama.cpp applies its samplers.")
    cache_prompt: bool | None = _llama("Reuse the KV cache of a shared prompt prefix.")
    id_slot: int | None = _llama("Run on this llama.cpp slot (-1 = any idle slot).")

    @model_validator(mode="after")
    def stream_options_only_with_stream(self):
        # OpenAI refuses stream_options without stream; here they are set aside (a whole answer has its
        # usage anyway), so a client that always sends them is answered.
        if self.stream_options is not None and not self.stream:
            self.stream_options = None
        return self

    @model_validator(mode="after")
    def grammar_is_bounded(self):
        if self.grammar is not None:  # input to llama.cpp's GBNF parser: bounded before it meets it
            try:
                # A 64 KiB grammar is tens of ms of Python: the event loop's other streams go on meanwhile.
                if len(self.grammar) > OFF_THE_LOOP_GRAMMAR_CHARS:
                    off_the_loop(check_grammar, self.grammar)
                else:
                    check_grammar(self.grammar)
            except SchemaError as exc:
                raise InvalidRequest(f"invalid grammar: {exc.message}", param="grammar") from None
        return self

    @model_validator(mode="after")
    def json_schema_is_bounded(self):
        if self.json_schema is not None:  # llama.cpp builds a grammar from it: bounded like any grammar input
            check_bounded_schema(self.json_schema, "json_schema")
        return self

    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk (stream_options.include_usage)."""
        return bool(self.stream_options and self.stream_options.include_usage)

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def token_limit(self) -> int | None:
        return self.max_tokens

    def sampling_payload(self) -> dict:
        """llama.cpp /completion fields for the sampling options that were given (n_predict, the reply's
        length, is the caller's: the fitted one for a chat, services/fitting.py)."""
        payload = {}
        for name in _PASSTHROUGH:
            value = getattr(self, name)
            if value is not None:
                payload[name] = value
        if self.logit_bias:
            payload["logit_bias"] = [[int(token), bias] for token, bias in self.logit_bias.items()]
        return payload


_PASSTHROUGH = ("frequency_penalty", "presence_penalty", "seed", "temperature", "top_p", *LLAMA_CPP_FIELDS)


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(**STRICT)
    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={  # a json_schema format has its schema (schema_is_usable)
            "anyOf": [
                {"properties": {"type": {"enum": ["text", "json_object"]}}},
                {
                    "properties": {"type": {"const": "json_schema"}, "json_schema": {"type": "object"}},
                    "required": ["json_schema"],
                },
            ]
        },
        **STRICT,
    )
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def schema_is_usable(self):
        # InvalidRequest (not ValueError) passes through pydantic: a 400 naming the exact place.
        if self.type == "json_schema":
            if self.json_schema is None:
                raise InvalidRequest(
                    "response_format of type json_schema needs a json_schema object", param="response_format.json_schema"
                )
            check_bounded_schema(self.json_schema.json_schema, "response_format.json_schema.schema")
        return self

    def to_llamacpp(self) -> dict:
        """The llama.cpp constraint for this format: a JSON schema, or nothing for plain text."""
        if self.type == "json_object":
            return {"json_schema": {"type": "object"}}
        if self.type == "json_schema":
            return {"json_schema": self.json_schema.json_schema}
        return {}


_JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def check_schema(schema, path: str = "response_format.json_schema.schema") -> None:
    """A 400 for what is not a JSON Schema llama.cpp can follow, before anything is generated."""
    if not isinstance(schema, dict):
        raise InvalidRequest("invalid JSON schema: a schema must be an object", param=path, code="invalid_json_schema")
    declared = schema.get("type")
    for type_name in declared if isinstance(declared, list) else [declared]:
        if type_name is not None and (not isinstance(type_name, str) or type_name not in _JSON_TYPES):
            raise InvalidRequest(f"invalid JSON schema: unknown type {type_name!r}", param=path, code="invalid_json_schema")
    for key in ("properties", "$defs", "definitions"):
        subschemas = schema.get(key, {})
        if not isinstance(subschemas, dict):
            raise InvalidRequest(
                f"invalid JSON schema: {key} must be an object", param=f"{path}.{key}", code="invalid_json_schema"
            )
        for name, sub in subschemas.items():
            check_schema(sub, f"{path}.{key}.{name}")
    if "items" in schema and not isinstance(schema["items"], bool):
        check_schema(schema["items"], f"{path}.items")


# No whitespace, control characters, quotes or markup: names are written into prompts. (The control characters
# are named, not left to \s: \x1c-\x1f and \x85 are whitespace to Python and Rust, not to ECMA's JSON Schema.)
TOOL_NAME = r"^[^\s\x00-\x1f\x7f-\x9f\"\\<>]{1,128}$"


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of type object.")
    strict: bool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    name: StrictStr


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=0)
    response_format: ResponseFormat | None = None
    tools: list[ToolDefinition] | None = Field(None, max_length=512)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    store: bool | None = Field(None, description="Accepted and ignored: nothing is stored.")
    metadata: dict[str, str] | None = Field(None, description="Accepted and ignored.")
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Reaches the chat template as the variable `reasoning_effort`."
    )
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = Field(
        None, description='Accepted; the answer reports the tier used, "default".'
    )
    prompt_cache_key: str | None = Field(
        None,
        description="A conversation's key: with several upstreams, a new conversation is placed by it, "
        "so its later turns find their prompt in the same server's cache.",
    )
    prompt_cache_retention: str | None = Field(None, description="Accepted and ignored.")
    safety_identifier: str | None = Field(None, description="Accepted and ignored.")
    verbosity: Literal["low", "medium", "high"] | None = Field(
        None, description="Reaches the chat template as the variable `verbosity`."
    )
    modalities: list[Literal["text", "audio"]] | None = Field(None, description='Only ["text"] can be honoured.')
    audio: dict[str, Any] | None = Field(None, description="Audio output cannot be honoured: a 400.")
    prediction: dict[str, Any] | None = Field(None, description="Accepted and set aside (it would only make the answer faster).")
    web_search_options: dict[str, Any] | None = Field(None, description="Web search cannot be honoured: a 400.")
    # Chat-template options (vLLM's and llama-server's names).
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description='Variables for the chat template, e.g. {"enable_thinking": false}.'
    )
    reasoning_format: Literal["auto", "none", "deepseek"] | None = Field(
        None,
        description="llama-server's: split <think> reasoning into reasoning_content (deepseek), keep it "
        "inline (none), or decide from the chat template (auto).",
    )
    add_generation_prompt: bool = Field(True, description="Open a new assistant turn at the end of the prompt.")
    continue_final_message: bool = Field(
        False, description="Continue the last (assistant) message instead of opening a new turn."
    )
    echo: bool = Field(False, description="Prefix the reply with the last message's content when it has the response role.")
    # Deprecated by OpenAI in favour of tools/tool_choice, onto which they are mapped.
    functions: list[FunctionDefinition] | None = Field(None, max_length=512, description="Deprecated: use tools.")
    function_call: Literal["none", "auto"] | FunctionName | None = Field(None, description="Deprecated: use tool_choice.")
    # The digest of the tools' parameters (digests.py), taken when they are checked: with the names and
    # the choice, what the grammar is cached under (services/tool_calling.py), without a second digest.
    _parameters_digest: bytes | None = PrivateAttr(None)
    # A translated request's: where its tool n's parameters were in the client's own API
    # (dialects/common.chat_request), so a refusal found later, by the grammar, names that field.
    _dialect_tool_params: tuple[str, ...] = PrivateAttr(())
    # A translated request's: where its image n was in the client's own API, so a refused image is named so.
    _dialect_image_params: tuple[str, ...] = PrivateAttr(())

    def image_param(self, ordinal: int, chat_param: str) -> str:
        """Where the request's image number `ordinal` (at `chat_param` in the chat request) was sent."""
        params = self._dialect_image_params
        return params[ordinal] if ordinal < len(params) else chat_param

    def parts_of(self, types: tuple[str, ...]) -> list[tuple[int, int, ContentPart]]:
        """(message index, part index, part) of every content part of one of `types`, in order (the
        images of services/media.py, the clips of audio_parts.py)."""
        return [
            (n, m, part)
            for n, message in enumerate(self.messages)
            if isinstance(message.content, list)
            for m, part in enumerate(message.content)
            if part.type in types
        ]

    def with_placeholders(self, placed: dict[tuple[int, int], str]) -> ChatCompletionRequest:
        """A copy whose parts at (message index, part index) are text: a medium's placeholder
        (services/media.py for images, audio_parts.py for clips)."""
        messages = list(self.messages)
        for n in {n for n, _ in placed}:
            parts = [
                ContentPart(type="text", text=placed[(n, m)]) if (n, m) in placed else part
                for m, part in enumerate(messages[n].content)
            ]
            messages[n] = messages[n].model_copy(update={"content": parts})
        return self.model_copy(update={"messages": messages})

    @property
    def parameters_digest(self) -> bytes | None:
        return self._parameters_digest

    @property
    def dialect_tool_params(self) -> tuple[str, ...]:
        return self._dialect_tool_params

    @model_validator(mode="after")
    def asks_only_for_what_can_be_honoured(self):
        # A prediction (predicted outputs) only makes an answer faster, never different: set aside.
        if self.modalities is not None and "audio" in self.modalities or self.audio is not None:
            raise InvalidRequest(
                "audio output is not supported: this model writes text",
                param="modalities" if self.audio is None else "audio",
                code="not_supported",
            )
        if self.web_search_options is not None:
            raise InvalidRequest("web search is not supported by a local model", param="web_search_options", code="not_supported")
        return self

    def template_variables(self) -> dict:
        """What reaches the chat template besides messages and tools: chat_template_kwargs, with
        reasoning_effort and verbosity (HF convention), as llama-server and vLLM pass them."""
        variables = dict(self.chat_template_kwargs or {})
        for name in ("reasoning_effort", "verbosity"):
            if getattr(self, name) is not None:
                variables.setdefault(name, getattr(self, name))
        return variables

    @model_validator(mode="after")
    def tools_are_usable(self):
        if self.tools and self.functions:
            raise InvalidRequest("give tools or the deprecated functions, not both", param="functions", code="conflicting_fields")
        self._parameters_digest = check_parameters(
            [(param + ".parameters", function.parameters) for param, function in self.function_definitions()]
        )
        names = [function.name for _, function in self.function_definitions()]
        if len(set(names)) != len(names):
            raise InvalidRequest("two tools have the same name", param="tools", code="duplicate_tool_name")
        for field, choice in (("tool_choice", self.tool_choice), ("function_call", self.function_call)):
            if choice not in (None, "none", "auto") and not names:  # "auto" among no tools is "none"; the rest would mislead
                raise InvalidRequest(f"{field} needs tools to choose from", param=field, code="invalid_tool_choice")
            chosen = getattr(getattr(choice, "function", choice), "name", None)
            if chosen is not None and chosen not in names:
                raise InvalidRequest(
                    f"{field} names {chosen!r}, which is not among the tools", param=field, code="invalid_tool_choice"
                )
        return self

    def function_definitions(self) -> list[tuple[str, FunctionDefinition]]:
        """(param path, definition) of every tool, from `tools` or the deprecated `functions`."""
        return [(f"tools.{n}.function", tool.function) for n, tool in enumerate(self.tools or ())] + [
            (f"functions.{n}", function) for n, function in enumerate(self.functions or ())
        ]

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


_CHECKED_PARAMETERS = DigestCache(max_entries=64)  # per worker: agents resend the same tools every turn


def check_parameters(schemas: list[tuple[str, dict | None]]) -> bytes | None:
    """A 400 naming the first (param path, tool parameters) that is not an object schema a grammar
    can follow; else the digest of the list (None if it has none). A list that passed is found again
    by its digest, not checked again (no parameters and `{}` pass alike, so they share a key)."""
    key = digest([schema if schema is not None else {} for _, schema in schemas]) if schemas else None
    _CHECKED_PARAMETERS.get(key, lambda: _check_each(schemas) or True)
    return key


def _check_each(schemas: list[tuple[str, dict | None]]) -> None:
    for param, schema in schemas:
        if schema is not None:
            _check_parameters(schema, param)


def _check_parameters(schema: dict, param: str) -> None:
    if schema.get("type", "object") != "object":
        raise InvalidRequest(f"parameters must be a JSON schema of type 'object', not {schema.get('type')!r}", param=param)
    check_bounded_schema(schema, param, "invalid parameters")


def check_bounded_schema(schema, param: str, what: str = "invalid JSON schema") -> None:
    """A 400 naming `param` for a schema past the bounds of every grammar input (size, nesting), or
    one llama.cpp cannot follow."""
    try:
        check_size(schema, param)
    except SchemaError as exc:
        raise InvalidRequest(f"{what}: {exc.message}", param=param, code="invalid_json_schema") from None
    check_schema(schema, param)


class CompletionRequest(SamplingFields):
    prompt: str | list[StrictStr] | list[int] | list[list[int]] = ""
    model: str | None = None
    best_of: int | None = Field(None, ge=1, le=1, description="Only 1: one candidate per choice.")
    echo: bool | None = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None


class EmbeddingRequest(Request):
    input: str | list[StrictStr] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None


class EncodeRequest(Request):
    text: str
    model: str | None = None


class DecodeRequest(Request):
    tokens: list[Annotated[int, Field(ge=0)]]
    model: str | None = None


class ModelLoadRequest(Request):
    """Load or unload a model the proxy starts (text-generation-webui's `model_name`, llama.cpp router's `model`)."""

    model_name: str | None = None
    model: str | None = None
    args: list[str] | None = Field(
        None, description="llama-server flags for this load, beside the model's own; a model loaded with other flags is restarted"
    )

    def named(self) -> str | None:
        return self.model_name or self.model
