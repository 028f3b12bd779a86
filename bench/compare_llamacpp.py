#!/usr/bin/env python3
"""kvstash vs llama.cpp on the same GGUF, same machine, same thread count, measured alternately.

For each model, `--rounds` rounds; each round runs, one after the other,
  * kvstash:   build-speed/bench/kvstash_bench -m MODEL -t T -p P -n N -r R   (a fresh process), and
  * llama.cpp: this script in worker mode (a fresh process) through llama-cpp-python's low-level API,
so that load from other processes on a shared machine hits both sides alike. Both sides do the same work per
repeat: a fresh sequence, a P-token random prompt in one batch (llama.cpp: n_batch = n_ubatch = 512, logits of the
last token only), then N single-token decode steps feeding back the argmax, f16 KV cache (recurrent
layers: f32 state, no copies of it kept on either side), one warm-up repeat first. The medians over all
repeats of all rounds, and the ratios kvstash / llama.cpp (> 1 means kvstash is faster; for time to first
token and CPU ms per token < 1 is better), are printed as JSON.

Run with the venv that has llama-cpp-python (built from source, GGML_NATIVE=ON):
  /work/venv-bench/bin/python bench/compare_llamacpp.py -t 2 \
      -m models/SmolLM2-135M-Instruct.Q4_1.gguf -m models/bench-llama-2048x16-q4_k.gguf
On a virtual machine whose CPU reports AMX but does not run it (a virtualised Xeon can be one: llama.cpp's AMX tiles die
with SIGILL on the first prompt of 512 tokens, even after the process is granted the tile state), build it with
the instruction sets named instead of native:
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
      pip install --no-binary :all: llama-cpp-python==0.3.36
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Per repeat. *_cpu_ms_per_token: CPU time of all the process's threads per token (spin-waits included);
# with one thread it is the work itself, insensitive to other processes taking the cores.
METRICS = ("prefill_tok_s", "decode_tok_s", "ttft_s", "prefill_cpu_ms_per_token", "decode_cpu_ms_per_token")


def llama_worker(model_path, threads, n_prompt, n_decode, repeats, seed, flash_attn):
    """Runs in its own process: prints {"prefill_tok_s": [...], "decode_tok_s": [...], "ttft_s": [...]}."""
    import llama_cpp as L
    import numpy as np

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        raise SystemExit(f"llama.cpp could not load {model_path}")
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_prompt + n_decode + 16
    cparams.n_batch = 512
    cparams.n_ubatch = 512
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.flash_attn_type = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                               "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, n_vocab, size=n_prompt).tolist()
    batch = L.llama_batch_init(max(512, n_prompt), 0, 1)

    def submit(tokens, first_pos):
        """Decodes `tokens` at positions first_pos.. in chunks of n_batch; returns argmax of the last logits."""
        for start in range(0, len(tokens), 512):
            chunk = tokens[start:start + 512]
            batch.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = first_pos + start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if start + i == len(tokens) - 1 else 0
            if L.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    def once(n_dec):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        t0, c0 = time.perf_counter(), time.process_time()
        nxt = submit(prompt, 0)
        ttft = time.perf_counter() - t0
        prefill_cpu = (time.process_time() - c0) * 1e3 / n_prompt
        prefill = n_prompt / ttft
        t1, c1 = time.perf_counter(), time.process_time()
        for i in range(n_dec):
            nxt = submit([nxt], n_prompt + i)
        decode = n_dec / (time.perf_counter() - t1) if n_dec else 0.0
        decode_cpu = (time.process_time() - c1) * 1e3 / max(n_dec, 1)
        return prefill, decode, ttft, prefill_cpu, decode_cpu

    once(min(n_decode, 8))  # warm-up
    out = {k: [] for k in METRICS}
    for _ in range(repeats):
        for key, value in zip(METRICS, once(n_decode)):
            out[key].append(value)
    out["system_info"] = L.llama_print_system_info().decode()
    out["llama_cpp_python"] = L.__version__
    print(json.dumps(out))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


def run_json(cmd):
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def cpu_busy(seconds=1.0):
    """Fraction of all cores busy (other processes: this script sleeps meanwhile) over `seconds`."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total
    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_until_quiet(threshold, max_wait):
    """On a shared machine: waits (up to max_wait s) until other processes use less than `threshold` of
    the cores; returns the busy fraction seen last (recorded with each measurement)."""
    deadline = time.time() + max_wait
    busy = cpu_busy()
    while busy > threshold and time.time() < deadline:
        time.sleep(4)
        busy = cpu_busy()
    return busy


def compare(model, args):
    ks = {k: [] for k in METRICS}
    lc = {k: [] for k in METRICS}
    kinfo = linfo = None
    busy = {"kvstash": [], "llama.cpp": []}
    for rnd in range(args.rounds):
        sides = ["kvstash", "llama.cpp"] if rnd % 2 == 0 else ["llama.cpp", "kvstash"]
        for side in sides:
            busy[side].append(round(wait_until_quiet(args.quiet, args.quiet_wait), 3))
            if side == "kvstash":
                j = run_json([args.bench, "-m", model, "-t", str(args.threads), "-p", str(args.prompt),
                              "-n", str(args.decode), "-r", str(args.repeats)])
                kinfo = j
                for key in ks:
                    ks[key] += j[key]["runs"]
                if j.get("deterministic") is False:
                    raise SystemExit("kvstash_bench: logits differed between repeats")
            else:
                j = run_json([sys.executable, os.path.abspath(__file__), "--worker", "-m", model,
                              "-t", str(args.threads), "-p", str(args.prompt), "-n", str(args.decode),
                              "-r", str(args.repeats), "--flash-attn", args.flash_attn])
                linfo = j
                for key in lc:
                    lc[key] += j[key]
        print(f"  round {rnd + 1}/{args.rounds}: kvstash decode {statistics.median(ks['decode_tok_s']):.1f}, "
              f"llama.cpp decode {statistics.median(lc['decode_tok_s']):.1f} tok/s", file=sys.stderr)

    def stats(v):
        return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}

    result = {"model": model, "threads": args.threads, "prompt_tokens": args.prompt, "decode_tokens": args.decode,
              "weight_bytes": kinfo["weight_bytes"], "kvstash_isa": kinfo["isa"],
              "llama_cpp_system_info": linfo["system_info"], "llama_cpp_python": linfo["llama_cpp_python"],
              "other_load_before_each_run": busy,
              "kvstash": {k: stats(v) for k, v in ks.items()},
              "llama.cpp": {k: stats(v) for k, v in lc.items()}}
    for key in ("architecture", "n_layer", "n_recurrent_layers", "recurrent_state_bytes"):
        if key in kinfo:
            result[key] = kinfo[key]
    result["ratio_kvstash_over_llamacpp"] = {
        k: result["kvstash"][k]["median"] / result["llama.cpp"][k]["median"] for k in ks}
    result["decode_weight_gb_s"] = {
        side: kinfo["weight_bytes"] * result[side]["decode_tok_s"]["median"] / 1e9 for side in ("kvstash", "llama.cpp")}
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF model (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--prompt", type=int, default=512)
    ap.add_argument("-n", "--decode", type=int, default=128)
    ap.add_argument("-r", "--repeats", type=int, default=2, help="measured repeats per process")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per model")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--quiet", type=float, default=0.15,
                    help="wait before each run until other processes use less than this fraction of the cores")
    ap.add_argument("--quiet-wait", type=float, default=60, help="longest wait for a quiet machine (s)")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-speed", "bench", "kvstash_bench"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--flash-attn", choices=("on", "off", "auto"), default="on",
                    help="llama.cpp's flash attention (its fastest CPU attention at long context)")
    args = ap.parse_args()
    models = args.model or [os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")]
    if args.worker:
        llama_worker(models[0], args.threads, args.prompt, args.decode, args.repeats, args.seed, args.flash_attn)
        return
    results = []
    for model in models:
        print(f"{os.path.basename(model)}:", file=sys.stderr)
        results.append(compare(model, args))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
