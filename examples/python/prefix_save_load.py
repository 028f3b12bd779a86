#!/usr/bin/env python3
"""Process a prefix once, save it, load it in another process, generate many answers.

    .venv/bin/python examples/python/prefix_save_load.py [--model PATH] [--max-tokens N]

The kvstash version of process_prefix / save_cache_to_disk / load_cache_from_disk /
generate_with_prefix: the saved file is bound to the model by fingerprint and continues bit-exactly, so
the answers the second process gives are the ones this process gives from the original State.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import kvstash

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

DOCUMENT = (
    "Notes on the river Avon. The river rises near Naseby and flows west through Stratford. "
    "Its length is about 154 kilometres, and it joins the Severn at Tewkesbury. Mills once stood at "
    "every weir; today the river is used for boating. " * 6
)
QUESTIONS = ["\nQ: Where does the river rise?\nA:", "\nQ: How long is it?\nA:", "\nQ: Where does it end?\nA:",
             "\nQ: What is it used for today?\nA:"]


def answers(model: kvstash.Model, prefix: kvstash.State, max_tokens: int):
    # Each answer continues a fork of the prefix: the prefix is never recomputed.
    return [model.generate(prefix.fork(), q, max_tokens, temperature=0, stop=["\nQ", "\n\n"]) for q in QUESTIONS]


def child(args) -> int:
    """The other process: load the saved prefix and answer."""
    model = kvstash.Model(args.model, threads=args.threads)
    t = time.perf_counter()
    prefix = kvstash.State.load(model, args.load)
    load_ms = (time.perf_counter() - t) * 1e3
    print(json.dumps({"answers": answers(model, prefix, args.max_tokens), "load_ms": load_ms}))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("KVSTASH_MODEL", DEFAULT_MODEL))
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load", help=argparse.SUPPRESS)  # set for the child process
    args = parser.parse_args(argv)
    if args.load:
        return child(args)

    model = kvstash.Model(args.model, threads=args.threads)
    t = time.perf_counter()
    prefix = model.prefill(DOCUMENT)
    prefill_ms = (time.perf_counter() - t) * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "river.kvs")
        prefix.save(path)
        info = kvstash.file_info(path)
        print(f"prefix: {info['n_tokens']} tokens computed in {prefill_ms:.0f} ms, saved: {info['file_bytes']} bytes")
        cmd = [sys.executable, os.path.abspath(__file__), "--model", args.model, "--max-tokens", str(args.max_tokens),
               "--threads", str(args.threads), "--load", path]
        result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print(f"another process loaded it in {result['load_ms']:.1f} ms and answered:")
    for q, a in zip(QUESTIONS, result["answers"]):
        print(f"  {q.strip().replace(chr(10), ' ')} {a.strip()}")
    mine = answers(model, prefix, args.max_tokens)
    assert result["answers"] == mine, (result["answers"], mine)  # bit-exact across processes
    print("same answers as from the original State in this process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
