#!/usr/bin/env python3
"""Make tests/fixtures/quant/kv_q8_0_rows.json: f32 KV rows and their q8_0 blocks by gguf-py's quantizer.

gguf-py's Q8_0 quantizer (gguf/quants.py) is llama.cpp's quantize_row_q8_0_ref in numpy: d = amax / 127,
q = round-half-away-from-zero(x / d). A q8_0 KV cache stores each row so (model/forward.cpp via
format/quantize.cpp); tests/unit/kv_cache_q8_0_test.cpp checks the bytes match bitwise.

Run: /work/venv-hf/bin/python tests/reference/make_kv_q8_0_fixture.py   (seconds; deterministic)
Rows (each 256 values = 8 blocks): K/V-like random rows at several magnitudes (typical, tiny, large,
subnormal scales), and hand-made blocks: exact .5 ties after scaling (amax 127, so d = 1), negative ties, an
all-zero block, a single non-zero value, a block whose scale rounds in f16.
File: {"generator", "gguf_version", "numpy_version", "row_values": 256, "values_hex": f32 bit patterns
(little-endian), "blocks_hex": the q8_0 blocks of all rows}.
"""
import json
import os
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "quant", "kv_q8_0_rows.json")
ROW = 256
rng = np.random.default_rng(20261126)

rows = []
for magnitude in (1.0, 3.5, 0.02, 1e-5, 2e-7, 4000.0):
    for _ in range(3):
        rows.append(rng.standard_normal(ROW) * magnitude)
special = np.zeros(ROW)
special[0:32] = np.concatenate([[127.0], np.arange(-15, 16) + 0.5])        # ties, d == 1
special[32:64] = np.concatenate([[-127.0], -(np.arange(31) + 0.5)])        # negative ties
special[64:96] = 0.0                                                        # zero block
special[96:128] = 0.0
special[100] = -0.3                                                         # one value
special[128:160] = np.linspace(-1.0, 1.0, 32) * 0.1234567
special[160:256] = rng.uniform(-1, 1, 96) * 65000.0 / 127.0                 # near the f16 range
rows.append(special)
values = np.stack(rows).astype(np.float32)
blocks = quants.quantize(values, T.Q8_0)

doc = {
    "generator": "tests/reference/make_kv_q8_0_fixture.py (gguf.quants.quantize, Q8_0)",
    "gguf_version": version("gguf"),
    "numpy_version": np.__version__,
    "row_values": ROW,
    "values_hex": values.astype("<f4").tobytes().hex(),
    "blocks_hex": np.ascontiguousarray(blocks).tobytes().hex(),
}
with open(OUT, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"{OUT}: {len(rows)} rows")
