"""A launched model's memory footprint, estimated from its GGUF file (read with the `gguf` package).

    footprint = the file's size (the weights, as llama.cpp maps them)
              + its projector's file size (mmproj), if any
              + the KV cache: 2 (K and V) x layers x context x KV heads x head size x 2 bytes (f16)
              + COMPUTE_RESERVE_MIB (llama.cpp's compute buffers and the process itself)

The context is the one llama-server is given (`--ctx-size`/`-c`; without it the model's trained
context, as llama-server takes it). `--cache-type-k/-v q8_0` or a sliding-window model need less, a
large `--batch-size` more: set `memory:` by hand then. Imported only by the supervisor process.
"""

from __future__ import annotations

import os

from .spec import LaunchSpec

COMPUTE_RESERVE_MIB = 96
MIB = 1024 * 1024
KV_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
            "q5_0": 22 / 32, "q5_1": 24 / 32}


def estimate_mib(spec: LaunchSpec) -> int:
    """MiB one replica of `spec` needs, per the module's formula."""
    total = os.path.getsize(spec.model_path) + (os.path.getsize(spec.mmproj) if spec.mmproj else 0)
    total += kv_cache_bytes(gguf_fields(spec.model_path), spec)
    return int(total / MIB) + COMPUTE_RESERVE_MIB


def gguf_fields(path: str) -> dict:
    """The GGUF file's metadata values that the estimate needs, by key (numbers and the architecture)."""
    from gguf import GGUFReader  # numpy with it: only in the supervisor, only once per model

    reader = GGUFReader(path, "r")
    values = {}
    for key, field in reader.fields.items():
        if key.startswith("general.architecture") or any(key.endswith(suffix) for suffix in _NEEDED):
            values[key] = field.contents()
    return values


_NEEDED = (".block_count", ".context_length", ".embedding_length", ".attention.head_count",
           ".attention.head_count_kv", ".attention.key_length", ".attention.value_length")


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
