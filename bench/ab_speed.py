#!/usr/bin/env python3
"""Same-machine speed A/B of two kvstash_bench binaries (e.g. main's and a branch's), run alternately so
that a change of machine load hits both alike; prints each run and per-case medians of the rounds.

  bench/ab_speed.py --a OLD/kvstash_bench --b NEW/kvstash_bench --rounds 3 \
      --case models/SmolLM2-135M-Instruct.Q4_1.gguf:512:64 --case models/SmolLM2-135M-Instruct.Q4_1.gguf:4096:16

Each case MODEL:PROMPT:DECODE runs `BIN -m MODEL -t THREADS -r REPEATS -p PROMPT -n DECODE` (kvstash_bench's
own median over its repeats, after its warm-up); the order A,B / B,A alternates between rounds. The final
logits hashes of A and B must be equal (exit 1 if not).
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, model, prompt, decode, threads, repeats):
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-r", str(repeats), "-p", str(prompt), "-n",
                          str(decode)], check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    return d["prefill_tok_s"]["median"], d["decode_tok_s"]["median"], d["final_logits_fnv1a"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--case", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ok = True
    for case in args.case:
        model, prompt, decode = case.rsplit(":", 2)
        results = {"a": [], "b": []}
        hashes = set()
        for r in range(args.rounds):
            order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
            for which in order:
                pre, dec, h = run(getattr(args, which), model, int(prompt), int(decode), args.threads, args.repeats)
                results[which].append((pre, dec))
                hashes.add(h)
                print(f"{case} round {r} {which}: prefill {pre:.1f} tok/s, decode {dec:.2f} tok/s, hash {h}",
                      flush=True)
        for which in ("a", "b"):
            pre = [p for p, _ in results[which]]
            dec = [d for _, d in results[which]]
            print(f"{case} {which}: prefill median {statistics.median(pre):.1f} [{min(pre):.1f}-{max(pre):.1f}], "
                  f"decode median {statistics.median(dec):.2f} [{min(dec):.2f}-{max(dec):.2f}]", flush=True)
        if len(hashes) != 1:
            print(f"{case}: final logits differ between A and B: {sorted(hashes)}", flush=True)
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
