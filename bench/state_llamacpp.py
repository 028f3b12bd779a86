#!/usr/bin/env python3
"""Saved states in llama.cpp, measured like kvstash_state_bench (issue 4), and the side-by-side table.

  run     llama.cpp through llama-cpp-python's low-level API (one process), JSON on stdout:
            /work/venv-bench/bin/python bench/state_llamacpp.py run -m MODEL -t 2 --tokens TOKENS.txt \
                --sizes 512,2048,8184 --suffix 8 -r 3 --dir build-sb/state-bench
  report  merges the JSON of several kvstash_state_bench and `run` processes (medians over all their
          runs) and prints the markdown tables:
            python3 bench/state_llamacpp.py report --kvstash K1.json K2.json --llama L1.json L2.json
  --throughput-only (run and report): only save / load throughput, the part bench/run_state_bench.sh runs
          with THROUGHPUT_ONLY=1.

TOKENS.txt holds the token ids kvstash made of the text (`kvstash_state_bench --dump-tokens`), so both
engines process identical tokens: prefix = ids[0:N], suffix = ids[N:N+suffix].

llama.cpp side, per prefix length N, in one context (n_ctx = --ctx, n_batch = n_ubatch = 512, f16 K/V,
flash attention left at its default (auto), n_seq_max = 2 with a unified KV cache so that a sequence
can be copied; the KV buffer is allocated and zeroed once, when the context is created):
  full     llama_memory_clear (not timed), then decode(prefix + suffix) in 512-token batches, logits of
           the last token only, sample;
  restore  llama_memory_clear (not timed), llama_state_seq_load_file(seq 0) + decode(suffix at N..) +
           sample; warm page cache, and cold (the file's pages dropped with posix_fadvise DONTNEED,
           checked with mincore);
  fork     llama_memory_seq_cp(0 -> 1) of the prefilled prefix + decode(suffix, seq 1) + sample
           (llama.cpp's in-memory fork: the cells are shared, tagged with both sequence ids);
  save     llama_state_seq_save_file(seq 0, prefix tokens); llama.cpp does not fsync, so the time of an
           fsync of the file afterwards is reported too (kvstash's save includes fsync of file and dir).
Sampler: llama.cpp's chain top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, dist(seed 42) — the same
parameters as kvstash's defaults (token choice may differ: different RNGs).
"""
import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import statistics
import sys
import time


def resident_fraction(path):
    """Fraction of the file's pages in the page cache (mincore on a fresh mapping; mapping faults nothing in)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = os.path.getsize(path)
    n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * n)()
    fd = os.open(path, os.O_RDONLY)
    try:
        p = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if p is None or p == ctypes.c_void_p(-1).value:
        return -1.0
    try:
        return sum(v & 1 for v in vec) / n if libc.mincore(p, size, vec) == 0 else -1.0
    finally:
        libc.munmap(p, size)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_fraction(path)


def summary(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def run(args):
    import llama_cpp as L
    import numpy as np

    with open(args.tokens) as f:
        ids = [int(x) for x in f.read().split()]
    sizes = [int(s) for s in args.sizes.split(",")]
    os.makedirs(args.dir, exist_ok=True)

    global _quiet_log  # keep the callback alive
    _quiet_log = L.llama_log_callback(lambda level, text, user_data: None)
    L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(args.model.encode(), mparams)
    if not model:
        raise SystemExit(f"llama.cpp could not load {args.model}")
    cparams = L.llama_context_default_params()
    cparams.n_ctx = args.ctx
    cparams.n_batch = 512
    cparams.n_ubatch = 512
    cparams.n_seq_max = 2
    cparams.kv_unified = True
    cparams.n_threads = args.threads
    cparams.n_threads_batch = args.threads
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    batch = L.llama_batch_init(512, 0, 1)

    def decode(tokens, first_pos, seq):
        for start in range(0, len(tokens), 512):
            chunk = tokens[start:start + 512]
            batch.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = first_pos + start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = 1 if start + i == len(tokens) - 1 else 0
            if L.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")

    def logits():
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

    def sample():
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(40))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(0.95, 1))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(0.05, 1))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(0.8))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(42))
        tok = L.llama_sampler_sample(chain, ctx, -1)
        L.llama_sampler_free(chain)
        return tok

    def load(path, n):
        toks = (L.llama_token * (n + 16))()
        n_out = ctypes.c_size_t(0)
        got = L.llama_state_seq_load_file(ctx, path.encode(), 0, toks, n + 16, ctypes.byref(n_out))
        if got == 0 or n_out.value != n:
            raise SystemExit(f"llama_state_seq_load_file failed on {path}")

    # Warm-up: weights paged in, threads started.
    L.llama_memory_clear(mem, True)
    decode(ids[:64], 0, 0)
    sample()

    out = {"engine": "llama.cpp", "llama_cpp_python": L.__version__, "system_info": L.llama_print_system_info().decode(),
           "threads": args.threads, "ctx": L.llama_n_ctx(ctx), "suffix_tokens": args.suffix,
           "api": "llama_state_seq_save_file / llama_state_seq_load_file (low-level)", "sizes": []}
    if args.throughput_only:
        out["mode"] = "throughput"
        for n in sizes:
            out["sizes"].append(throughput_size(L, ctx, mem, ids, n, args, decode, load))
        print(json.dumps(out, indent=2))
        return
    for n in sizes:
        print(f"llama.cpp: prefix {n} tokens...", file=sys.stderr)
        prefix, suffix = ids[:n], ids[n:n + args.suffix]
        path = os.path.join(args.dir, f"llama_prefix_{n}.seq")
        L.llama_memory_clear(mem, True)
        t = time.perf_counter()
        decode(prefix, 0, 0)
        prefill_s = time.perf_counter() - t
        prefix_argmax = int(np.argmax(logits()))
        tok_arr = (L.llama_token * n)(*prefix)
        save_s, save_fsync_s = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            written = L.llama_state_seq_save_file(ctx, path.encode(), 0, tok_arr, n)
            t1 = time.perf_counter()
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            t2 = time.perf_counter()
            if written == 0:
                raise SystemExit("llama_state_seq_save_file failed")
            save_s.append(t1 - t)
            save_fsync_s.append(t2 - t)
        file_bytes = os.path.getsize(path)

        full_s, restore_s, restore_load_s, cold_s, cold_load_s, fork_s, resident = [], [], [], [], [], [], []
        tokens_seen, same = {}, {}
        ref = None
        full_repeats = max(1, args.full_repeats_long) if (n > 4096 and args.full_repeats_long >= 0) else args.repeats
        for rep in range(args.repeats):
            # full recompute
            if rep < full_repeats:
                L.llama_memory_clear(mem, True)
                t = time.perf_counter()
                decode(prefix + suffix, 0, 0)
                tok = sample()
                full_s.append(time.perf_counter() - t)
                if rep == 0:
                    ref = logits()
                    tokens_seen["full"] = tok
            # restore, warm and cold
            for cold in (False, True):
                L.llama_memory_clear(mem, True)
                if cold:
                    resident.append(evict(path))
                t = time.perf_counter()
                load(path, n)
                t_load = time.perf_counter() - t
                decode(suffix, n, 0)
                tok = sample()
                total = time.perf_counter() - t
                (cold_s if cold else restore_s).append(total)
                (cold_load_s if cold else restore_load_s).append(t_load)
                if rep == 0:
                    key = "restore_cold" if cold else "restore"
                    tokens_seen[key] = tok
                    same[key] = bool(np.array_equal(logits(), ref))
            # fork: seq 0 back to the prefix, copied to seq 1
            L.llama_memory_seq_rm(mem, 0, n, -1)
            t = time.perf_counter()
            L.llama_memory_seq_cp(mem, 0, 1, -1, -1)
            decode(suffix, n, 1)
            tok = sample()
            fork_s.append(time.perf_counter() - t)
            if rep == 0:
                tokens_seen["fork"] = tok
                same["fork"] = bool(np.array_equal(logits(), ref))
            L.llama_memory_seq_rm(mem, 1, -1, -1)
        load_s = []
        for _ in range(args.repeats):
            L.llama_memory_clear(mem, True)
            t = time.perf_counter()
            load(path, n)
            load_s.append(time.perf_counter() - t)
        out["sizes"].append({
            "prefix_tokens": n, "prefill_s": prefill_s, "prefix_argmax": prefix_argmax, "file_bytes": file_bytes,
            "bytes_per_token": file_bytes / n,
            "ttft_s": {"full": summary(full_s), "restore_in_process": summary(restore_s),
                       "restore_cold": summary(cold_s), "fork": summary(fork_s)},
            "restore_load_only_s": {"in_process": summary(restore_load_s), "cold": summary(cold_load_s)},
            "cold_resident_fraction_before_load": resident,
            "save_s": summary(save_s), "save_fsync_s": summary(save_fsync_s), "load_s": summary(load_s),
            "first_tokens": tokens_seen, "logits_bitwise_equal_to_full": same})
        os.remove(path)
    print(json.dumps(out, indent=2))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


def throughput_size(L, ctx, mem, ids, n, args, decode, load):
    """--throughput-only: save / load times of one prefix. The prefix comes from llama_prefix_N.seq of an
    earlier run when it holds exactly ids[0:N] (kept for the next run), else it is prefilled."""
    prefix = ids[:n]
    path = os.path.join(args.dir, f"llama_prefix_{n}.seq")
    L.llama_memory_clear(mem, True)
    reused = False
    if os.path.exists(path):
        toks = (L.llama_token * (n + 16))()
        n_out = ctypes.c_size_t(0)
        got = L.llama_state_seq_load_file(ctx, path.encode(), 0, toks, n + 16, ctypes.byref(n_out))
        reused = got != 0 and list(toks[:n_out.value]) == prefix
    if not reused:
        print(f"llama.cpp: prefix {n} tokens: prefilling...", file=sys.stderr)
        L.llama_memory_clear(mem, True)
        decode(prefix, 0, 0)
    tok_arr = (L.llama_token * n)(*prefix)
    save_s, save_fsync_s, load_s = [], [], []
    tmp = path + ".resave"
    for _ in range(args.repeats):
        t = time.perf_counter()
        if L.llama_state_seq_save_file(ctx, tmp.encode(), 0, tok_arr, n) == 0:
            raise SystemExit("llama_state_seq_save_file failed")
        t1 = time.perf_counter()
        fd = os.open(tmp, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        save_s.append(t1 - t)
        save_fsync_s.append(time.perf_counter() - t)
    os.replace(tmp, path)
    for _ in range(args.repeats):
        L.llama_memory_clear(mem, True)
        t = time.perf_counter()
        load(path, n)
        load_s.append(time.perf_counter() - t)
    return {"prefix_tokens": n, "reused_file": reused, "file_bytes": os.path.getsize(path), "save_s": summary(save_s),
            "save_fsync_s": summary(save_fsync_s), "load_s": summary(load_s)}


# ---------------------------------------------------------------- report

def report_throughput(ks, ls):
    """The load table of docs/benchmarks-history.md from --throughput-only runs (medians over all runs)."""
    sizes = sorted({s["prefix_tokens"] for d in ks for s in d["sizes"]})
    print("State file load, f16 KV (GB/s = file bytes / time, 1e9; medians over all runs)\n")
    print("| N | file bytes | kvstash load | GB/s | fresh process | GB/s | `cat > /dev/null` | GB/s | read(2) loop "
          "| GB/s | llama.cpp load | GB/s | kvstash load / cat |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        b = entries(ks, n)[0]["file_bytes"]
        load, fresh, cat, rd = (med(merged(ks, n, k)) for k in ("load_s", "load_fresh_process_s", "cat_s", "read_s"))
        lload, lb = float("nan"), 0
        if ls and entries(ls, n):
            lb = entries(ls, n)[0]["file_bytes"]
            lload = med(merged(ls, n, "load_s"))
        runs = len(merged(ks, n, "load_s"))
        print(f"| {n} | {b:,} | {fmt_s(load)} | {b / load / 1e9:.2f} | {fmt_s(fresh)} | {b / fresh / 1e9:.2f} | "
              f"{fmt_s(cat)} | {b / cat / 1e9:.1f} | {fmt_s(rd)} | {b / rd / 1e9:.1f} | {fmt_s(lload)} | "
              f"{lb / lload / 1e9:.2f} | {load / cat:.2f}× ({runs} runs) |")
    if any("parts_s" in s for d in ks for s in d["sizes"]):
        print("\nThe load's parts, outside load_state (same file, mapped as load_state maps it; medians)\n")
        print("| N | mmap + touch each page | mmap + XXH3 | mmap + XXH3 + copy per block half | load_state |")
        print("|---:|---:|---:|---:|---:|")
        for n in sizes:
            parts = [med(merged(ks, n, "parts_s", k)) for k in ("map_touch", "map_hash", "map_hash_copy")]
            print(f"| {n} | " + " | ".join(fmt_s(x) for x in parts) + f" | {fmt_s(med(merged(ks, n, 'load_s')))} |")
    print("\nChecks: save(load(file)) identical to the file: "
          f"{all(s['resave_identical'] for d in ks for s in d['sizes'])}")


def merged(docs, n, *keys):
    """All runs of sizes[N].keys... across the JSON documents, or []."""
    runs = []
    for d in docs:
        for s in d["sizes"]:
            if s["prefix_tokens"] != n:
                continue
            v = s
            for k in keys:
                v = v.get(k) if isinstance(v, dict) else None
            if v:
                runs += v["runs"]
    return runs


def entries(docs, n):
    return [s for d in docs for s in d["sizes"] if s["prefix_tokens"] == n]


def med(runs):
    return statistics.median(runs) if runs else float("nan")


def fmt_s(x):
    if x != x:
        return "—"
    return f"{x:.3f}" if x >= 0.1 else f"{x * 1000:.1f} ms"


def report(args):
    ks = [json.load(open(p)) for p in args.kvstash]
    ls = [json.load(open(p)) for p in args.llama] if args.llama else []
    if args.throughput_only:
        return report_throughput(ks, ls)
    k0 = ks[0]
    sizes = sorted({s["prefix_tokens"] for d in ks for s in d["sizes"]})
    per_tok = k0["kv_bytes_per_token"]

    def runs_text(n):
        nk = len(merged(ks, n, "ttft_s", "fork"))
        nkf = len(merged(ks, n, "ttft_s", "full"))
        text = f"N={n}: kvstash {nkf} full / {nk} other"
        if ls:
            text += f", llama.cpp {len(merged(ls, n, 'ttft_s', 'full'))} full / {len(merged(ls, n, 'ttft_s', 'fork'))} other"
        return text
    print(f"Time to first token (s unless ms; medians over runs — {'; '.join(runs_text(n) for n in sizes)}; "
          f"prefix N + {k0['suffix_tokens']}-token suffix, then one sampled token; {k0['threads']} threads)\n")
    print("| N | engine | full recompute | restore warm (load part) | restore warm, fresh process (load part) | "
          "restore cold (load part) | fork | speed-up restore warm / cold / fork |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        for name, docs in (("kvstash", ks), ("llama.cpp", ls)):
            if not docs:
                continue
            full = med(merged(docs, n, "ttft_s", "full"))
            warm = med(merged(docs, n, "ttft_s", "restore_in_process"))
            fresh = med(merged(docs, n, "ttft_s", "restore_fresh_process"))
            cold = med(merged(docs, n, "ttft_s", "restore_cold"))
            fork = med(merged(docs, n, "ttft_s", "fork"))

            def part(total, key):
                if total != total:
                    return "—"
                return f"{fmt_s(total)} ({fmt_s(med(merged(docs, n, 'restore_load_only_s', key)))})"
            print(f"| {n} | {name} | {fmt_s(full)} | {part(warm, 'in_process')} | {part(fresh, 'fresh_process')} | "
                  f"{part(cold, 'cold')} | {fmt_s(fork)} | "
                  f"{full / warm:.0f}× / {full / cold:.0f}× / {full / fork:.0f}× |")

    print("\nState files, f16 KV (GB/s = file bytes / time, 1e9; medians; kvstash save includes fsync of file and "
          "directory; llama.cpp save without / with an fsync of the file)\n")
    print("| N | engine | file bytes | bytes/token | save | save GB/s | load | load GB/s | `cat > /dev/null` | cat GB/s "
          "| read(2) loop | read GB/s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        ksz = entries(ks, n)[0]
        b = ksz["file_bytes"]
        save, load, cat, rd = (med(merged(ks, n, k)) for k in ("save_s", "load_s", "cat_s", "read_s"))
        print(f"| {n} | kvstash | {b:,} | {b / n:,.0f} | {fmt_s(save)} | {b / save / 1e9:.2f} | {fmt_s(load)} | "
              f"{b / load / 1e9:.2f} | {fmt_s(cat)} | {b / cat / 1e9:.1f} | {fmt_s(rd)} | {b / rd / 1e9:.1f} |")
        if ls:
            lsz = entries(ls, n)[0]
            lb = lsz["file_bytes"]
            lsave, lsf, lload = (med(merged(ls, n, k)) for k in ("save_s", "save_fsync_s", "load_s"))
            print(f"| {n} | llama.cpp | {lb:,} | {lb / n:,.0f} | {fmt_s(lsave)} / {fmt_s(lsf)} | "
                  f"{lb / lsave / 1e9:.2f} / {lb / lsf / 1e9:.2f} | {fmt_s(lload)} | {lb / lload / 1e9:.2f} | | | | |")
    print(f"\nRaw KV per token (n_layer {k0['n_layer']} × 2 × n_embd_kv {k0['n_embd_kv']} × bytes/element): "
          f"f16 {per_tok['f16']:,} B, q8_0 {per_tok['q8_0']:,} B")

    variants = [d["variants"] for d in ks if "variants" in d]
    if variants:
        vs = variants[0]
        n = next(d["variants_prefix_tokens"] for d in ks if "variants" in d)
        print(f"\nkvstash file variants, prefix {n} tokens (medians over all rounds)\n")
        print("| variant | file bytes | bytes/token | save | save GB/s (file) | load | load GB/s (file) | "
              "restore TTFT | bit-exact |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for name in vs:
            b = vs[name]["file_bytes"]
            save = med(sum((v[name]["save_s"]["runs"] for v in variants), []))
            load = med(sum((v[name]["load_s"]["runs"] for v in variants), []))
            ttft = med(sum((v[name]["restore_ttft_in_process_s"]["runs"] for v in variants), []))
            exact = all(v[name]["bitwise_identical_to_full"] for v in variants)
            print(f"| {name} | {b:,} | {b / n:,.0f} | {fmt_s(save)} | {b / save / 1e9:.2f} | {fmt_s(load)} | "
                  f"{b / load / 1e9:.2f} | {fmt_s(ttft)} | {'yes' if exact else 'no'} |")

    print("\nChecks")
    for n in sizes:
        ksz = entries(ks, n)
        line = (f"- N={n}: kvstash full/restore/fork logits bitwise identical: "
                f"{all(s['bitwise_identical'] for s in ksz)}; first tokens {ksz[0]['first_tokens']}; "
                f"cold files resident before load: {max(sum((s['cold_resident_fraction_before_load'] for s in ksz), []) or [0]):.0%}"
                f" (kvstash), {max(sum((s['cold_resident_fraction_before_load'] for s in entries(ls, n)), []) or [0]):.0%}"
                f" (llama.cpp)")
        if ls:
            lsz = entries(ls, n)
            line += (f"; prefix argmax kvstash {ksz[0]['prefix_argmax']} / llama.cpp {lsz[0]['prefix_argmax']}; "
                     f"llama.cpp logits equal to its full recompute: {lsz[0]['logits_bitwise_equal_to_full']}, "
                     f"first tokens {lsz[0]['first_tokens']}")
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    r.add_argument("-t", "--threads", type=int, default=2)
    r.add_argument("--tokens", required=True)
    r.add_argument("--sizes", default="512,2048,8184")
    r.add_argument("--suffix", type=int, default=8)
    r.add_argument("--ctx", type=int, default=8192)
    r.add_argument("-r", "--repeats", type=int, default=3)
    r.add_argument("--full-repeats-long", type=int, default=-1,
                   help="full recomputes of prefixes over 4096 tokens (default: --repeats)")
    r.add_argument("--dir", default="build-sb/state-bench")
    r.add_argument("--throughput-only", action="store_true",
                   help="only save / load times (reusing llama_prefix_N.seq of an earlier run when it matches)")
    p = sub.add_parser("report")
    p.add_argument("--kvstash", nargs="+", required=True)
    p.add_argument("--llama", nargs="*", default=[])
    p.add_argument("--throughput-only", action="store_true", help="the load table of --throughput-only runs")
    args = ap.parse_args()
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
