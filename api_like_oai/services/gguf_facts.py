"""What Ollama's /api/tags and /api/show say of a model, read from its GGUF file's header: the
architecture, its context length, the parameter count's label, the quantization.

The header is read by the proxy's one GGUF reader (gguf_header.py: the stdlib only, arrays skipped by
their lengths), once per worker per file (keyed by path, size and modification time).
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from dataclasses import dataclass, field

from ..gguf_header import FILE_TYPES, read_header


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
        return {
            "parent_model": "",
            "format": "gguf",
            "family": arch,
            "families": [arch],
            "parameter_size": str(self.metadata.get("general.size_label", "")),
            "quantization_level": FILE_TYPES.get(file_type, "") if isinstance(file_type, int) else "",
        }

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
        metadata = read_header(path)["fields"]
    except (OSError, ValueError, KeyError, struct.error):
        metadata = {}
    return ModelFile(path, size, modified, metadata)
