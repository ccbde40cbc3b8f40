"""One metadata value of a GGUF file, read from its header without the `gguf` package (which brings
numpy into the process that asks: the master and its workers ask only whether a model is a reranker).

The layout (ggml's docs/gguf.md): magic `GGUF`, version u32, tensor count u64, key-value count u64,
then each key (u64 length + UTF-8) with a u32 type and its value; arrays are a u32 element type, a u64
count and the elements. Everything little-endian."""

from __future__ import annotations

import functools
import struct

POOLING_RANK = 4   # llama.h's LLAMA_POOLING_TYPE_RANK: a reranker's classification head
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # type -> size in bytes
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@functools.lru_cache(maxsize=64)
def pooling_type(path: str) -> int | None:
    """The model's `<architecture>.pooling_type`, None when it has none or the file cannot be read."""
    try:
        with open(path, "rb") as file:
            return _find(file, lambda key, arch: key == f"{arch}.pooling_type")
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return None


def _find(file, wanted):
    """The first value whose key `wanted(key, architecture)` accepts (the architecture comes first in
    every file llama.cpp writes)."""
    if file.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    _version, _tensors, count = struct.unpack("<IQQ", file.read(20))
    architecture = None
    for _ in range(count):
        key = _string(file)
        kind = struct.unpack("<I", file.read(4))[0]
        if key == "general.architecture" and kind == _STRING:
            architecture = _string(file)
        elif wanted(key, architecture) and kind in _SCALARS:
            return struct.unpack(_SCALARS[kind], file.read(_FIXED[kind]))[0]
        else:
            _skip(file, kind)
    return None


def _string(file) -> str:
    length = struct.unpack("<Q", file.read(8))[0]
    return file.read(length).decode("utf-8")


def _skip(file, kind: int) -> None:
    if kind in _FIXED:
        file.seek(_FIXED[kind], 1)
    elif kind == _STRING:
        file.seek(struct.unpack("<Q", file.read(8))[0], 1)
    elif kind == _ARRAY:
        element, length = struct.unpack("<IQ", file.read(12))
        if element in _FIXED:
            file.seek(_FIXED[element] * length, 1)
        else:
            for _ in range(length):
                _skip(file, element)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")
