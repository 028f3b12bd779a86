#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) as a second oracle: every position's logits and a greedy loop.

Run by make_recurrent_models.py with the Python of a venv that has llama-cpp-python==0.3.36 (and numpy);
it needs nothing else, so it runs in a different venv from the transformers side.

  python llamacpp_oracle.py REQUEST.json OUT.npz
REQUEST: {"model": path, "tokens": [ids], "prompt": [ids], "n_gen": int}
The attention KV cache is F32 (llama.cpp's default F16 would round K and V).
OUT.npz: logits (len(tokens) x n_vocab, float32) from one eval of all tokens with logits_all=True;
         continuation (n_gen ids): a fresh context evals the prompt, then repeatedly takes the argmax of the
         last logits row (lowest id on ties) and evals that one token; version (llama_cpp.__version__).
"""
import json
import sys

import llama_cpp
import numpy as np


def load(path: str, n_ctx: int) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                           n_threads=2, n_threads_batch=2, verbose=False, seed=0,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)


def main() -> None:
    with open(sys.argv[1]) as f:
        req = json.load(f)
    tokens, prompt, n_gen = req["tokens"], req["prompt"], int(req["n_gen"])
    n_ctx = 64 * ((max(len(tokens), len(prompt) + n_gen) + 63) // 64)

    llm = load(req["model"], n_ctx)
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    del llm

    llm = load(req["model"], n_ctx)
    llm.eval(prompt)
    continuation = []
    for _ in range(n_gen):
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        tok = int(np.argmax(row))  # first maximum = lowest id on ties
        continuation.append(tok)
        llm.eval([tok])
    del llm
    np.savez(sys.argv[2], logits=logits, continuation=np.array(continuation, dtype=np.int64),
             version=np.array(llama_cpp.__version__))


if __name__ == "__main__":
    main()
