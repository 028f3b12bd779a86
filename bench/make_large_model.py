#!/usr/bin/env python3
"""Random-weight GGUF models of a realistic size and shape for speed benchmarks (not for accuracy).

Shapes (--shape):
  bench     Llama-3-like, scaled down (dim 2048, 16 layers, 32/8 heads, FFN 5632, vocab 32000): a few hundred MB
            of weights stream from memory on every decoded token, as in a real 8B model;
  llama8b   exactly Llama 3.1 8B's: dim 4096, 32 layers, 32/8 heads (head dim 128), FFN 14336, vocab 128256,
            RoPE base 500000, separate output matrix;
  qwen3b    exactly Qwen 2.5 3B's: dim 2048, 36 layers, 16/2 heads (head dim 128), FFN 11008, vocab 151936,
            q/k/v biases, RoPE base 1000000, output tied to the token embedding.
--layers N keeps a shape's widths with N layers (profiling a prefill without waiting for all of them).

Variants (written to models/, which git ignores), as llama.cpp's quantizer lays them out:
  q4_k_m  layer matrices Q4_K, except attn_v and ffn_down Q6_K in the layers llama.cpp gives more bits
          (the first and last eighth, and every third between: use_more_bits); token embedding Q4_K, output
          Q6_K (tied: the embedding Q6_K). The `bench` shape keeps its historical layout (every layer matrix
          Q4_K) under the name q4_k;
  q8_0    every matrix Q8_0;
  f16, bf16  every matrix F16 / BF16 (the f32-activation matmul: normal values of the same spread, rounded).
Files: bench-llama-2048x16-{q4_k,q8_0,f16,bf16}[-Lnn].gguf, bench-llama8b-{q4_k_m,q8_0}[-Lnn].gguf,
bench-qwen3b-{q4_k_m,q8_0}[-Lnn].gguf (-Lnn with --layers).

The quantized blocks are random but valid bytes with fp16 scales chosen so that the weights have a
plausible spread (gguf-py cannot quantize K-quants; random bytes are as good for timing): Q8_0 and Q6_K
x = d * q with d = std / std(q); Q4_K x = d*sc*q - dmin*m with dmin = 7.5 d (zero mean on average).
Norm weights are 1, biases 0. The tokenizer is a byte-level BPE ("gpt2") vocabulary of 256 byte tokens plus
merged pairs, so that llama.cpp loads the file; benchmarks feed token ids directly. Tensors are written one
at a time (an 8B file does not have to fit in memory).

Run: python bench/make_large_model.py [--shape llama8b] [--variants q4_k_m q8_0] [--layers N] [--out-dir models]
(needs gguf-py and numpy; the bench shape takes about 10 s, llama8b about 2 minutes and 4.9 / 8.5 GB per file).
"""
import argparse
import os
from dataclasses import dataclass, replace

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



@dataclass(frozen=True)
class Shape:
    arch: str
    dim: int
    n_layer: int
    n_head: int
    n_head_kv: int
    ffn: int
    vocab: int
    ctx: int
    rope_base: float
    norm_eps: float
    qkv_bias: bool
    tied_output: bool


SHAPES = {
    "bench": Shape("llama", 2048, 16, 32, 8, 5632, 32000, 4096, 500000.0, 1e-5, False, False),
    "llama8b": Shape("llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5, False, False),
    "qwen3b": Shape("qwen2", 2048, 36, 16, 2, 11008, 151936, 8192, 1000000.0, 1e-6, True, True),
}

# variant: (layer matrices, the more-bits layers' attn_v / ffn_down (None: as the others), token embedding, output)
VARIANTS = {
    "q4_k": (QT.Q4_K, None, QT.Q4_K, QT.Q6_K),
    "q4_k_m": (QT.Q4_K, QT.Q6_K, QT.Q4_K, QT.Q6_K),
    "q8_0": (QT.Q8_0, None, QT.Q8_0, QT.Q8_0),
    "f16": (QT.F16, None, QT.F16, QT.F16),
    "bf16": (QT.BF16, None, QT.BF16, QT.BF16),
}
FILE_TYPE = {
    "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
}


def use_more_bits(layer, n_layer):
    """llama.cpp's rule for the Q4_K_M layers whose attn_v and ffn_down get Q6_K."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(rng, qtype, rows, cols, std):
    """(rows, row_bytes) uint8 of random valid blocks whose decoded weights have roughly this std."""
    if qtype in (QT.F16, QT.BF16):  # normal values of this std, rounded to nearest (even) 16-bit floats
        x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
        if qtype == QT.F16:
            return x.astype(np.float16).view(np.uint8)
        bits = x.view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16  # no NaN or Inf here
        return rounded.astype(np.uint16).view(np.uint8)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if qtype == QT.Q8_0:  # d f16 | 32 x int8; std of a uniform int8 ~ 73.9
        raw[:, 0:2] = f16_bytes(np.full(n_blocks, std / 73.9))
    elif qtype == QT.Q4_K:  # d f16 | dmin f16 | 12 bytes 6-bit scales/mins | 128 bytes nibbles
        d = std / 261.0  # std of sc*q - 7.5*m for uniform 6-bit sc, m and 4-bit q, see the docstring
        raw[:, 0:2] = f16_bytes(np.full(n_blocks, d))
        raw[:, 2:4] = f16_bytes(np.full(n_blocks, 7.5 * d))
    elif qtype == QT.Q6_K:  # ql[128] | qh[64] | int8 scales[16] | d f16; std of sc*(q-32) ~ 73.9*18.5
        raw[:, 208:210] = f16_bytes(np.full(n_blocks, std / (73.9 * 18.5)))
    else:
        raise ValueError(qtype)
    return raw.reshape(rows, -1)


def byte_level_vocab(size, rng):
    """256 byte tokens (GPT-2 spelling) + <|endoftext|> + merges of random pairs of earlier tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = ["<|endoftext|>"] + [chr(c) for c in cs]
    types = [gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * 256
    seen = set(tokens)
    merges = []
    letters = tokens[1:]
    while len(tokens) < size:
        a = letters[rng.integers(0, len(letters))]
        b = letters[rng.integers(0, len(letters))]
        if a + b in seen or len(a + b) > 12:
            continue
        tokens.append(a + b)
        types.append(gguf.TokenType.NORMAL)
        seen.add(a + b)
        merges.append(f"{a} {b}")
        letters.append(a + b)
    return tokens, types, merges


def write(shape, variant, path, seed=0):
    layer_type, more_bits_type, embd_type, out_type = VARIANTS[variant]
    if shape.tied_output:
        embd_type = out_type  # the embedding is the output matrix too: llama.cpp quantizes it as one
    head_dim = shape.dim // shape.n_head
    kv_dim = shape.n_head_kv * head_dim
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, shape.arch)
    w.add_name(os.path.splitext(os.path.basename(path))[0].replace("bench-", "kvstash-bench-"))
    w.add_description("random weights for speed benchmarks; generated by bench/make_large_model.py")
    w.add_context_length(shape.ctx)
    w.add_embedding_length(shape.dim)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(shape.norm_eps)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(FILE_TYPE[variant])
    tokens, types, merges = byte_level_vocab(shape.vocab, rng)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)

    # (name, make the array, numpy shape, bytes, raw type); the arrays are made and written one at a time.
    tensors = []

    def mat(name, qtype, rows, cols, std):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = rows * cols // block * size
        tensors.append((name, lambda: random_blocks(rng, qtype, rows, cols, std), (rows, nbytes // rows), qtype))

    def vec(name, value, n):
        tensors.append((name, lambda: np.full(n, value, dtype=np.float32), (n,), None))

    dim = shape.dim
    mat("token_embd.weight", embd_type, shape.vocab, dim, 0.02)
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        more = more_bits_type if more_bits_type is not None and use_more_bits(i, shape.n_layer) else layer_type
        vec(p + "attn_norm.weight", 1.0, dim)
        mat(p + "attn_q.weight", layer_type, dim, dim, dim ** -0.5)
        mat(p + "attn_k.weight", layer_type, kv_dim, dim, dim ** -0.5)
        mat(p + "attn_v.weight", more, kv_dim, dim, dim ** -0.5)
        if shape.qkv_bias:
            vec(p + "attn_q.bias", 0.0, dim)
            vec(p + "attn_k.bias", 0.0, kv_dim)
            vec(p + "attn_v.bias", 0.0, kv_dim)
        mat(p + "attn_output.weight", layer_type, dim, dim, dim ** -0.5)
        vec(p + "ffn_norm.weight", 1.0, dim)
        mat(p + "ffn_gate.weight", layer_type, shape.ffn, dim, dim ** -0.5)
        mat(p + "ffn_up.weight", layer_type, shape.ffn, dim, dim ** -0.5)
        mat(p + "ffn_down.weight", more, dim, shape.ffn, shape.ffn ** -0.5)
    vec("output_norm.weight", 1.0, dim)
    if not shape.tied_output:
        mat("output.weight", out_type, shape.vocab, dim, dim ** -0.5)
    for name, _, np_shape, qtype in tensors:
        nbytes = int(np.prod(np_shape)) * (1 if qtype is not None else 4)
        dtype = np.dtype(np.uint8) if qtype is not None else np.dtype(np.float32)
        w.add_tensor_info(name, np_shape, dtype, nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, make, _, _ in tensors:
        w.write_tensor_data(make())
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bench", choices=list(SHAPES))
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                    help="default: q4_k q8_0 for the bench shape, q4_k_m q8_0 for the others")
    ap.add_argument("--layers", type=int, help="this many layers of the shape's widths (default: the shape's own)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "models"))
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    if args.layers is not None:
        if args.layers < 1:
            ap.error("--layers must be at least 1")
        shape = replace(shape, n_layer=args.layers)
    variants = args.variants or (["q4_k", "q8_0"] if args.shape == "bench" else ["q4_k_m", "q8_0"])
    os.makedirs(args.out_dir, exist_ok=True)
    for variant in variants:
        stem = "bench-llama-2048x16" if args.shape == "bench" else f"bench-{args.shape}"
        suffix = f"-L{args.layers}" if args.layers is not None else ""
        path = os.path.join(args.out_dir, f"{stem}-{variant}{suffix}.gguf")
        write(shape, variant, path)
        print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
