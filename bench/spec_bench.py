#!/usr/bin/env python3
"""Speculative decoding vs plain decoding through the real CLI (docs/speculative.md), runs alternated so
that load on a shared machine hits both sides alike.

Workloads (SmolLM2's chat template via --chat, greedy, -n tokens):
  grounded: the first ~2K tokens of tests/fixtures/text/persuasion_ch1-2.txt, then
            "Repeat the third paragraph of the text above, word for word."
  free:     "Write a short story about a dragon who learns to cook."
For each workload and round: `kvstash generate` plain, then with each --spec variant; the decode speed and
acceptance come from --timings. Prints a Markdown table of medians over the rounds, and checks that every
variant's stdout equals the plain run's (the promise: the same text).

  .venv/bin/python bench/spec_bench.py --cli build/kvstash -t 2 --rounds 3
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = re.compile(r"generated (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)")
SPEC = re.compile(r"drafted (\d+), accepted (\d+)")


def workloads(doc_chars):
    with open(os.path.join(ROOT, "tests/fixtures/text/persuasion_ch1-2.txt"), encoding="utf-8") as f:
        text = f.read()
    # Whole paragraphs (blank-line separated) up to doc_chars.
    paragraphs, size = [], 0
    for p in text.split("\n\n"):
        if size + len(p) > doc_chars:
            break
        paragraphs.append(p)
        size += len(p) + 2
    doc = "\n\n".join(paragraphs)
    return {
        "grounded": doc + "\n\nRepeat the third paragraph of the text above, word for word.",
        "free": "Write a short story about a dragon who learns to cook.",
    }


def run(cli, prompt_file, threads, n, extra):
    cmd = [cli, "generate", "--chat", "-f", prompt_file, "-n", str(n), "--temp", "0", "--seed", "1", "-t",
           str(threads), "--ctx", "4096", "--timings"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = TIMINGS.search(r.stderr)
    s = SPEC.search(r.stderr)
    return {"out": r.stdout, "tok_s": float(m.group(3)), "tokens": int(m.group(1)),
            "drafted": int(s.group(1)) if s else 0, "accepted": int(s.group(2)) if s else 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/kvstash"))
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--doc-chars", type=int, default=8000)
    ap.add_argument("--spec-max", type=int, nargs="+", default=[8], help="one lookup variant per value")
    args = ap.parse_args()
    variants = {"plain": []}
    for k in args.spec_max:
        variants[f"lookup, --spec-max {k}"] = ["--spec", "lookup", "--spec-max", str(k)]
    model = ["-m", args.model] if args.model else []
    print("| workload | variant | decode tok/s (median) | speed-up | drafted | accepted | acceptance | same text |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, prompt in workloads(args.doc_chars).items():
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(prompt)
            path = f.name
        results = {v: [] for v in variants}
        for _ in range(args.rounds):
            for v, extra in variants.items():
                results[v].append(run(args.cli, path, args.threads, args.n, model + extra))
        os.unlink(path)
        plain = statistics.median(r["tok_s"] for r in results["plain"])
        for v, rs in results.items():
            speed = statistics.median(r["tok_s"] for r in rs)
            drafted, accepted = rs[0]["drafted"], rs[0]["accepted"]
            same = all(r["out"] == results["plain"][0]["out"] for r in rs)
            rate = f"{100 * accepted / drafted:.0f}%" if drafted else "-"
            print(f"| {name} | {v} | {speed:.1f} | {speed / plain:.2f}x | {drafted} | {accepted} | {rate} | {same} |")


if __name__ == "__main__":
    main()
