#!/usr/bin/env python3
"""Make tests/fixtures/quant/q4_k_quantize_rows.json: f32 rows and ggml's own q4_K quantization of them.

The reference is ggml itself: quantize_row_q4_K_ref from the libggml-base shared library that
llama-cpp-python ships (the function `llama-quantize` uses for q4_K without an importance matrix), called
through ctypes. `kvstash --quantize q4_K` (format/quantize.cpp quantize_row_q4_K) must give these bytes;
tests/unit/quantize_q4_k_test.cpp checks it bitwise.

Run: /work/venv-bench/bin/python tests/reference/make_q4_k_quantize_fixture.py   (seconds; deterministic)
     (any python with numpy and llama-cpp-python; the library is found next to the llama_cpp package)
Rows (each 512 values = 2 super-blocks of 256): weight-like normal rows at several magnitudes (typical,
tiny, large), uniform and heavy-tailed rows, all-positive and all-negative rows (the min clamps to 0), and
hand-made super-blocks: all zeros, a constant, one non-zero value, a ramp, sub-blocks of very different
scales, values near the f16 range.
File: {"generator", "llama_cpp_python_version", "numpy_version", "row_values": 512, "values_hex": f32 bit
patterns (little-endian), "blocks_hex": the q4_K blocks of all rows (144 bytes per 256 values)}.
"""
import ctypes
import glob
import json
import os
from importlib.metadata import version

import numpy as np
import llama_cpp

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant", "q4_k_quantize_rows.json")
ROW = 512
BLOCK_BYTES = 144  # fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of 4-bit quants per 256 values

lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
lib = ctypes.CDLL(sorted(glob.glob(os.path.join(lib_dir, "libggml-base.so*")))[0])
lib.quantize_row_q4_K_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.quantize_row_q4_K_ref.restype = None

rng = np.random.default_rng(20261127)
rows = []
for magnitude in (0.02, 1.0, 1e-4, 300.0):
    for _ in range(3):
        rows.append(rng.standard_normal(ROW) * magnitude)
rows.append(rng.uniform(-1.0, 1.0, ROW))
rows.append(rng.standard_t(2, ROW) * 0.05)                 # heavy tails: outliers set the scales
rows.append(np.abs(rng.standard_normal(ROW)) + 0.25)       # all positive: min clamps to 0
rows.append(-np.abs(rng.standard_normal(ROW)) - 0.25)      # all negative
special = np.zeros(ROW)
special[256:288] = 0.75                                    # a constant sub-block (max == min)
special[300] = -0.3                                        # one value in a zero sub-block
special[320:352] = np.linspace(-1.0, 1.0, 32)              # a ramp
for j in range(4):                                         # sub-blocks of very different scales
    special[384 + 32 * j:416 + 32 * j] = rng.standard_normal(32) * 10.0 ** (-j)
rows.append(special)
rows.append(rng.uniform(-1.0, 1.0, ROW) * 60000.0)         # near the f16 range
values = np.ascontiguousarray(np.stack(rows).astype(np.float32))

blocks = np.zeros(len(rows) * ROW // 256 * BLOCK_BYTES, dtype=np.uint8)
lib.quantize_row_q4_K_ref(values.ctypes.data, blocks.ctypes.data, values.size)

doc = {
    "generator": "tests/reference/make_q4_k_quantize_fixture.py (ggml quantize_row_q4_K_ref via ctypes)",
    "llama_cpp_python_version": version("llama_cpp_python"),
    "numpy_version": np.__version__,
    "row_values": ROW,
    "values_hex": values.astype("<f4").tobytes().hex(),
    "blocks_hex": blocks.tobytes().hex(),
}
with open(OUT, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"{OUT}: {len(rows)} rows")
