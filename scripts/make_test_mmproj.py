#!/usr/bin/env python3
"""Write a tiny random-weight vision projector (mmproj GGUF) for SmolLM2-135M, for the image tests.

No package ships a vision GGUF small enough for the tests, so this makes one: a 2-layer CLIP-style ViT
(32x32 pixels, 8x8 patches, width 32) with a LLaVA "mlp" projector onto SmolLM2-135M's embedding size 576.
llama-server loads it with `--mmproj`; what the model then says about an image is nonsense, but the path is
real: media marker, multimodal_data, stb_image decoding, 16 image tokens per image, cache behaviour.

The tensor names and metadata keys are those tools/mtmd/clip.cpp reads for PROJECTOR_TYPE_MLP (llava):
v.patch_embd.weight, v.position_embd.weight, v.blk.N.{attn_q,attn_k,attn_v,attn_out,ln1,ln2,ffn_up,ffn_down},
mm.0 and mm.2. Deterministic (fixed seed), about 1.5 MB.

Usage: make_test_mmproj.py OUTPUT.gguf
"""
import sys

import gguf
import numpy as np
from gguf_files import finish

TEXT_EMBD = 576  # SmolLM2-135M's hidden size: the projector's output must match it
WIDTH, HEADS, FFN, LAYERS = 32, 2, 64, 2
IMAGE, PATCH = 32, 8
N_PATCHES = (IMAGE // PATCH) ** 2


def weights(rng):
    """Tensor name -> float32 array in numpy order (gguf stores the reversed shape as ggml's ne)."""
    def rand(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tensors = {
        "v.patch_embd.weight": rand(WIDTH, 3, PATCH, PATCH),
        "v.position_embd.weight": rand(N_PATCHES, WIDTH),
        "mm.0.weight": rand(TEXT_EMBD, WIDTH), "mm.0.bias": rand(TEXT_EMBD),
        "mm.2.weight": rand(TEXT_EMBD, TEXT_EMBD), "mm.2.bias": rand(TEXT_EMBD),
    }
    for layer in range(LAYERS):
        block = f"v.blk.{layer}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors[f"{block}.{name}.weight"] = rand(WIDTH, WIDTH)
            tensors[f"{block}.{name}.bias"] = rand(WIDTH)
        for name in ("ln1", "ln2"):
            tensors[f"{block}.{name}.weight"] = np.ones(WIDTH, np.float32)
            tensors[f"{block}.{name}.bias"] = np.zeros(WIDTH, np.float32)
        tensors[f"{block}.ffn_up.weight"] = rand(FFN, WIDTH)
        tensors[f"{block}.ffn_up.bias"] = rand(FFN)
        tensors[f"{block}.ffn_down.weight"] = rand(WIDTH, FFN)
        tensors[f"{block}.ffn_down.bias"] = rand(WIDTH)
    return tensors


def write(path):
    """Write the projector GGUF to path (through a temporary name, so a half-written file is never used)."""
    writer = gguf.GGUFWriter(path + ".tmp", "clip")
    writer.add_string("general.name", "api-like-oai test projector (random weights)")
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", IMAGE)
    writer.add_uint32("clip.vision.patch_size", PATCH)
    writer.add_uint32("clip.vision.embedding_length", WIDTH)
    writer.add_uint32("clip.vision.feed_forward_length", FFN)
    writer.add_uint32("clip.vision.block_count", LAYERS)
    writer.add_uint32("clip.vision.projection_dim", TEXT_EMBD)
    writer.add_uint32("clip.vision.attention.head_count", HEADS)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    finish(writer, weights(np.random.default_rng(27)), path)


if __name__ == "__main__":
    write(sys.argv[1])
