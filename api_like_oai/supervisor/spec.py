"""What the supervisor runs: each launched model's llama-server command lines and lifecycle settings,
and the budget they share (pure data, made once in the master from the flags and the config file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

DEFAULT_TTL_SECONDS = 15 * 60
DEFAULT_LOAD_TIMEOUT_SECONDS = 120.0
DEFAULT_STOP_TIMEOUT_SECONDS = 10.0
DEFAULT_QUEUE_LIMIT = 64


@dataclass(frozen=True)
class LaunchSpec:
    """One model the proxy starts itself: `replicas` llama-servers of `model_path` on `ports`."""

    name: str
    model_path: str
    ports: tuple[int, ...]                 # one per replica, chosen once: a replica's URL never changes
    args: tuple[str, ...] = ()             # extra llama-server flags
    env: dict = field(default_factory=dict)
    mmproj: str | None = None
    ttl: float = DEFAULT_TTL_SECONDS       # idle seconds before unload (from the end of the last request); 0: never
    memory_mib: int | None = None          # None: estimated from the GGUF file
    preload: bool = False
    pinned: bool = False                   # never evicted to make room for another model
    slot_save: bool = False                # KV cache saved before unload, restored after load
    load_timeout: float = DEFAULT_LOAD_TIMEOUT_SECONDS
    queue_limit: int = DEFAULT_QUEUE_LIMIT  # requests waiting for this model before a 429

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(f"http://127.0.0.1:{port}" for port in self.ports)

    def argv(self, binary: str, replica: int, slot_dir: str | None = None,
             extra_args: tuple[str, ...] = ()) -> list[str]:
        """The command line of one replica (always with --port: llama-server's default port moves)."""
        argv = [binary, "--model", self.model_path, "--host", "127.0.0.1", "--port", str(self.ports[replica])]
        if self.mmproj:
            argv += ["--mmproj", self.mmproj]
        if slot_dir:
            argv += ["--slot-save-path", slot_dir]
        return argv + list(self.args) + list(extra_args)

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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LaunchSpec:
        return cls(**{**data, "ports": tuple(data["ports"]), "args": tuple(data["args"])})


@dataclass(frozen=True)
class SupervisorSettings:
    """The budget the launched models share, and how to run them."""

    llama_server: str
    models: tuple[LaunchSpec, ...]
    memory_budget_mib: int
    max_loaded: int | None = None
    stop_timeout: float = DEFAULT_STOP_TIMEOUT_SECONDS
    slot_dir: str | None = None            # where slot_save models keep their KV caches
    header_cache: str | None = None        # where the GGUF files' headers are kept (gguf_header.cached_header)

    def to_dict(self) -> dict:
        return {**asdict(self), "models": [model.to_dict() for model in self.models]}

    @classmethod
    def from_dict(cls, data: dict) -> SupervisorSettings:
        return cls(**{**data, "models": tuple(LaunchSpec.from_dict(model) for model in data["models"])})
