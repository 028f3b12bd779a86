#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) with an adapter: every position's logits of one eval.

Run by make_adapters.py with the Python of a venv that has llama-cpp-python==0.3.36 (and numpy).

  python llamacpp_adapter_oracle.py REQUEST.json OUT.npz
REQUEST: {"model": path, "tokens": [ids],
          "lora": path or null, "lora_scale": float,            -- Llama(lora_path=, lora_scale=)
          "cvec": [[layer, [n_embd floats]], ...] or null,      -- already multiplied by its scale
          "cvec_range": [start, end]}                           -- llama_set_adapter_cvec's il_start, il_end
The control vector goes through the low-level llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end)
with data = the n_embd floats of layers 1 .. n_layer-1 (zeros where the request has none), as llama.cpp's
common_control_vector_load builds it. KV cache F32.
OUT.npz: logits (len(tokens) x n_vocab, float32), version.
"""
import ctypes
import json
import sys

import llama_cpp
import numpy as np


def main() -> None:
    with open(sys.argv[1]) as f:
        req = json.load(f)
    tokens = req["tokens"]
    n_ctx = 64 * ((len(tokens) + 63) // 64)
    kwargs = {}
    if req.get("lora"):
        kwargs = dict(lora_path=req["lora"], lora_scale=float(req.get("lora_scale", 1.0)))
    llm = llama_cpp.Llama(model_path=req["model"], logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                          n_threads=2, n_threads_batch=2, verbose=False, seed=0,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, **kwargs)
    if req.get("cvec"):
        n_embd = llm.n_embd()
        n_layer = llama_cpp.llama_model_n_layer(llm.model)
        data = np.zeros((n_layer - 1) * n_embd, dtype=np.float32)
        for layer, vec in req["cvec"]:
            data[(layer - 1) * n_embd:layer * n_embd] = np.asarray(vec, dtype=np.float32)
        buf = (ctypes.c_float * data.size)(*data.tolist())
        start, end = req["cvec_range"]
        rc = llama_cpp.llama_set_adapter_cvec(llm.ctx, buf, data.size, n_embd, start, end)
        assert rc == 0, rc
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    np.savez(sys.argv[2], logits=logits, version=np.array(llama_cpp.__version__))


if __name__ == "__main__":
    main()
