#!/usr/bin/env python3
"""llama.cpp's accuracy with a q8_0 KV cache, for comparison with `kvstash perplexity --kv-type q8_0 --kl-vs-f16`
(docs/benchmarks-history.md, "q8_0 KV cache").

For each model: the text tokenized as kvstash does (BOS first), cut into chunks of --ctx tokens, each chunk
evaluated from an empty cache with llama.cpp's f16 KV cache and with its q8_0 one (type_k = type_v =
GGML_TYPE_Q8_0; flash attention on, which llama.cpp needs for a quantized V cache), every position's
logits kept. Scored as kvstash scores: positions ctx/2 .. ctx-1 of each chunk, from the logits one before.
Prints the perplexity of each cache type and the mean KL(p_f16 || p_q8_0) in nats over the scored positions.

Run: /work/venv-bench/bin/python bench/kv_q8_0_llamacpp_ppl.py -m MODEL.gguf [-m ...] [-f TEXT] [--ctx 512] [-t 2]
"""
import argparse

import llama_cpp
import numpy as np


def log_softmax(logits):
    m = logits.max(axis=1, keepdims=True)
    return logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))


def run(model, text, ctx, threads):
    vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    tokens = vocab.tokenize(text.encode(), add_bos=True, special=False)
    del vocab
    n_chunks = len(tokens) // ctx
    first = ctx // 2
    logp = {}
    for name, kv in (("f16", llama_cpp.GGML_TYPE_F16), ("q8_0", llama_cpp.GGML_TYPE_Q8_0)):
        llm = llama_cpp.Llama(model_path=model, logits_all=True, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx,
                              n_threads=threads, n_threads_batch=threads, flash_attn=True, type_k=kv, type_v=kv,
                              verbose=False, seed=0)
        rows = []
        for c in range(n_chunks):
            chunk = tokens[c * ctx:(c + 1) * ctx]
            llm.reset()
            llm.eval(chunk)
            logits = np.asarray(llm.scores[:ctx], dtype=np.float64)
            lp = log_softmax(logits[first - 1:ctx - 1])  # predicts positions first .. ctx-1
            rows.append((lp, np.array(chunk[first:ctx])))
        logp[name] = rows
        del llm
    out = {}
    for name in ("f16", "q8_0"):
        nll = [-lp[np.arange(len(t)), t] for lp, t in logp[name]]
        out[name] = float(np.exp(np.concatenate(nll).mean()))
    kl = [(np.exp(a) * (a - b)).sum(axis=1) for (a, _), (b, _) in zip(logp["f16"], logp["q8_0"])]
    out["kl"] = float(np.concatenate(kl).mean())
    print(f"{model}: {n_chunks} chunks of {ctx}, llama.cpp {llama_cpp.__version__}: ppl f16 {out['f16']:.4f}, "
          f"q8_0 {out['q8_0']:.4f}, mean KL(f16 || q8_0) {out['kl']:.6g} nats", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("-f", "--file", default="tests/fixtures/text/persuasion_ch1-2.txt")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("-t", "--threads", type=int, default=1)
    a = ap.parse_args()
    text = open(a.file, encoding="utf-8").read()
    for m in a.model:
        run(m, text, a.ctx, a.threads)


if __name__ == "__main__":
    main()
