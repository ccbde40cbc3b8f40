"""Settings: everything the command line, the environment and the config file say, validated once."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from .backends.routing import RoutingPolicy
from .fleet.settings import FleetSettings
from .mcp.policy import Bounds as McpBounds
from .prompts import TemplateChoice
from .store.settings import StoreSettings
from .supervisor.spec import LaunchSpec, SupervisorSettings

TRUNCATE, ERROR = "truncate", "error"


@dataclass(frozen=True)
class Policy:
    """How a conversation that does not fit the context is handled (--context-overflow,
    --reply-reserve, --drop-step); services/fitting.py applies it. Here, so that settings import
    nothing above them."""

    overflow: str = TRUNCATE
    reply_share: float = 0.25  # of the context, kept free for the reply before history is dropped
    drop_step: float = 0.125  # of the context: turns are dropped in steps of about this many tokens; 0: the fewest


@dataclass(frozen=True)
class ModelSettings:
    """One served model: the name clients send (plus aliases), where it runs, how prompts look."""

    name: str
    upstreams: tuple[str, ...]
    template: TemplateChoice = field(default_factory=TemplateChoice)
    aliases: tuple[str, ...] = ()
    kind: str = "llamacpp"  # or "openai": any OpenAI-compatible server, passed through
    upstream_model: str | None = None  # the model name an "openai" upstream expects
    defaults: dict = field(default_factory=dict)  # request fields used when a request leaves them out
    overrides: dict = field(default_factory=dict)  # request fields always applied
    max_tokens: int | None = None  # cap on max_tokens for this model
    context_length: int | None = None  # else read from the upstream's /props
    tool_call_format: str = "auto"  # a name in tools.formats.FORMATS, or detected from the template
    reasoning_format: str = "auto"  # "deepseek": split <think> out, "none": inline, "auto": by template
    context_policy: Policy = field(default_factory=Policy)  # what a conversation too long for max_tokens gets
    routing: RoutingPolicy = field(default_factory=RoutingPolicy)  # which of its upstreams a request goes to
    launch: LaunchSpec | None = None  # a model the proxy starts itself (its upstreams are its replicas)
    capabilities: tuple[str, ...] = ()  # declared in the config ("rerank": a reranker; docs/reranking.md)
    boxes: int = 1  # in a fleet: the boxes it is kept loaded on (its replicas spanning boxes)


@dataclass(frozen=True)
class Limits:
    """Request limits, each with a safe default; a request over one is refused, not trimmed."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_messages: int = 2048
    max_n: int = 16
    max_tokens: int | None = None


@dataclass(frozen=True)
class ImageLimits:
    """What a request's images may be (services/media.py): --max-image-bytes, --max-request-image-bytes,
    --image-fetch-timeout, --allow-private-image-urls; and --image-tokens, what an image is counted as
    when a prompt is fitted to the context (llama.cpp's /tokenize knows no images)."""

    max_image_bytes: int = 20 * 1024 * 1024
    max_request_bytes: int = 50 * 1024 * 1024
    fetch_timeout: float = 10.0
    allow_private_urls: bool = False
    tokens_per_image: int = 576


@dataclass(frozen=True)
class AudioLimits:
    """What a file to transcribe may be (services/transcription.py): OpenAI's 25 MB, --max-audio-seconds."""

    max_file_bytes: int = 25 * 1024 * 1024
    max_seconds: float = 1500.0


@dataclass(frozen=True)
class Settings:
    models: tuple[ModelSettings, ...]
    strict_model_names: bool = False  # a config file names the models: unknown ones are a 404
    default_model: str | None = None  # for requests without `model`; else the first model
    api_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()  # --admin-key: also /v1/internal/keys and what require_admin guards
    limits_on_store_error: str = "closed"  # a key's limits when the store is unreachable: "open" lets it run
    metrics_per_key: bool = False  # /metrics counts requests and tokens per managed key (by name)
    api_key_priority: str = "normal"  # the flags' keys' place in the queue for a slot (access/priority.py)
    batch_free_slots: int | None = None  # slots batch lines leave free while people use a model; None: by --batch-yield
    batch_yield: str = "auto"  # "on": a key's request holds every batch line back until its first token; "off"; "auto"
    max_stored_mib: int | None = None  # a key's stored objects at most (a managed key's own wins)
    host: str = "127.0.0.1"
    port: int = 8081
    ollama_listen: tuple[str, ...] = ()  # more host:port addresses (Ollama's 11434): --ollama-port, --ollama-listen
    connect_timeout: float = 5.0
    read_timeout: float = 600.0
    workers: int = 1
    worker_class: str = "gevent"  # or "gthread"
    threads: int = 32
    debug: bool = False
    log_level: str = "info"
    log_prompts: bool = False
    log_format: str = "text"
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # names a keyless proxy on loopback answers besides localhost (app.py)
    limits: Limits = field(default_factory=Limits)
    images: ImageLimits = field(default_factory=ImageLimits)
    audio: AudioLimits = field(default_factory=AudioLimits)
    grace_period: float = 30.0
    native_api: bool = True  # llama.cpp's own API (/completion, /infill, ...) served too
    upstream_metrics: bool = False  # /metrics carries each llama-server's own (upstream_metrics.py)
    open_pool_metrics: bool = False  # /metrics/pool served without a key (an inference pool's endpoint picker)
    otlp_endpoint: str | None = None  # traces sent there over OTLP/HTTP (tracing.py); None: no tracing
    store: StoreSettings = field(default_factory=lambda: StoreSettings("none"))  # the CLI's default: SQLite
    supervisor: SupervisorSettings | None = None  # models on demand: what the supervisor process runs
    fleet: FleetSettings | None = None  # --fleet: the instances sharing one API through Redis (fleet/)
    mcp: McpBounds = field(default_factory=McpBounds)  # what a request's MCP tools may make the proxy do

    def listeners(self) -> list[tuple[str, str]]:
        """(host, port) of every address the proxy listens on: --host and --port, then Ollama's."""
        return [(self.host, str(self.port)), *(tuple(address.rsplit(":", 1)) for address in self.ollama_listen)]


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, or a name resolved here) reaches only this machine."""
    try:
        return _loopback_address(host.strip("[]"))
    except ValueError:  # a name: loopback only if every address it resolves to is
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(_loopback_address(address.split("%")[0]) for address in addresses)


def _loopback_address(text: str) -> bool:
    address = ipaddress.ip_address(text)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback
