"""What the proxy reads of a GGUF file (the supervisor's memory estimate and model list, a reranker's
pooling type, Ollama's /api/show and /api/tags), from its header without decoding it, in one reader:
`gguf.GGUFReader` builds every metadata array, the vocabulary of 128k-262k strings included, and took
4-15 s per file; here an array is skipped by its length (a string array by its strings' lengths alone)
and only the values kept are decoded.

Each file's facts are kept on disk by (path, size, modification time), so a folder seen before costs one
small JSON read per model. The format (llama.cpp's gguf.md): magic `GGUF`, version, tensor count and
metadata count; the metadata as (key, type, value); then each tensor's name, shape, type and offset.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct

# GGUF value types -> struct formats of the fixed-size ones (8: string, 9: array)
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
# llama.cpp's `general.file_type` (gguf.LlamaFileType) -> the quantization's name
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}
# The metadata kept: every value that is not an array (numbers and strings, the chat template too), and
# of the arrays only the architecture's own keys by these suffixes (per-layer head counts), and these
NEEDED_SUFFIXES = (
    ".block_count",
    ".context_length",
    ".embedding_length",
    ".attention.head_count",
    ".attention.head_count_kv",
    ".attention.key_length",
    ".attention.value_length",
)
NEEDED_KEYS = ("general.architecture", "general.file_type", "general.name", "general.size_label")
CACHE_VERSION = 2  # 2: every scalar and string kept, not only the estimate's


POOLING_RANK = 4  # llama.h's LLAMA_POOLING_TYPE_RANK: a reranker's classification head


class NotGGUF(ValueError):
    pass


def wanted(key: str, value_type: int | None = None) -> bool:
    """Whether a metadata value is kept: any value of the estimate's keys, any other that is no array."""
    return key in NEEDED_KEYS or key.endswith(NEEDED_SUFFIXES) or (value_type is not None and value_type != ARRAY)


def read_header(path: str) -> dict:
    """{"fields": the wanted metadata by key (an array of numbers as a list), "parameters": the tensors'
    element count, "tensors": how many} of the GGUF file at `path`."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise NotGGUF(f"{path} is not a GGUF file")
        version = struct.unpack_from("<I", data, 4)[0]
        if version < 2:
            raise NotGGUF(f"{path}: GGUF version {version} is too old (llama.cpp reads 2 and later)")
        tensor_count, metadata_count = struct.unpack_from("<QQ", data, 8)
        reader = _Walker(data, 24)
        fields = {}
        for _ in range(metadata_count):
            key = reader.string()
            value_type = reader.u32()
            if wanted(key, value_type):
                fields[key] = reader.value(value_type)
            else:
                reader.skip(value_type)
        return {"fields": fields, "parameters": reader.tensor_elements(tensor_count), "tensors": tensor_count}


class _Walker:
    """A position in the mapped file, moved forward by what is read or skipped."""

    def __init__(self, data: mmap.mmap, offset: int):
        self.data, self.offset = data, offset

    def u32(self) -> int:
        self.offset += 4
        return struct.unpack_from("<I", self.data, self.offset - 4)[0]

    def u64(self) -> int:
        self.offset += 8
        return struct.unpack_from("<Q", self.data, self.offset - 8)[0]

    def string(self) -> str:
        length = self.u64()
        self.offset += length
        return self.data[self.offset - length : self.offset].decode("utf-8", "replace")

    def value(self, value_type: int):
        if value_type == STRING:
            return self.string()
        if value_type == ARRAY:
            item_type, count = self.u32(), self.u64()
            return [self.value(item_type) for _ in range(count)]
        form = SCALAR_FORMATS[value_type]
        self.offset += struct.calcsize(form)
        return struct.unpack_from(form, self.data, self.offset - struct.calcsize(form))[0]

    def skip(self, value_type: int) -> None:
        if value_type == STRING:
            length = self.u64()  # read before the addition: `offset += u64()` would add to the old offset
            self.offset += length
        elif value_type == ARRAY:
            item_type, count = self.u32(), self.u64()
            self._skip_items(item_type, count)
        else:
            self.offset += struct.calcsize(SCALAR_FORMATS[value_type])

    def _skip_items(self, item_type: int, count: int) -> None:
        if item_type in SCALAR_FORMATS:
            self.offset += count * struct.calcsize(SCALAR_FORMATS[item_type])
        elif item_type == STRING:  # the vocabulary: only each string's length is read
            data, offset, length_at = self.data, self.offset, struct.Struct("<Q").unpack_from
            for _ in range(count):
                offset += 8 + length_at(data, offset)[0]
            self.offset = offset
        else:
            for _ in range(count):
                self.skip(item_type)

    def tensor_elements(self, tensor_count: int) -> int:
        """The sum of every tensor's element count (the model's parameters), from the tensor infos."""
        total = 0
        for _ in range(tensor_count):
            name_length = self.u64()
            self.offset += name_length  # its name
            dimensions = self.u32()
            shape = struct.unpack_from(f"<{dimensions}Q", self.data, self.offset)
            self.offset += 8 * dimensions + 4 + 8  # the shape, its type, its offset
            elements = 1
            for size in shape:
                elements *= size
            total += elements
        return total


def cached_header(path: str, cache_dir: str | None) -> dict:
    """read_header(path), kept in `cache_dir` by the file's path, size and modification time (a file
    replaced in place is read again); no cache without a `cache_dir`, or where it cannot be written."""
    if not cache_dir:
        return read_header(path)
    entry = os.path.join(cache_dir, _cache_key(path) + ".json")
    try:
        with open(entry, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        pass
    header = read_header(path)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        with open(entry + f".{os.getpid()}", "w", encoding="utf-8") as file:
            json.dump(header, file)
        os.replace(entry + f".{os.getpid()}", entry)  # whole or absent, for a proxy reading it at once
    except OSError:
        pass
    return header


def pooling_type(path: str, cache_dir: str | None = None) -> int | None:
    """The model's `<architecture>.pooling_type`; None when it has none or the file cannot be read."""
    try:
        fields = cached_header(path, cache_dir)["fields"]
    except (OSError, ValueError, KeyError, struct.error):
        return None
    value = fields.get(f"{fields.get('general.architecture', 'llama')}.pooling_type")
    return value if isinstance(value, int) else None


def _cache_key(path: str) -> str:
    real = os.path.realpath(path)
    stat = os.stat(real)
    return hashlib.sha256(f"{CACHE_VERSION}\0{real}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:32]


def summary(header: dict) -> dict:
    """What the model list shows of a model's file: its architecture, trained context, parameters and
    quantization (the keys absent that the file does not say)."""
    fields = header["fields"]
    arch = fields.get("general.architecture")
    facts = {
        "architecture": arch,
        "context_length": fields.get(f"{arch}.context_length"),
        "parameters": header.get("parameters"),
        "quantization": FILE_TYPES.get(fields.get("general.file_type")),
    }
    return {key: value for key, value in facts.items() if value is not None}
