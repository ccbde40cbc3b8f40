"""A launched model's memory footprint, estimated from its GGUF file's header (gguf_header.py).

    footprint = the file's size (the weights, as llama.cpp maps them)
              + its projector's file size (mmproj), if any
              + the KV cache: 2 (K and V) x layers x context x KV heads x head size x 2 bytes (f16)
              + COMPUTE_RESERVE_MIB (llama.cpp's compute buffers and the process itself)
              + a draft model's file size and its KV cache for the same context (`draft:`), if any

The context is the one llama-server is given (`--ctx-size`/`-c`; without it the model's trained
context, as llama-server takes it). `--cache-type-k/-v q8_0` or a sliding-window model need less, a
large `--batch-size` more: set `memory:` by hand then. Imported only by the supervisor process.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import replace

from ..gguf_header import cached_header, summary
from .spec import LaunchSpec

log = logging.getLogger("api_like_oai.supervisor")

COMPUTE_RESERVE_MIB = 96
MIB = 1024 * 1024
KV_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}


def estimate_mib(spec: LaunchSpec, header_cache: str | None = None) -> int:
    """MiB one replica of `spec` needs, per the module's formula (the header kept in `header_cache`)."""
    return estimate_from(spec, cached_header(spec.model_path, header_cache)["fields"], header_cache)


def estimate_from(spec: LaunchSpec, fields: dict, header_cache: str | None = None) -> int:
    """estimate_mib with the file's metadata `fields` already read (a draft's header read through `header_cache`)."""
    total = os.path.getsize(spec.model_path) + (os.path.getsize(spec.mmproj) if spec.mmproj else 0)
    total += kv_cache_bytes(fields, spec)
    if spec.draft:  # llama-server gives the draft the target's context (common/speculative.cpp)
        total += os.path.getsize(spec.draft) + kv_cache_bytes(cached_header(spec.draft, header_cache)["fields"], spec)
    return int(total / MIB) + COMPUTE_RESERVE_MIB


def model_facts(spec: LaunchSpec, header_cache: str | None) -> tuple[int, dict]:
    """(MiB all replicas need: `memory:` if set, else estimated; what the model list shows of the file).
    A file whose header cannot be read is counted by its size (llama-server will say what is wrong)."""
    try:
        header = cached_header(spec.model_path, header_cache)
    except (OSError, ValueError, KeyError, struct.error) as exc:
        log.warning("model %s: its GGUF header could not be read (%s); its size alone is counted", spec.name, exc)
        header = {"fields": {}}
    try:
        return _all_replicas_mib(spec, header["fields"], header_cache), summary(header)
    except (OSError, ValueError, KeyError, struct.error):
        return COMPUTE_RESERVE_MIB * len(spec.ports), summary(header)


def _all_replicas_mib(spec: LaunchSpec, fields: dict, header_cache: str | None) -> int:
    """`memory:` (per replica) or the estimate, times the replicas; only those running the draft
    (`draft_replicas`) count its file and cache."""
    if spec.memory_mib:
        return spec.memory_mib * len(spec.ports)
    drafting = len(spec.drafting_urls)
    plain = estimate_from(replace(spec, draft=None), fields, header_cache) if drafting < len(spec.ports) else 0
    with_draft = estimate_from(spec, fields, header_cache) if drafting else 0
    return with_draft * drafting + plain * (len(spec.ports) - drafting)


def kv_cache_bytes(fields: dict, spec: LaunchSpec) -> int:
    arch = fields.get("general.architecture", "llama")

    def number(name: str, default: int = 0) -> int:
        value = fields.get(f"{arch}.{name}", default)
        return int(max(value) if isinstance(value, list) else value)  # per-layer lists: the largest

    layers, heads = number("block_count"), max(number("attention.head_count", 1), 1)
    kv_heads = number("attention.head_count_kv", heads)
    head_size = number("embedding_length") // heads
    key_size, value_size = number("attention.key_length", head_size), number("attention.value_length", head_size)
    context = int(spec.arg_value("--ctx-size", "-c") or 0) or number("context_length", 4096)
    element = KV_BYTES.get(spec.arg_value("--cache-type-k", "-ctk") or "f16", 2)
    return int(layers * context * kv_heads * (key_size + value_size) * element)


def device_split(
    spec: LaunchSpec, total_mib: int, device_budgets: dict[str, int], header_cache: str | None = None
) -> dict[str, int]:
    """per_device_mib, the GGUF file read for its layer count only where --n-gpu-layers needs it."""
    given = spec.arg_value("--n-gpu-layers", "-ngl", "--gpu-layers")
    layers = layer_count(spec.model_path, header_cache) if given is not None and given.isdigit() else None
    return per_device_mib(spec, total_mib, device_budgets, layers)


def layer_count(path: str, header_cache: str | None = None) -> int | None:
    """The model's layer count (its `block_count`), for a split by --n-gpu-layers."""
    fields = cached_header(path, header_cache)["fields"]
    value = fields.get(f"{fields.get('general.architecture', 'llama')}.block_count")
    return int(value) if value is not None else None


def per_device_mib(spec: LaunchSpec, total_mib: int, device_budgets: dict[str, int], layers: int | None) -> dict[str, int]:
    """One replica's `total_mib` (per the module's formula, or `memory:`) spread over the devices it
    runs on, as llama.cpp places it: the offloaded share (--n-gpu-layers of the layers and the output
    layer; all by default) over its GPUs (`devices:`, else all) by --tensor-split (else in proportion to
    their budgets, as llama.cpp splits by free memory; --split-mode none: all on --main-gpu), the rest on
    the CPU; each device it uses gets COMPUTE_RESERVE_MIB of its own."""
    gpus = _gpus_of(spec, device_budgets)
    movable = max(total_mib - COMPUTE_RESERVE_MIB, 0)
    offloaded = movable * _offloaded_share(spec, layers) if gpus else 0
    shares = _gpu_shares(spec, gpus, device_budgets)
    split = {gpu: round(offloaded * share) + COMPUTE_RESERVE_MIB for gpu, share in zip(gpus, shares, strict=True) if share > 0}
    return {**split, "cpu": round(movable - offloaded) + COMPUTE_RESERVE_MIB}


def _gpus_of(spec: LaunchSpec, device_budgets: dict[str, int]) -> list[str]:
    known = [device for device in device_budgets if device.startswith("gpu")]
    if spec.devices is None:
        return known
    return [f"gpu{index}" for index in spec.devices if f"gpu{index}" in known]


def _offloaded_share(spec: LaunchSpec, layers: int | None) -> float:
    """The part of the weights and the KV cache on GPUs: --n-gpu-layers of the layers + the output layer."""
    given = spec.arg_value("--n-gpu-layers", "-ngl", "--gpu-layers")
    if given is None or not given.lstrip("-").isdigit() or int(given) < 0 or not layers:
        return 1.0  # "auto", "all", -1 or unknown: llama.cpp offloads every layer it can
    return min(int(given), layers + 1) / (layers + 1)


def _gpu_shares(spec: LaunchSpec, gpus: list[str], device_budgets: dict[str, int]) -> list[float]:
    """Each of `gpus`' share of the offloaded part (summing to 1; [] without GPUs)."""
    if not gpus:
        return []
    if (spec.arg_value("--split-mode", "-sm") or "layer") == "none":
        main = int(spec.arg_value("--main-gpu", "-mg") or 0)
        weights = [1.0 if position == main else 0.0 for position in range(len(gpus))]
    else:
        given = spec.arg_value("--tensor-split", "-ts")
        parts = [float(part or 0) for part in given.replace("/", ",").split(",")] if given else []
        weights = (parts + [0.0] * len(gpus))[: len(gpus)] if given else [max(device_budgets[g], 1) for g in gpus]
    whole = sum(weights)
    return [weight / whole for weight in weights] if whole > 0 else [1 / len(gpus)] * len(gpus)
