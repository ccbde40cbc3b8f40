"""What the flags and the config file say to launch, made into LaunchSpecs and SupervisorSettings (in
the master, once; no process is started here)."""

from __future__ import annotations

import glob
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from ..gguf_header import POOLING_RANK, pooling_type
from .spec import LaunchSpec, SupervisorSettings

RESERVE_MIB = 1024  # left to the system and the proxy when the budget is the available memory
GPU_RESERVE_MIB = 512  # left on each GPU (the driver's context, other processes' growth)


# The ports held for the replicas, for the life of this process (the proxy's main process): bound on the
# loopback with SO_REUSEPORT and never listening, so no process of another user can take one, and the
# replica's llama-server (started with --reuse-port, by the same user) binds it beside the holder.
HELD_PORTS: dict[int, socket.socket] = {}


def free_port(avoid: int | None = None) -> int:
    """A port held for one replica (HELD_PORTS) and never `avoid` (the proxy's own port, bound later);
    a replica keeps it for the life of the proxy (its URL is its name in the prefix-routing table, so a
    cache restored after a swap is found where it was)."""
    while True:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if port != avoid:
            HELD_PORTS[port] = sock
            return port
        sock.close()


def launch_spec(
    name: str,
    model_path: str,
    *,
    replicas: int = 1,
    args=(),
    avoid_port: int | None = None,
    header_cache: str | None = None,
    **options,
) -> LaunchSpec:
    """A LaunchSpec with a port held per replica (never `avoid_port`, the proxy's own); `args` a list of
    flags or one shell-quoted string; the file's header read through `header_cache` (gguf_header)."""
    args = shlex.split(args) if isinstance(args, str) else args
    options = {key: value for key, value in options.items() if value is not None}
    if isinstance(options.get("draft_args"), str):
        options["draft_args"] = shlex.split(options["draft_args"])
    for key in ("draft_args", "devices"):
        if key in options:
            options[key] = tuple(options[key])
    if options.get("draft"):
        options["draft"] = str(Path(options["draft"]).expanduser())
    path = str(Path(model_path).expanduser())
    return LaunchSpec(
        name,
        path,
        tuple(free_port(avoid_port) for _ in range(replicas)),
        tuple(str(arg) for arg in args) + reranking_flag(path, args, header_cache),
        **options,
    )


def reranking_flag(model_path: str, args, header_cache: str | None = None) -> tuple[str, ...]:
    """("--reranking",) for a GGUF with a rank head (pooling type rank) started without it: llama-server
    serves /v1/rerank only with the flag, and the model is no chat model."""
    if any(str(arg) in ("--reranking", "--rerank") for arg in args):
        return ()
    return ("--reranking",) if pooling_type(model_path, header_cache) == POOLING_RANK else ()


def discover(models_dir: str) -> dict[str, tuple[str, str | None]]:
    """--models-dir: model name (the file's stem) -> (its GGUF path, its projector or None). A projector
    is an `mmproj*.gguf` beside it: `mmproj-<stem>*.gguf`, or the only one in a model's own folder."""
    found = {}
    for path in sorted(Path(models_dir).expanduser().glob("**/*.gguf")):
        if path.name.startswith("mmproj"):
            continue
        projectors = sorted(path.parent.glob(f"mmproj-{path.stem}*.gguf")) or (
            sorted(path.parent.glob("mmproj*.gguf")) if path.parent != Path(models_dir).expanduser() else []
        )
        found[path.stem] = (str(path), str(projectors[0]) if projectors else None)
    return found


def find_llama_server(given: str | None) -> str | None:
    """--llama-server, else `llama-server` on PATH, else the one scripts/provision built into the cache."""
    if given:
        return given
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    cache = os.environ.get("API_LIKE_OAI_CACHE") or os.path.expanduser("~/.cache/api-like-oai")
    built = sorted(glob.glob(os.path.join(cache, "llama-server-*", "bin", "llama-server")))
    return built[-1] if built else None


def default_budget() -> tuple[int, dict[str, int] | None]:
    """(MiB in all, MiB per device or None). On a machine with NVIDIA GPUs a budget per GPU, its free
    memory now (nvidia-smi) less GPU_RESERVE_MIB, and one for the layers on the CPU, the memory available
    now less RESERVE_MIB; without GPUs the available memory alone, one pool."""
    system = available_mib()
    gpus = gpu_free_mib()
    if not gpus:
        return system, None
    devices = {f"gpu{index}": max(free - GPU_RESERVE_MIB, 0) for index, free in enumerate(gpus)}
    devices["cpu"] = system
    return sum(devices.values()), devices


def available_mib() -> int:
    """/proc/meminfo's MemAvailable less RESERVE_MIB (8 GiB where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return max(int(line.split()[1]) // 1024 - RESERVE_MIB, 0)
    except OSError:
        pass
    return 8 * 1024


def gpu_free_mib() -> list[int]:
    """Each NVIDIA GPU's free memory in MiB, per nvidia-smi; [] without one (or without nvidia-smi)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        answer = subprocess.run(
            [binary, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return [int(float(line)) for line in answer.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def supervisor_settings(
    specs: list[LaunchSpec],
    llama_server: str,
    budget_mib: int | None,
    max_loaded: int | None,
    slot_dir: str | None,
    header_cache: str | None = None,
) -> SupervisorSettings:
    """--memory-budget, when given, is one pool for all devices; else the budgets are found (default_budget)."""
    if slot_dir is None and any(spec.slot_save for spec in specs):
        slot_dir = tempfile.mkdtemp(prefix="api-like-oai-slots-")
    total, devices = (budget_mib, None) if budget_mib else default_budget()
    return SupervisorSettings(
        llama_server,
        tuple(specs),
        total,
        max_loaded or None,
        slot_dir=slot_dir,
        device_budgets=devices,
        api_key=secrets.token_urlsafe(32),
        header_cache=header_cache,
    )
