"""The supervisor's GGUF header reader gives what llama.cpp's own reader (gguf.GGUFReader) gives for the
fields the memory estimate and the model list use, on the real models and on a file with every value
type, and keeps what it read by path, size and modification time."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType

from api_like_oai import gguf_header
from api_like_oai.gguf_header import FILE_TYPES, cached_header, read_header, summary, wanted


class PlainGGUFReader(GGUFReader):
    """GGUFReader, its parse unchanged, over a plain ndarray view of its numpy.memmap: the same bytes
    without the memmap's bookkeeping on each of the million slices the parse takes of gemma's 262k-token
    vocabulary (15 s of the reader's 19; 4 s so)."""

    @property
    def data(self):
        return self._plain

    @data.setter
    def data(self, mapped):
        self._plain = np.asarray(mapped)  # a view of the mapped file, not a copy


def reference(path: str) -> dict:
    """What GGUFReader says of the same fields (the whole file parsed)."""
    reader = PlainGGUFReader(path, "r")
    fields = {
        key: field.contents()
        for key, field in reader.fields.items()  # GGUF.*: the reader's own, not metadata
        # an array's contents (gemma's 262k tokens) only if wanted: contents() of an ARRAY is the list
        if not key.startswith("GGUF.") and (wanted(key) or field.types[0] != GGUFValueType.ARRAY)
    }
    return {
        "fields": fields,
        "parameters": sum(int(tensor.n_elements) for tensor in reader.tensors),
        "tensors": len(reader.tensors),
    }


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def real_model(request, provisioned, gemma_model) -> str:
    return provisioned["MODEL"] if request.param == "smollm2" else gemma_model


def test_the_real_models_headers_read_as_gguf_reads_them(real_model):
    header = read_header(real_model)
    assert header == reference(real_model)
    assert header["fields"]["general.architecture"] in ("llama", "gemma3")
    assert header["parameters"] > 100_000_000


def synthetic(path: str) -> str:
    """A small GGUF file with every value type, nested arrays and two tensors."""
    writer = GGUFWriter(path, "llama")
    writer.add_block_count(3)
    writer.add_context_length(8192)
    writer.add_uint8("x.u8", 7)
    writer.add_int16("x.i16", -3)
    writer.add_float64("x.f64", 2.5)
    writer.add_bool("x.bool", True)
    writer.add_uint64("x.u64", 2**40)
    writer.add_array("tokenizer.ggml.tokens", ["a", "ünï", "", "longer token"] * 1000)
    writer.add_array("x.nested", [[1, 2], [3]])
    writer.add_array("x.floats", [0.5] * 99)
    writer.add_head_count_kv([2, 4, 2])
    writer.add_embedding_length(64)
    writer.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_tensor("a", np.zeros((4, 6), dtype=np.float32))
    writer.add_tensor("b", np.zeros((5,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_value_type_and_nested_arrays_are_skipped_or_read_as_gguf_reads_them(tmp_path):
    path = synthetic(str(tmp_path / "synthetic.gguf"))
    header = read_header(path)
    assert header == reference(path)
    assert header["parameters"] == 29 and header["fields"]["llama.attention.head_count_kv"] == [2, 4, 2]
    assert summary(header) == {"architecture": "llama", "context_length": 8192, "parameters": 29, "quantization": "Q4_K_M"}


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(gguf_header.NotGGUF):
        read_header(str(tmp_path / "not.gguf"))


def test_the_quantization_names_are_llamacpps():
    for number, name in FILE_TYPES.items():
        assert LlamaFileType(number).name.removeprefix("MOSTLY_").removeprefix("ALL_") == name
    assert GGUFValueType.ARRAY == gguf_header.ARRAY and GGUFValueType.STRING == gguf_header.STRING


def test_a_header_is_read_once_per_path_size_and_modification_time(tmp_path, monkeypatch):
    model = synthetic(str(tmp_path / "model.gguf"))
    cache = str(tmp_path / "cache")
    first = cached_header(model, cache)
    assert first == read_header(model) and len(os.listdir(cache)) == 1

    def not_again(path):
        raise AssertionError("read again")

    monkeypatch.setattr(gguf_header, "read_header", not_again)
    assert cached_header(model, cache) == first
    os.symlink(model, tmp_path / "link.gguf")  # the same file by another name: the same entry
    assert cached_header(str(tmp_path / "link.gguf"), cache) == first
    os.utime(model, ns=(1, 1))  # replaced in place: read again
    with pytest.raises(AssertionError, match="read again"):
        cached_header(model, cache)
