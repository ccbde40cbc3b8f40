"""What the scripts that write the tests' random-weight GGUF files share (make_test_mmproj.py,
make_test_audio_mmproj.py, make_test_reranker.py; run as `python scripts/<script> PATH`, so this
folder is on their import path)."""

from __future__ import annotations

import os

import gguf


def finish(writer: gguf.GGUFWriter, tensors: dict, path: str) -> None:
    """Add `tensors` (name -> array), write the file the writer was opened on (`path` + ".tmp") and
    move it to `path` at once: a test never finds half a file."""
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(path + ".tmp", path)
