#!/usr/bin/env python3
"""Make tests/fixtures/quant/<type>.json: raw GGUF blocks and their dequantization by gguf-py.

gguf-py (the reference implementation that llama.cpp ships in gguf-py/gguf/quants.py) is independent
of kvstash; tests/unit/tensor_type_test.cpp checks that kvstash's dequantize_row reproduces it bitwise.

Run: /work/venv-ref/bin/python tests/reference/make_quant_fixtures.py
Deterministic (fixed seed). How the blocks are made, per type:
  f32, f16, bf16       random values plus special ones (+-0, +-inf, NaN, subnormals, extremes).
  q4_0, q4_1, q8_0     half quantized from random floats by gguf.quants.quantize, half random bytes with
                       a chosen fp16 scale (any nibble/int8 pattern is valid).
  q4_K, q5_K, q6_K     gguf-py cannot quantize K-quants, so blocks are random bytes (every bit pattern of
                       the quants and packed 6-bit / int8 scales is valid) with d and dmin overwritten by
                       finite fp16 values (random, negative, zero, subnormal).
Each file: {"type", "ggml_type", "block_size", "type_size", "generator", "gguf_version",
            "blocks_hex": raw bytes of all blocks, "expected_f32_hex": little-endian f32 bit patterns}.
"""
import json
import os
import sys
from importlib.metadata import version

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant")
rng = np.random.default_rng(20240611)

# Scales exercised for the 32-element types and K-quants: typical, negative, zero, subnormal, large.
SPECIAL_SCALES = np.array([0.0125, -0.0071, 0.0, 3.0e-6, 6.0e-8, -2.5, 100.0], dtype=np.float16)


def fp16_bytes(values):
    return np.ascontiguousarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def scale_values(n):
    """n fp16 scales: the special ones first, then random magnitudes over several decades."""
    random = (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 0, n)).astype(np.float16)
    out = np.concatenate([SPECIAL_SCALES, random])[:n]
    return out


def plain_values(qtype):
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 65504.0, -65504.0, 6.1035156e-05,
                        5.9604645e-08, -2.9802322e-08, 1e-40, 3.4028235e38, 1.17549435e-38], dtype=np.float32)
    random = (rng.standard_normal(241) * 10.0 ** rng.uniform(-6, 4, 241)).astype(np.float32)
    values = np.concatenate([special, random])
    if qtype == T.F32:
        return values.view(np.uint8)
    if qtype == T.F16:
        with np.errstate(over="ignore"):
            raw = values.astype(np.float16).view(np.uint16)
        # Raw patterns: signalling and payload NaNs, the smallest and largest subnormals.
        raw = np.concatenate([raw, np.array([0x7C01, 0xFE01, 0x7DFF, 0x0001, 0x03FF, 0x8001, 0x83FF, 0x0400],
                                            dtype=np.uint16)])
        return raw.view(np.uint8)
    # bf16: gguf-py's own rounding, plus a few raw patterns (a NaN payload, the smallest subnormal).
    raw = quants.quantize(values, T.BF16).view(np.uint16)
    raw = np.concatenate([raw, np.array([0x7FC1, 0xFF81, 0x0001, 0x8001, 0x7F7F], dtype=np.uint16)])
    return raw.view(np.uint8)


def legacy_blocks(qtype, n_blocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    half = n_blocks // 2
    data = (rng.standard_normal((half, block_size)) * 10.0 ** rng.uniform(-3, 1, (half, 1))).astype(np.float32)
    quantized = quants.quantize(data, qtype).reshape(half, type_size)
    raw = rng.integers(0, 256, (n_blocks - half, type_size), dtype=np.uint8)
    scales = scale_values(n_blocks - half)
    raw[:, 0:2] = fp16_bytes(scales)
    if qtype == T.Q4_1:
        raw[:, 2:4] = fp16_bytes(scale_values(n_blocks - half)[::-1] * np.float16(-3))
    return np.concatenate([quantized, raw]).reshape(-1)


def k_blocks(qtype, n_blocks):
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    d = scale_values(n_blocks)
    if qtype == T.Q6_K:
        raw[:, 208:210] = fp16_bytes(d)  # d is the last field of block_q6_K
    else:
        raw[:, 0:2] = fp16_bytes(d)
        raw[:, 2:4] = fp16_bytes(scale_values(n_blocks)[::-1])  # dmin
    return raw.reshape(-1)


def write(qtype, raw):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    expected = quants.dequantize(raw, qtype)
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    assert expected.size == raw.size // type_size * block_size
    doc = {
        "type": qtype.name.lower(),
        "ggml_type": int(qtype),
        "block_size": block_size,
        "type_size": type_size,
        "generator": "tests/reference/make_quant_fixtures.py (gguf.quants.dequantize)",
        "gguf_version": version("gguf"),
        "numpy_version": np.__version__,
        "blocks_hex": raw.tobytes().hex(),
        "expected_f32_hex": expected.astype("<f4").tobytes().hex(),
    }
    path = os.path.join(OUT, f"{qtype.name.lower()}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{path}: {raw.size // type_size} blocks, {expected.size} values", file=sys.stderr)


def main():
    os.makedirs(OUT, exist_ok=True)
    for qtype in (T.F32, T.F16, T.BF16):
        write(qtype, plain_values(qtype))
    for qtype in (T.Q4_0, T.Q4_1, T.Q8_0):
        write(qtype, legacy_blocks(qtype, 24))
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        write(qtype, k_blocks(qtype, 10))


if __name__ == "__main__":
    main()
