"""What the flags and the config file say to launch, made into LaunchSpecs and SupervisorSettings (in
the master, once; no process is started here)."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from .gguf_meta import POOLING_RANK, pooling_type
from .spec import LaunchSpec, SupervisorSettings

RESERVE_MIB = 1024          # left to the system and the proxy when the budget is the available memory


def free_port() -> int:
    """A port nothing listens on now; a replica keeps it for the life of the proxy (its URL is its name
    in the prefix-routing table, so a cache restored after a swap is found where it was)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_spec(name: str, model_path: str, *, replicas: int = 1, args=(), **options) -> LaunchSpec:
    """A LaunchSpec with a port per replica; `args` a list of flags or one shell-quoted string."""
    if isinstance(args, str):
        args = shlex.split(args)
    options = {key: value for key, value in options.items() if value is not None}
    path = str(Path(model_path).expanduser())
    return LaunchSpec(name, path, tuple(free_port() for _ in range(replicas)),
                      tuple(str(arg) for arg in args) + reranking_flag(path, args), **options)


def reranking_flag(model_path: str, args) -> tuple[str, ...]:
    """("--reranking",) for a GGUF with a rank head (pooling type rank) started without it: llama-server
    serves /v1/rerank only with the flag, and the model is no chat model."""
    if any(str(arg) in ("--reranking", "--rerank") for arg in args):
        return ()
    return ("--reranking",) if pooling_type(model_path) == POOLING_RANK else ()


def discover(models_dir: str) -> dict[str, tuple[str, str | None]]:
    """--models-dir: model name (the file's stem) -> (its GGUF path, its projector or None). A projector
    is an `mmproj*.gguf` beside it: `mmproj-<stem>*.gguf`, or the only one in a model's own folder."""
    found = {}
    for path in sorted(Path(models_dir).expanduser().glob("**/*.gguf")):
        if path.name.startswith("mmproj"):
            continue
        projectors = sorted(path.parent.glob(f"mmproj-{path.stem}*.gguf")) or \
            (sorted(path.parent.glob("mmproj*.gguf")) if path.parent != Path(models_dir).expanduser() else [])
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


def default_budget_mib() -> int:
    """On a machine with NVIDIA GPUs, their memory (nvidia-smi: free now, summed) less a reserve, which is
    where llama-server puts the model and its KV cache; else the memory available now (/proc/meminfo's
    MemAvailable) less a reserve."""
    gpus = gpu_free_mib()
    if gpus:
        return max(sum(gpus) - RESERVE_MIB, 0)
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
        answer = subprocess.run([binary, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
        return [int(float(line)) for line in answer.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def supervisor_settings(specs: list[LaunchSpec], llama_server: str, budget_mib: int | None,
                        max_loaded: int | None, slot_dir: str | None) -> SupervisorSettings:
    if slot_dir is None and any(spec.slot_save for spec in specs):
        slot_dir = tempfile.mkdtemp(prefix="api-like-oai-slots-")
    return SupervisorSettings(llama_server, tuple(specs), budget_mib or default_budget_mib(), max_loaded or None,
                              slot_dir=slot_dir)
