"""A launched model's memory footprint, estimated from its GGUF file's header (gguf_header.py).

    footprint = the file's size (the weights, as llama.cpp maps them)
              + its projector's file size (mmproj), if any
              + the KV cache: 2 (K and V) x layers x context x KV heads x head size x 2 bytes (f16)
              + COMPUTE_RESERVE_MIB (llama.cpp's compute buffers and the process itself)

The context is the one llama-server is given (`--ctx-size`/`-c`; without it the model's trained
context, as llama-server takes it). `--cache-type-k/-v q8_0` or a sliding-window model need less, a
large `--batch-size` more: set `memory:` by hand then. Imported only by the supervisor process.
"""

from __future__ import annotations

import logging
import os
import struct

from .gguf_header import cached_header, summary
from .spec import LaunchSpec

log = logging.getLogger("api_like_oai.supervisor")

COMPUTE_RESERVE_MIB = 96
MIB = 1024 * 1024
KV_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
            "q5_0": 22 / 32, "q5_1": 24 / 32}


def estimate_mib(spec: LaunchSpec, header_cache: str | None = None) -> int:
    """MiB one replica of `spec` needs, per the module's formula (the header kept in `header_cache`)."""
    return estimate_from(spec, cached_header(spec.model_path, header_cache)["fields"])


def estimate_from(spec: LaunchSpec, fields: dict) -> int:
    """estimate_mib with the file's metadata `fields` already read."""
    total = os.path.getsize(spec.model_path) + (os.path.getsize(spec.mmproj) if spec.mmproj else 0)
    total += kv_cache_bytes(fields, spec)
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
        per_replica = spec.memory_mib or estimate_from(spec, header["fields"])
    except OSError:
        per_replica = COMPUTE_RESERVE_MIB
    return per_replica * len(spec.ports), summary(header)


def kv_cache_bytes(fields: dict, spec: LaunchSpec) -> int:
    arch = fields.get("general.architecture", "llama")

    def number(name: str, default: int = 0) -> int:
        value = fields.get(f"{arch}.{name}", default)
        return int(max(value) if isinstance(value, list) else value)   # per-layer lists: the largest

    layers, heads = number("block_count"), max(number("attention.head_count", 1), 1)
    kv_heads = number("attention.head_count_kv", heads)
    head_size = number("embedding_length") // heads
    key_size, value_size = number("attention.key_length", head_size), number("attention.value_length", head_size)
    context = int(spec.arg_value("--ctx-size", "-c") or 0) or number("context_length", 4096)
    element = KV_BYTES.get(spec.arg_value("--cache-type-k", "-ctk") or "f16", 2)
    return int(layers * context * kv_heads * (key_size + value_size) * element)
