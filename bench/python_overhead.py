#!/usr/bin/env python3
"""The Python package's overhead, side by side (docs/benchmarks-history.md, "Python package"):

  1. generate: per-token decode time of kvstash.Model.generate (wall time around the Python call) vs
     the CLI (`kvstash generate --timings`: the generation loop's time) on the same prompt, greedy,
     same thread count; the two alternate, round by round, and the medians are compared.
  2. state files: kvstash State.save / State.load vs llama-cpp-python's Llama.save_state /
     load_state + pickle (to a file, then read back) for the same prefix token ids: time and bytes.
     llama-cpp-python runs in its own venv (--llama-python), as a child process of this script.

    .venv/bin/python bench/python_overhead.py [--model M] [--threads 2] [--rounds 5] [--tokens 64]
        [--prefix-tokens 512] [--kvstash build/kvstash] [--llama-python /work/venv-bench/bin/python]
"""

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "Write a long story about a lighthouse keeper and the storm that changed his life. Once upon a time,"
PREFIX_TEXT = "The history of the lighthouse begins in antiquity, when fires were lit on hills to guide ships. "


def cli_per_token_ms(args) -> float:
    cmd = [args.kvstash, "generate", "-m", args.model, "-p", PROMPT, "-n", str(args.tokens), "--temp", "0", "-t",
           str(args.threads), "--timings"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"generated (\d+) tokens in ([0-9.]+) s", out.stderr)
    n, seconds = int(m.group(1)), float(m.group(2))
    if n != args.tokens:
        raise RuntimeError(f"CLI generated {n} tokens, not {args.tokens} (an end-of-generation token?)")
    return seconds * 1e3 / n


def python_per_token_ms(model, args, stream: bool = False) -> float:
    state = model.prefill(PROMPT)  # the prompt is evaluated before timing, as the CLI's figure excludes it
    pieces = []
    t = time.perf_counter()
    if stream:  # every piece through a Python callback (the GIL taken once per token), as the CLI prints each
        c = model.complete(state, max_tokens=args.tokens, temperature=0, callback=lambda tok, text: pieces.append(text))
    else:
        c = model.complete(state, max_tokens=args.tokens, temperature=0)
    seconds = time.perf_counter() - t
    if len(c.tokens) != args.tokens:
        raise RuntimeError(f"Python generated {len(c.tokens)} tokens, not {args.tokens}")
    return seconds * 1e3 / args.tokens


def llama_child(args) -> int:
    """Runs under llama-cpp-python: save_state / load_state + pickle through a file."""
    from llama_cpp import Llama

    tokens = json.load(open(args.llama_child))
    llm = Llama(model_path=args.model, n_ctx=len(tokens) + 64, n_threads=args.threads, n_batch=512, verbose=False)
    llm.eval(tokens)
    path = os.path.join(os.path.dirname(args.llama_child), "llama.pkl")
    res = {"save_ms": [], "load_ms": [], "bytes": 0}
    for _ in range(args.rounds):
        t = time.perf_counter()
        data = pickle.dumps(llm.save_state())
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        res["save_ms"].append((time.perf_counter() - t) * 1e3)
        res["bytes"] = os.path.getsize(path)
        t = time.perf_counter()
        with open(path, "rb") as f:
            llm.load_state(pickle.loads(f.read()))
        res["load_ms"].append((time.perf_counter() - t) * 1e3)
    print(json.dumps(res))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prefix-tokens", type=int, default=512)
    p.add_argument("--kvstash", default=os.path.join(ROOT, "build", "kvstash"))
    p.add_argument("--llama-python", default="/work/venv-bench/bin/python")
    p.add_argument("--llama-child", help=argparse.SUPPRESS)
    p.add_argument("--skip-generate", action="store_true")
    args = p.parse_args(argv)
    if args.llama_child:
        return llama_child(args)

    import kvstash

    model = kvstash.Model(args.model, threads=args.threads)
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, {args.rounds} rounds (medians)\n")
    if not args.skip_generate:
        cli, py, py_cb = [], [], []
        for _ in range(args.rounds):  # alternating, so that load changes hit all alike
            cli.append(cli_per_token_ms(args))
            py.append(python_per_token_ms(model, args))
            py_cb.append(python_per_token_ms(model, args, stream=True))
        c, q, qc = statistics.median(cli), statistics.median(py), statistics.median(py_cb)
        print("| decode, greedy, %d tokens | ms / token (median) | runs |" % args.tokens)
        print("|---|---|---|")
        print(f"| CLI `kvstash generate` | {c:.2f} | {', '.join(f'{x:.2f}' for x in cli)} |")
        print(f"| Python `Model.generate` | {q:.2f} | {', '.join(f'{x:.2f}' for x in py)} |")
        print(f"| Python `Model.generate(callback=...)` | {qc:.2f} | {', '.join(f'{x:.2f}' for x in py_cb)} |")
        print(f"\nPython / CLI: {q / c:.3f} ({(q / c - 1) * 100:+.1f}%); with a callback: {qc / c:.3f} "
              f"({(qc / c - 1) * 100:+.1f}%)\n")

    text = PREFIX_TEXT * (args.prefix_tokens // 10)
    tokens = model.tokenize(text)[: args.prefix_tokens]
    state = kvstash.State(model, n_ctx=len(tokens) + 64)
    model.eval(state, tokens)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prefix.kvs")
        save, load = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            state.save(path)
            save.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            kvstash.State.load(model, path)
            load.append((time.perf_counter() - t) * 1e3)
        kv_bytes = os.path.getsize(path)
        tokens_path = os.path.join(tmp, "tokens.json")
        json.dump(tokens, open(tokens_path, "w"))
        out = subprocess.run([args.llama_python, os.path.abspath(__file__), "--model", args.model, "--threads",
                              str(args.threads), "--rounds", str(args.rounds), "--llama-child", tokens_path], capture_output=True, text=True, check=True)
        llama = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"| state of a {len(tokens)}-token prefix | save ms | load ms | file bytes |")
    print("|---|---|---|---|")
    print(f"| kvstash `State.save` / `State.load` (f16 KV, fsync) | {statistics.median(save):.2f} | "
          f"{statistics.median(load):.2f} | {kv_bytes:,} |")
    print(f"| llama-cpp-python `save_state` + pickle + file (fsync) / read + unpickle + `load_state` | "
          f"{statistics.median(llama['save_ms']):.2f} | {statistics.median(llama['load_ms']):.2f} | "
          f"{llama['bytes']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
