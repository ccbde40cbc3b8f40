"""What Ollama's /api/tags and /api/show say of a model, read from its GGUF file's header: the
architecture, its context length, the parameter count's label, the quantization.

Only the metadata is read (the key-value pairs before the tensors), with the stdlib: the `gguf`
package would import numpy into every worker for a few numbers. Each file is read once per worker
(keyed by path, size and modification time); arrays (the tokenizer's vocabulary) are skipped over.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

# GGUF value types: fixed-size ones by struct format; 8 is a string, 9 an array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# llama.cpp's llama_ftype: the weights' quantization, as Ollama names it.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
               12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
               19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
               26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
               36: "TQ1_0", 37: "TQ2_0"}


@dataclass(frozen=True)
class ModelFile:
    """A model's file as Ollama describes it; `metadata` holds the scalar values of its header."""

    path: str | None = None
    size: int = 0
    modified: float = 0.0
    metadata: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "llama"))

    @property
    def digest(self) -> str:
        """Stands for the file (Ollama's is its blob's SHA-256; hashing gigabytes per request would not do)."""
        return hashlib.sha256(f"{self.path}:{self.size}:{self.modified}".encode()).hexdigest()

    def details(self) -> dict:
        arch = self.architecture
        file_type = self.metadata.get("general.file_type")
        return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
                "parameter_size": str(self.metadata.get("general.size_label", "")),
                "quantization_level": _FILE_TYPES.get(file_type, "") if isinstance(file_type, int) else ""}

    def has_key_ending(self, suffix: str) -> bool:
        return any(key.endswith(suffix) for key in self.metadata)


def model_file(path: str | None) -> ModelFile:
    """The file at `path` and its metadata; an empty description when there is none to read."""
    if not path:
        return ModelFile()
    try:
        stat = os.stat(path)
    except OSError:
        return ModelFile(path)
    return _read(path, stat.st_size, stat.st_mtime)


@functools.lru_cache(maxsize=32)
def _read(path: str, size: int, modified: float) -> ModelFile:
    try:
        with open(path, "rb") as file:
            metadata = read_metadata(file)
    except (OSError, ValueError, struct.error):
        metadata = {}
    return ModelFile(path, size, modified, metadata)


def read_metadata(file: BinaryIO) -> dict:
    """The scalar and string values of a GGUF header by key (arrays skipped); ValueError if not GGUF."""
    if file.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    version, _tensors, count = struct.unpack("<IQQ", file.read(20))
    if version < 2:
        raise ValueError("GGUF version 1 is not read")
    metadata = {}
    for _ in range(count):
        key = _string(file)
        (kind,) = struct.unpack("<I", file.read(4))
        value = _value(file, kind)
        if value is not None:
            metadata[key] = value
    return metadata


def _string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", file.read(8))
    return file.read(length).decode("utf-8", "replace")


def _value(file: BinaryIO, kind: int):
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, file.read(struct.calcsize(fmt)))[0]
    if kind == _STRING:
        return _string(file)
    if kind == _ARRAY:
        item_kind, items = struct.unpack("<IQ", file.read(12))
        _skip_items(file, item_kind, items)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


def _skip_items(file: BinaryIO, kind: int, items: int) -> None:
    if kind in _SCALARS:
        file.seek(struct.calcsize(_SCALARS[kind]) * items, os.SEEK_CUR)
        return
    for _ in range(items):
        if kind == _STRING:   # the vocabulary: tens of thousands, seeked over rather than decoded
            (length,) = struct.unpack("<Q", file.read(8))
            file.seek(length, os.SEEK_CUR)
        else:
            _value(file, kind)
