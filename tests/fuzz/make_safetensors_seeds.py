#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors (tests/fuzz/corpus/safetensors/): small valid safetensors files
covering every dtype kvstash reads, empty and zero-size tensors, __metadata__, header padding, and one real
tensor layout as transformers writes it. Standard library only (the format is 8 bytes + JSON + data).

Run: python3 tests/fuzz/make_safetensors_seeds.py [out_dir]
"""
import json
import os
import struct
import sys


def safetensors(tensors, metadata=None, pad=0):
    """tensors: list of (name, dtype, shape, bytes). Returns the file's bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "corpus", "safetensors")
    os.makedirs(out, exist_ok=True)
    f32 = struct.pack("<6f", 0.5, -1.0, 2.0, 3.5, -0.25, 1e-3)
    seeds = {
        "empty.safetensors": safetensors([]),
        "metadata_only.safetensors": safetensors([], {"format": "pt"}),
        "f32_matrix.safetensors": safetensors([("model.embed_tokens.weight", "F32", [2, 3], f32)], {"format": "pt"}),
        "all_dtypes.safetensors": safetensors([
            ("a", "F32", [2], f32[:8]), ("b", "F16", [3], b"\x00\x3c\x00\xc0\x00\x38"),
            ("c", "BF16", [1, 2], b"\x80\x3f\x00\x40"), ("scalar", "F32", [], f32[:4])]),
        "zero_size.safetensors": safetensors([("z", "F32", [0, 4], b""), ("y", "F16", [1], b"\x00\x3c")]),
        "padded_header.safetensors": safetensors([("w", "BF16", [2, 2], b"\x80\x3f" * 4)], pad=7),
        "unsupported_dtype.safetensors": safetensors([("q", "I8", [4], b"\x01\x02\x03\x04")]),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main()
