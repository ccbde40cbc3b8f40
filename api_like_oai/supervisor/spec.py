"""What the supervisor runs: each launched model's llama-server command lines and lifecycle settings,
and the budget they share (pure data, made once in the master from the flags and the config file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

DEFAULT_TTL_SECONDS = 15 * 60
DEFAULT_LOAD_TIMEOUT_SECONDS = 120.0
DEFAULT_STOP_TIMEOUT_SECONDS = 10.0
DEFAULT_QUEUE_LIMIT = 64
# The proxy's own llama-servers answer the proxy alone: its random key (LLAMA_API_KEY, in their environment,
# not in `ps`), no CORS answer any web page's origin matches, the port held for them (configure.HELD_PORTS).
# --metrics: llama.cpp's own counters, for /llamacpp/metrics, --upstream-metrics and a draft's acceptance.
CHILD_FLAGS = ("--cors-origins", "none", "--no-cors-credentials", "--reuse-port", "--metrics")


@dataclass(frozen=True)
class LaunchSpec:
    """One model the proxy starts itself: `replicas` llama-servers of `model_path` on `ports`."""

    name: str
    model_path: str
    ports: tuple[int, ...]  # one per replica, chosen once: a replica's URL never changes
    args: tuple[str, ...] = ()  # extra llama-server flags
    env: dict = field(default_factory=dict)
    mmproj: str | None = None
    draft: str | None = None  # a draft model (speculative decoding): --model-draft
    draft_args: tuple[str, ...] = ()  # llama-server flags for the draft (--spec-draft-n-max 8 ...)
    draft_replicas: int | None = None  # how many replicas (the first ones) run the draft; None: all
    devices: tuple[int, ...] | None = None  # the GPUs it may use (CUDA_VISIBLE_DEVICES); None: all of them
    ttl: float = DEFAULT_TTL_SECONDS  # idle seconds before unload (from the end of the last request); 0: never
    memory_mib: int | None = None  # None: estimated from the GGUF file
    preload: bool = False
    pinned: bool = False  # never evicted to make room for another model
    slot_save: bool = False  # KV cache saved before unload, restored after load
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_SECONDS
    queue_limit: int = DEFAULT_QUEUE_LIMIT  # requests waiting for this model before a 429

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(f"http://127.0.0.1:{port}" for port in self.ports)

    def drafts_on(self, replica: int) -> bool:
        return bool(self.draft) and (self.draft_replicas is None or replica < self.draft_replicas)

    @property
    def drafting_urls(self) -> tuple[str, ...]:
        """The replicas that speculate with the draft (a request for logprobs avoids them: routing.py)."""
        return tuple(url for replica, url in enumerate(self.urls) if self.drafts_on(replica))

    def argv(self, binary: str, replica: int, slot_dir: str | None = None, extra_args: tuple[str, ...] = ()) -> list[str]:
        """The command line of one replica (always with --port: llama-server's default port moves): the
        operator's flags, a load's `extra_args` (launch_rules' allowlist), then the proxy's own, which win
        (llama-server keeps the last of a repeated flag)."""
        argv = [binary, *self.args, *extra_args, "--model", self.model_path]
        argv += ["--host", "127.0.0.1", "--port", str(self.ports[replica]), *CHILD_FLAGS]
        if self.mmproj:
            argv += ["--mmproj", self.mmproj]
        if slot_dir:
            argv += ["--slot-save-path", slot_dir]
        if self.drafts_on(replica):
            argv += ["--model-draft", self.draft, *self.draft_args, *self._draft_flags()]
        return argv

    def _draft_flags(self) -> list[str]:
        """--spec-type draft-simple unless given: the pinned build loads a draft without it but does not use
        it (its acceptance is read from the counters CHILD_FLAGS' --metrics turns on: supervisor/drafts.py)."""
        given = [*self.draft_args, *self.args]
        chosen = any(arg == "--spec-type" or arg.startswith("--spec-type=") for arg in given)
        return [] if chosen else ["--spec-type", "draft-simple"]

    def environment(self) -> dict[str, str]:
        """The replica's own environment: `env`, and its GPUs as CUDA_VISIBLE_DEVICES (unless `env` says)."""
        if self.devices is None:
            return dict(self.env)
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(device) for device in self.devices), **self.env}

    def arg_value(self, *names: str) -> str | None:
        """The value given to the first of the flags `names` in `args` (`--flag value` or `--flag=value`)."""
        args = self.args
        for position, arg in enumerate(args):
            for name in names:
                if arg == name and position + 1 < len(args):
                    return args[position + 1]
                if arg.startswith(name + "="):
                    return arg.split("=", 1)[1]
        return None

    @property
    def kv_unified(self) -> bool:
        """Whether a replica's slots share one KV cache: llama-server's `--kv-unified`, which is also its
        default when it picks the number of slots (no `--parallel`, or -1). The last flag given wins."""
        unified = None
        for arg in self.args:
            if arg in ("-kvu", "--kv-unified"):
                unified = True
            elif arg in ("-no-kvu", "--no-kv-unified"):
                unified = False
        if unified is not None:
            return unified
        parallel = self.arg_value("-np", "--parallel")
        return parallel is None or parallel.strip() == "-1"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LaunchSpec:
        devices = data.get("devices")
        return cls(
            **{
                **data,
                "ports": tuple(data["ports"]),
                "args": tuple(data["args"]),
                "draft_args": tuple(data.get("draft_args", ())),
                "devices": tuple(devices) if devices is not None else None,
            }
        )


@dataclass(frozen=True)
class SupervisorSettings:
    """The budget the launched models share, and how to run them."""

    llama_server: str
    models: tuple[LaunchSpec, ...]
    memory_budget_mib: int
    max_loaded: int | None = None
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_SECONDS
    slot_dir: str | None = None  # where slot_save models keep their KV caches
    api_key: str = field(default="", repr=False)  # the children's --api-key: random per start, only the proxy's
    device_budgets: dict | None = None  # "gpu0", "gpu1", ..., "cpu" -> MiB; None: one pool
    header_cache: str | None = None  # where the GGUF files' headers are kept (gguf_header.cached_header)

    def to_dict(self) -> dict:
        return {**asdict(self), "models": [model.to_dict() for model in self.models]}

    @classmethod
    def from_dict(cls, data: dict) -> SupervisorSettings:
        return cls(**{**data, "models": tuple(LaunchSpec.from_dict(model) for model in data["models"])})
