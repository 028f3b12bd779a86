#!/usr/bin/env python3
"""Llama 3.1 "llama3" rope scaling factors as llama.cpp's converter computes them (tests/fixtures/rope/llama3_factors.json).

kvstash computes the `rope_freqs.weight` tensor of a Hugging Face directory at load (src/model/hf_rope_scaling.cpp)
and must write the converter's bytes, so that a directory and the GGUF made of it have one fingerprint. This script
runs the converter's own LlamaModel.generate_extra_tensors (convert_hf_to_gguf.py of the llama-cpp-python 0.3.36
sdist, llamacpp_sdist.py) on a grid of rope parameters -- the real Llama 3.1 / 3.2 shapes, the tiny and long-context
test models, and variations of theta, head_dim, factor and the band -- in a subprocess with the converter's gguf-py,
and records each factor's float32 bits.

torch computes theta ** (2i / dim) with its vectorized float32 pow (SLEEF, within 1 ulp), kvstash the correctly
rounded float32 of the double power; `pow_correctly_rounded` says whether they agree on every frequency of a
config (where they do not, a factor in the smooth band may differ in its last bit and the test allows 2 ulp).

Run: python tests/reference/make_rope_scaling_fixture.py   (any python with torch; ~10 s)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402
import llamacpp_sdist  # noqa: E402

OUT = os.path.join(refutil.FIXTURES, "rope", "llama3_factors.json")

# (name, theta, head_dim, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
CONFIGS = [("llama3.1-8b/70b/405b", 500000.0, 128, 8.0, 1.0, 4.0, 8192),
           ("llama3.2-1b", 500000.0, 64, 32.0, 1.0, 4.0, 8192),
           ("llama3.2-3b", 500000.0, 128, 32.0, 1.0, 4.0, 8192),
           ("hf/llama3_rope_f32", 10000.0, 16, 8.0, 1.0, 4.0, 64),
           ("longctx/llama31_random", 500000.0, 64, 8.0, 1.0, 4.0, 8192)]
for theta in (10000.0, 500000.0, 1000000.0):
    for dim in (64, 96, 128):
        for orig, factor, low, high in ((8192, 8.0, 1.0, 4.0), (4096, 16.0, 1.0, 4.0), (2048, 4.0, 2.0, 8.0)):
            CONFIGS.append((f"grid theta={theta:g} dim={dim} orig={orig}", theta, dim, factor, low, high, orig))

_RUNNER = r"""
import json, math, sys
root = sys.argv[1]
sys.path.insert(0, root + "/gguf-py")
sys.path.insert(0, root)
import numpy as np
import torch
from conversion.llama import LlamaModel
out = []
for name, theta, dim, factor, low, high, orig in json.loads(sys.stdin.read()):
    m = LlamaModel.__new__(LlamaModel)
    m.rope_parameters = {"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": low,
                         "high_freq_factor": high, "original_max_position_embeddings": orig}
    m.hparams = {"head_dim": dim}
    m.format_tensor_name = lambda *a, **k: "rope_freqs.weight"
    ((_, t),) = list(LlamaModel.generate_extra_tensors(m))
    e = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    exact = np.float32(np.float64(np.float32(theta)) ** e.numpy().astype(np.float64))
    rounded = bool(((theta ** e).numpy() == exact).all())
    out.append({"name": name, "rope_theta": theta, "head_dim": dim, "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": orig,
                "pow_correctly_rounded": rounded,
                "factor_bits": [int(b) for b in t.numpy().astype(np.float32).view(np.uint32)]})
print(json.dumps(out))
"""


def main():
    with llamacpp_sdist.Converter() as conv:
        proc = subprocess.run([sys.executable, "-c", _RUNNER, conv.root], input=json.dumps(CONFIGS),
                              capture_output=True, text=True, check=True)
        rows = json.loads(proc.stdout)
        sha = conv.sdist_sha256
    import torch
    refutil.write_json(OUT, {
        "generator": refutil.generator(__file__),
        "versions": {"torch": torch.__version__, "converter_sdist_sha256": sha},
        "method": "conversion.llama.LlamaModel.generate_extra_tensors (llama-cpp-python 0.3.36 sdist) on each rope "
                  "parameter set; factor_bits = the float32 bits of rope_freqs.weight",
        "configs": rows,
    })
    print(f"{len(rows)} configs, {sum(not r['pow_correctly_rounded'] for r in rows)} with a torch pow that is not "
          "correctly rounded", file=sys.stderr)


if __name__ == "__main__":
    main()
