#!/usr/bin/env python3
"""Write a tiny random-weight audio projector (mmproj GGUF) for SmolLM2-135M, for the speech tests.

No package ships an audio model small enough for the tests, so this makes one: a 2-layer Whisper-style
encoder (128 mel bins, two 1-D convolutions, width 32, 1500 positions: one 30-second chunk) with
Qwen2-Audio's projector (an average pool and one linear layer onto SmolLM2-135M's embedding size 576).
llama-server loads it with `--mmproj`; what the model then writes of a clip is nonsense, but the path is
real: `/props` `modalities.audio`, llama.cpp's own decoding of wav, mp3 and flac (miniaudio), its mel
spectrogram, the media marker and multimodal_data, `/v1/audio/transcriptions`. Deterministic (fixed seed).

The tensor names and metadata keys are those tools/mtmd/clip.cpp reads for PROJECTOR_TYPE_QWEN2A:
a.conv1d.{1,2}, a.position_embd, a.blk.N.{attn_q,attn_k (no bias),attn_v,attn_out,ln1,ln2,ffn_up,ffn_down},
a.post_ln and mm.a.fc (models/whisper-enc.cpp builds the graph).

Usage: make_test_audio_mmproj.py OUTPUT.gguf
"""
import sys

import gguf
import numpy as np
from gguf_files import finish

TEXT_EMBD = 576   # SmolLM2-135M's hidden size: the projector's output must match it
WIDTH, HEADS, FFN, LAYERS, MELS, POSITIONS = 32, 2, 64, 2, 128, 1500


def weights(rng) -> dict:
    """Tensor name -> float32 array in numpy order (gguf stores the reversed shape as ggml's ne)."""
    def rand(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    def norm(prefix: str) -> dict:
        return {f"{prefix}.weight": np.ones(WIDTH, np.float32), f"{prefix}.bias": np.zeros(WIDTH, np.float32)}

    tensors = {"a.conv1d.1.weight": rand(WIDTH, MELS, 3), "a.conv1d.1.bias": rand(WIDTH, 1),
               "a.conv1d.2.weight": rand(WIDTH, WIDTH, 3), "a.conv1d.2.bias": rand(WIDTH, 1),
               "a.position_embd.weight": rand(POSITIONS, WIDTH), **norm("a.post_ln"),
               "mm.a.fc.weight": rand(TEXT_EMBD, WIDTH), "mm.a.fc.bias": rand(TEXT_EMBD)}
    for layer in range(LAYERS):
        block = f"a.blk.{layer}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors[f"{block}.{name}.weight"] = rand(WIDTH, WIDTH)
        for name in ("attn_q", "attn_v", "attn_out"):   # Whisper's key projection has no bias
            tensors[f"{block}.{name}.bias"] = rand(WIDTH)
        tensors |= norm(f"{block}.ln1") | norm(f"{block}.ln2")
        tensors[f"{block}.ffn_up.weight"], tensors[f"{block}.ffn_up.bias"] = rand(FFN, WIDTH), rand(FFN)
        tensors[f"{block}.ffn_down.weight"], tensors[f"{block}.ffn_down.bias"] = rand(WIDTH, FFN), rand(WIDTH)
    return tensors


def write(path: str) -> None:
    """Write the projector to path (through a temporary name, so a half-written file is never used)."""
    writer = gguf.GGUFWriter(path + ".tmp", "clip")
    writer.add_string("general.name", "api-like-oai test audio projector (random weights)")
    writer.add_string("clip.projector_type", "qwen2a")
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_uint32("clip.audio.embedding_length", WIDTH)
    writer.add_uint32("clip.audio.feed_forward_length", FFN)
    writer.add_uint32("clip.audio.block_count", LAYERS)
    writer.add_uint32("clip.audio.attention.head_count", HEADS)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    writer.add_uint32("clip.audio.projection_dim", TEXT_EMBD)
    writer.add_uint32("clip.audio.num_mel_bins", MELS)
    finish(writer, weights(np.random.default_rng(40)), path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write(sys.argv[1])
