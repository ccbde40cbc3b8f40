#!/usr/bin/env python3
"""Write a tiny random-weight reranker (a BERT cross-encoder with a rank head, GGUF) for the rerank tests.

No package on PyPI ships a reranker GGUF, so this makes one: a 2-layer BERT (width 32, 2 heads, 128
positions) with a WordPiece vocabulary of the letters and some words, and the classification head
(`cls`, `cls.output`) that llama.cpp reads for pooling type rank. `llama-server --reranking` loads it and
serves /v1/rerank; its scores are meaningless but real: llama.cpp's tokenizer, its rank pooling, its
sorting and top_n, its token counts. Deterministic (fixed seed), about 100 KB.

The tensor names and metadata keys are those llama.cpp's src/models/bert.cpp and llama-vocab.cpp read
(the names convert_hf_to_gguf.py writes for a BertForSequenceClassification).

Usage: make_test_reranker.py OUTPUT.gguf
"""
import string
import sys

import gguf
import numpy as np
from gguf_files import finish

WIDTH, HEADS, FFN, LAYERS, POSITIONS = 32, 2, 64, 2, 128
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a an is are of in to and what which who how panda pandas bear bears china giant hi hello "
         "world cat dog fish eat eats bamboo animal black white lives live").split()


def vocabulary() -> list[str]:
    """WordPiece as llama.cpp keeps it: a word's first piece marked with U+2581, its continuations bare."""
    letters = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = SPECIALS + [f"\u2581{word}" for word in WORDS] + [f"\u2581{c}" for c in letters] + letters
    return list(dict.fromkeys(pieces))   # each once ("a" is a word and a letter): llama.cpp refuses duplicates


def weights(rng, n_vocab: int) -> dict:
    def rand(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def norm(prefix: str) -> dict:
        return {f"{prefix}.weight": np.ones(WIDTH, np.float32), f"{prefix}.bias": np.zeros(WIDTH, np.float32)}

    tensors = {"token_embd.weight": rand(n_vocab, WIDTH), "token_types.weight": rand(2, WIDTH),
               "position_embd.weight": rand(POSITIONS, WIDTH), **norm("token_embd_norm"),
               "cls.weight": rand(WIDTH, WIDTH), "cls.bias": rand(WIDTH),
               "cls.output.weight": rand(1, WIDTH), "cls.output.bias": rand(1)}
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[f"{block}.{name}.weight"] = rand(WIDTH, WIDTH)
            tensors[f"{block}.{name}.bias"] = rand(WIDTH)
        tensors |= norm(f"{block}.attn_output_norm") | norm(f"{block}.layer_output_norm")
        tensors[f"{block}.ffn_up.weight"], tensors[f"{block}.ffn_up.bias"] = rand(FFN, WIDTH), rand(FFN)
        tensors[f"{block}.ffn_down.weight"], tensors[f"{block}.ffn_down.bias"] = rand(WIDTH, FFN), rand(WIDTH)
    return tensors


def write(path: str) -> None:
    """Write the reranker to path (through a temporary name, so a half-written file is never used)."""
    tokens = vocabulary()
    writer = gguf.GGUFWriter(path + ".tmp", "bert")
    writer.add_string("general.name", "api-like-oai test reranker (random weights)")
    writer.add_context_length(POSITIONS)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS)
                           + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS)))
    writer.add_token_type_count(2)
    for add, token in ((writer.add_pad_token_id, 0), (writer.add_unk_token_id, 1), (writer.add_bos_token_id, 2),
                       (writer.add_sep_token_id, 3), (writer.add_mask_token_id, 4)):
        add(token)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    finish(writer, weights(np.random.default_rng(40), len(tokens)), path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write(sys.argv[1])
