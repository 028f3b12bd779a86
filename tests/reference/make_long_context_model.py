#!/usr/bin/env python3
"""The random long-context model (tests/fixtures/longctx/): Llama 3.1's shape shrunk, with llama.cpp's logits far out.

Writes
  tests/fixtures/longctx/llama31_random.gguf  -- a random-weight LlamaForCausalLM saved by transformers and converted by
                                                 llama.cpp's convert_hf_to_gguf.py --outtype f16 (so llama.cpp reads
                                                 it too): 2 layers, n_embd 128, 2 query heads sharing 1 KV head
                                                 (GQA), head_dim 64, FFN 384, the 320-id byte
                                                 BPE vocabulary of the other test models, context_length 131072,
                                                 Llama 3.1's rope (theta 500000, "llama3" scaling: factor 8, low 1,
                                                 high 4, original_max_position_embeddings 8192 -> rope_freqs.weight)
  tests/fixtures/longctx/llama31_random.json  -- llama.cpp's logits (llama-cpp-python 0.3.36, F32 KV cache, flash
                                                 attention off, 2 threads, n_batch 512) of one context fed the
                                                 32,768 pseudo-random tokens below, at POSITIONS (past 8192: the
                                                 scaled frequencies matter)

Size: attention dominates a long prefill (per row, per layer: query heads x head_dim x the keys), so the model is as
narrow as Llama 3.1's head shape allows -- a 32K prefill then costs about a minute of one core's CPU time, cheap
enough that tests/parity/long_context_test.cpp runs one in CI; the GGUF is ~1.3 MB (f16).

Method: make_hf_checkpoints.save_dir (torch.manual_seed, make_transformer_models.redraw, save_pretrained f32, the
llama-bpe tokenizer), converted with llamacpp_sdist.py; tokens = numpy default_rng(SEED).integers(1, 320, N_TOKENS).
The llama.cpp side runs in the llama-cpp-python venv (--llamacpp-python) on the GGUF as written.

Run: python tests/reference/make_long_context_model.py --llamacpp-python /work/venv-bench/bin/python
     (~1 min for the model; the llama.cpp 32K run a few minutes on 2 cores). --model-only skips llama.cpp.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402
import llamacpp_sdist  # noqa: E402
from make_hf_checkpoints import LLAMA3_REGEX, VOCAB, save_dir  # noqa: E402
from make_recurrent_models import train_tokenizer  # noqa: E402

OUT = os.path.join(refutil.FIXTURES, "longctx")
NAME = "llama31_random"
SEED = 1531
N_TOKENS = 32768
POSITIONS = [0, 1000, 8191, 8192, 12000, 16383, 24000, 32767]


def config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=131072,
                       rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192},
                       tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)


def tokens():
    return [int(t) for t in np.random.default_rng(SEED).integers(1, VOCAB, N_TOKENS)]


_ORACLE = r"""
import json, sys
import llama_cpp
import numpy as np
req = json.load(open(sys.argv[1]))
llm = llama_cpp.Llama(model_path=req["model"], logits_all=True, n_ctx=len(req["tokens"]), n_batch=512, n_ubatch=512,
                      n_threads=2, n_threads_batch=2, verbose=False, seed=0, flash_attn=False,
                      type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
llm.eval(req["tokens"])
rows = np.array([llm.scores[p] for p in req["positions"]], dtype=np.float32)
np.save(sys.argv[2], rows)
print(llama_cpp.__version__)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamacpp-python", default=os.environ.get("KVSTASH_LLAMACPP_PYTHON"))
    ap.add_argument("--model-only", action="store_true")
    args = ap.parse_args()
    if not args.model_only and not args.llamacpp_python:
        ap.error("--llamacpp-python (or KVSTASH_LLAMACPP_PYTHON) is required unless --model-only")
    os.makedirs(OUT, exist_ok=True)
    gguf_path = os.path.join(OUT, NAME + ".gguf")
    v = dict(name=NAME, make_config=config, cls="LlamaForCausalLM", dtype="f32", pre="llama-bpe",
             regex=LLAMA3_REGEX, seed=SEED, shard=None)
    with tempfile.TemporaryDirectory(prefix="kvstash_longctx_") as tmp:
        model_dir = os.path.join(tmp, NAME)
        save_dir(v, train_tokenizer(), model_dir)
        with llamacpp_sdist.Converter() as conv:
            conv.convert(model_dir, gguf_path, "f16", pre_tokenizer="llama-bpe")
    print(f"{gguf_path}: {os.path.getsize(gguf_path)} bytes", file=sys.stderr)
    if args.model_only:
        return
    toks = tokens()
    with tempfile.TemporaryDirectory(prefix="kvstash_longctx_oracle_") as tmp:
        req = os.path.join(tmp, "req.json")
        with open(req, "w") as f:
            json.dump({"model": gguf_path, "tokens": toks, "positions": POSITIONS}, f)
        out = os.path.join(tmp, "rows.npy")
        proc = subprocess.run([args.llamacpp_python, "-c", _ORACLE, req, out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"llama.cpp oracle failed:\n{proc.stdout}\n{proc.stderr}")
        rows = np.load(out)
        llamacpp_version = proc.stdout.strip().splitlines()[-1]
    refutil.write_json(os.path.join(OUT, NAME + ".json"), {
        "generator": refutil.generator(__file__),
        "versions": {**refutil.versions(), "llama_cpp_python": llamacpp_version},
        "method": "llama-cpp-python Llama(n_ctx=N, n_batch=512, flash_attn=False, F32 KV, 2 threads, logits_all) "
                  "eval(tokens) once; logits rows at `positions`",
        "tokens_generator": f"numpy.random.default_rng({SEED}).integers(1, {VOCAB}, {N_TOKENS})",
        "tokens": toks,
        "positions": POSITIONS,
        "logits": refutil.f32_rows(rows),
    })


if __name__ == "__main__":
    main()
