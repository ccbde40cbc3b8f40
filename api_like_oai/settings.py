"""Settings: everything the command line (and later the config file) says, validated once."""

from __future__ import annotations

from dataclasses import dataclass, field

from .prompts import TemplateChoice


@dataclass(frozen=True)
class ModelSettings:
    name: str
    upstreams: tuple[str, ...]
    template: TemplateChoice = field(default_factory=TemplateChoice)


@dataclass(frozen=True)
class Limits:
    """Request limits, each with a safe default; a request over one is refused, not trimmed."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_messages: int = 2048
    max_n: int = 16
    max_tokens: int | None = None


@dataclass(frozen=True)
class Settings:
    models: tuple[ModelSettings, ...]
    strict_model_names: bool = False
    api_keys: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8081
    connect_timeout: float = 5.0
    read_timeout: float = 600.0
    workers: int = 1
    threads: int = 32
    debug: bool = False
    log_level: str = "info"
    log_prompts: bool = False
    log_format: str = "text"
    cors_origins: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    grace_period: float = 30.0
