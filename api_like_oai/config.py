"""The YAML config file: every CLI flag by its option name (underscores), plus `models:`.

Loaded with yaml.safe_load, validated with pydantic; an error names the file, the line and the key.
See config.example.yaml for every key with comments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from .backends.routing import MODES
from .tools.formats import FORMATS


class ConfigError(Exception):
    """A config file that cannot be used; its message is one line: file:line: key: problem."""


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aliases: list[str] = []
    upstreams: list[str] | None = Field(None, min_length=1)
    # models on demand (docs/models-on-demand.md): what to run instead of upstreams
    model: str | None = None
    mmproj: str | None = None
    args: list[str] | str = []
    draft: str | None = None  # a draft model's GGUF file (speculative decoding)
    draft_args: list[str] | str = []
    draft_replicas: int | None = Field(None, ge=1)  # of `replicas`, how many run the draft (default: all)
    devices: list[Annotated[int, Field(ge=0)]] | None = None  # the GPUs (nvidia-smi's indices) it may use
    env: dict[str, str] = {}
    replicas: int = Field(1, ge=1, le=64)
    boxes: int | None = Field(None, ge=1, le=64)  # in a fleet: kept loaded on this many boxes (docs/fleet.md)
    ttl: float | str | None = None
    memory: int | None = Field(None, ge=1)
    preload: bool = False
    pinned: bool = False
    slot_save: bool = False
    load_timeout: float | str | None = None
    queue_limit: int | None = Field(None, ge=1)
    kind: Literal["llamacpp", "openai"] = "llamacpp"
    upstream_model: str | None = None
    template: Literal["auto"] | None = None
    chat_template: str | None = None
    chat_prompt_model: str | None = None
    chat_formatter: str | None = None
    chat_prompt: str | None = None
    user_name: str | None = None
    ai_name: str | None = None
    system_name: str | None = None
    stop: str | None = None
    response_role: str | None = None
    tool_call_format: Literal[("auto", *FORMATS)] | None = None
    reasoning_format: Literal["auto", "none", "deepseek"] | None = None
    context_overflow: Literal["truncate", "error"] | None = None
    reply_reserve: float | None = Field(None, gt=0, lt=1)
    drop_step: float | None = Field(None, ge=0, lt=1)
    defaults: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    max_tokens: int | None = Field(None, ge=1)
    context_length: int | None = Field(None, ge=16)
    routing: Literal[MODES] | None = None
    routing_load_margin: int | None = Field(None, ge=0)
    # what the model serves when its upstream cannot say (docs/reranking.md): ["rerank"] for a reranker
    capabilities: list[Literal["completion", "chat", "tools", "embeddings", "vision", "rerank"]] | None = None

    @field_validator("upstreams", mode="before")
    @classmethod
    def one_or_many(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("ttl", "load_timeout")
    @classmethod
    def a_duration(cls, value):
        from .store.settings import duration

        if value is None or str(value).strip() == "0":  # ttl 0: never unloaded
            return None if value is None else 0.0
        return duration(str(value))

    @model_validator(mode="after")
    def runs_somewhere(self):
        if (self.upstreams is None) == (self.model is None):
            raise ValueError("give either upstreams (servers already running) or model (a GGUF file to run)")
        if self.model is not None and self.kind != "llamacpp":
            raise ValueError("model: runs llama-server; kind openai needs upstreams")
        if self.model is None and (self.draft or self.draft_args or self.devices is not None):
            raise ValueError("draft, draft_args and devices go with model: (a llama-server the proxy runs)")
        if self.draft_replicas is not None and (not self.draft or self.draft_replicas > self.replicas):
            raise ValueError("draft_replicas needs draft: and is at most replicas")
        return self

    @field_validator("defaults", "overrides")
    @classmethod
    def request_fields_only(cls, fields: dict) -> dict:
        # Imported here: gunicorn's master reads the config, and the request models are the worker's
        # (a module the master imports is copied into the worker page by page as it is used: idle memory).
        from .protocol import ChatCompletionRequest

        unknown = sorted(set(fields) - set(ChatCompletionRequest.model_fields) - {"messages"})
        if unknown:
            raise ValueError(f"not request fields: {', '.join(unknown)}")
        return fields


class McpServerConfig(BaseModel):
    """An MCP server requests name by its server_label (docs/mcp.md): at a `url`, or a stdio
    server's `command` the proxy runs (mcp/stdio.py)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    headers: dict[str, str] = {}
    command: str | None = Field(None, description="a stdio server: the program the proxy runs")
    args: list[str] = []
    env: dict[str, str] = {}

    @model_validator(mode="after")
    def reachable(self):
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server needs either a url (Streamable HTTP or HTTP+SSE) or a command (stdio)")
        if self.command is not None:
            if not self.command.strip():
                raise ValueError("command must name a program")
            if self.headers:
                raise ValueError("headers go with url: a stdio server (command) takes env")
        elif not self.url.startswith(("http://", "https://")):
            raise ValueError("an MCP server needs an http(s) url")
        elif self.args or self.env:
            raise ValueError("args and env go with command (a stdio server)")
        return self


def config_model(flag_names: list[str]) -> type[BaseModel]:
    """The file's schema: one optional key per CLI flag, plus models, default_model and mcp_servers."""
    flags = {name: (Any, None) for name in flag_names if name != "config"}
    return create_model(
        "ConfigFile",
        __config__=ConfigDict(extra="forbid"),
        models=(dict[str, ModelConfig] | None, None),
        default_model=(str | None, None),
        mcp_servers=(dict[str, McpServerConfig] | None, None),
        **flags,
    )


def load_config(path: str, flag_names: list[str]) -> BaseModel:
    """The validated config file at `path`; ConfigError naming file, line and key if it is wrong."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: the config file must be a mapping of keys to values")
    try:
        config = config_model(flag_names).model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, text)) from None
    _check_default_model(config, path, text)
    return config


def _check_default_model(config, path: str, text: str) -> None:
    names = {name for name, model in (config.models or {}).items() for name in [name, *model.aliases]}
    if config.default_model and config.models and config.default_model not in names:
        raise ConfigError(
            f"{path}:{line_of(text, ('default_model',))}: default_model: "
            f"{config.default_model!r} is not a model name (known: {', '.join(sorted(names))})"
        )


def _describe(exc: ValidationError, path: str, text: str) -> str:
    error = exc.errors(include_url=False)[0]
    # pydantic puts validator names such as "function-after[...]" into locations; they are not keys
    location = tuple(part for part in error["loc"] if not (isinstance(part, str) and "[" in part))
    key = ".".join(str(part) for part in location)
    problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
    return f"{path}:{line_of(text, location)}: {key}: {problem}"


def line_of(text: str, location: tuple) -> int:
    """The 1-based line of the YAML node at `location` (keys and list indexes), or of its nearest parent."""
    node = yaml.compose(text)
    line = 1
    for part in location:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def error_at(path: str, location: tuple, problem: str) -> ConfigError:
    """A ConfigError for the key at `location` in the file at `path`, with its line."""
    try:
        line = line_of(Path(path).read_text("utf-8"), location)
    except (OSError, yaml.YAMLError):
        line = 1
    return ConfigError(f"{path}:{line}: {'.'.join(map(str, location))}: {problem}")
