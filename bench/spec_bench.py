#!/usr/bin/env python3
"""Speculative decoding vs plain decoding through the real CLI (docs/speculative.md), runs alternated so
that load on a shared machine hits both sides alike.

Workloads (the model's chat template via --chat unless --no-chat, greedy, -n tokens):
  grounded: the first ~2K tokens of tests/fixtures/text/persuasion_ch1-2.txt, then
            "Repeat the third paragraph of the text above, word for word."
  free:     "Write a short story about a dragon who learns to cook."
  grounded-completion (for base models, with --no-chat; not run unless named in --workloads): the same
            document, then "The third paragraph of the text above, repeated exactly:" and the first 8 words of
            that paragraph (the third of at least 200 characters: the title lines are not paragraphs of text), so
            that a model that follows no instruction continues by copying it.
For each workload and round: `kvstash generate` plain, then with each --spec variant; the decode speed and
acceptance come from --timings. Prints a Markdown table of medians over the rounds, and checks that every
variant's stdout equals the plain run's (the promise: the same text).

  .venv/bin/python bench/spec_bench.py --cli build/kvstash -t 2 --rounds 3

--baseline-cli OLD runs a second binary's plain and lookup variants in the same rounds, alternated with --cli's
(rows "(before)": a change measured before/after in one run, under the same load). --cpu adds the process CPU
time of each variant less that of a prompt-only (-n 1) run of the same binary: on a loaded machine a steadier
figure than wall-clock tok/s (with -t 1: with more threads it counts their spin-waiting too).

With --llama-python PY (a Python that has llama-cpp-python, e.g. built as bench/compare_llamacpp.py says),
each round also runs llama.cpp on the same GGUF and the same prompt token ids (rendered and tokenized by
kvstash's Python package, as --chat does), the same threads, greedy, in a fresh process: plain, and with
llama-cpp-python's LlamaPromptLookupDecoding (--llama-lookup-k guesses, n-grams up to
--llama-lookup-ngram) as its draft model. Rows "llama.cpp" and "llama.cpp lookup" give their decode tok/s
(first token to last, prompt evaluation excluded, as kvstash's --timings); "vs llama lookup" is each row's
speed over llama.cpp lookup's, and "same text" for llama.cpp's rows compares with its own plain run.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

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
    # A completion a base model continues by copying: the paragraph's opening words, exactly as in the document.
    third = [p.strip() for p in paragraphs if len(p.strip()) >= 200][2]
    opening = re.match(r"\s*(\S+\s+){7}\S+", third).group(0)
    return {
        "grounded": doc + "\n\nRepeat the third paragraph of the text above, word for word.",
        "free": "Write a short story about a dragon who learns to cook.",
        "grounded-completion": doc + "\n\nThe third paragraph of the text above, repeated exactly:\n\n" + opening,
    }


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cli, prompt_file, threads, n, extra):
    cmd = [cli, "generate", "-f", prompt_file, "-n", str(n), "--temp", "0", "--seed", "1", "-t",
           str(threads), "--ctx", "4096", "--timings"] + extra
    cpu_before = children_cpu_seconds()
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=True)  # random models: any bytes
    cpu = children_cpu_seconds() - cpu_before
    m = TIMINGS.search(r.stderr)
    s = SPEC.search(r.stderr)
    return {"out": r.stdout, "tok_s": float(m.group(3)), "tokens": int(m.group(1)), "cpu_s": cpu,
            "drafted": int(s.group(1)) if s else 0, "accepted": int(s.group(2)) if s else 0}


def prompt_ids(model_path, prompt, chat):
    """The token ids `generate [--chat]` evaluates: the chat template applied by kvstash's Python package."""
    import kvstash

    model = kvstash.Model(model_path, threads=1)
    return model.tokenize(model.apply_chat_template([("user", prompt)]) if chat else prompt)


def llama_worker(model_path, ids_path, threads, n, lookup_k, lookup_ngram):
    """Runs in its own process (the llama-cpp-python Python): prints {"tok_s", "tokens", "out", ...}."""
    import llama_cpp as L
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    with open(ids_path) as f:
        ids = json.load(f)
    draft = LlamaPromptLookupDecoding(max_ngram_size=lookup_ngram, num_pred_tokens=lookup_k) if lookup_k else None
    # With a draft model llama-cpp-python 0.3.36 evaluates with logits for every row but sizes its logits
    # buffer for one batch unless logits_all=True is passed too (else: "could not broadcast ... into shape
    # (0,)"); that buffer is n_ctx x n_vocab floats, so n_ctx is what the run needs.
    llm = L.Llama(model_path=model_path, n_threads=threads, n_threads_batch=threads, n_ctx=len(ids) + n + 16,
                  n_batch=512, draft_model=draft, logits_all=draft is not None, verbose=False, flash_attn=True)
    vocab = L.llama_model_get_vocab(llm.model)
    out, t_first = [], None
    for token in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if t_first is None:
            t_first = time.perf_counter()
        if L.llama_vocab_is_eog(vocab, token):
            break
        out.append(token)
        if len(out) >= n:
            break
    seconds = time.perf_counter() - t_first
    text = llm.detokenize(out).decode("utf-8", "replace")
    print(json.dumps({"tok_s": (len(out) - 1) / seconds if len(out) > 1 else 0.0, "tokens": len(out),
                      "out": text, "llama_cpp_python": L.__version__}))


def run_llama(args, model_path, ids_path, lookup_k):
    cmd = [args.llama_python, os.path.abspath(__file__), "--llama-worker", "-m", model_path, "--ids", ids_path,
           "-t", str(args.threads), "-n", str(args.n), "--llama-lookup-k", str(lookup_k),
           "--llama-lookup-ngram", str(args.llama_lookup_ngram)]
    # OpenMP's spin-waiting threads (llama.cpp's default) lose badly to other processes on a shared machine
    # (0.3 instead of 44 tok/s on SmolLM2 at load average 20): --llama-omp-wait passive by default.
    env = dict(os.environ, OMP_WAIT_POLICY=args.llama_omp_wait)
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
    r.update(drafted=0, accepted=0)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/kvstash"))
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--doc-chars", type=int, default=8000)
    ap.add_argument("--spec-max", type=int, nargs="+", default=[8], help="one lookup variant per value")
    ap.add_argument("--no-chat", action="store_true", help="the prompt as it is (a model without a chat template)")
    ap.add_argument("--workloads", nargs="+", default=["grounded", "free"],
                    choices=["grounded", "free", "grounded-completion"])
    ap.add_argument("--llama-python", default=None, help="a Python with llama-cpp-python: run llama.cpp too")
    ap.add_argument("--llama-lookup-k", type=int, default=10, help="LlamaPromptLookupDecoding num_pred_tokens")
    ap.add_argument("--llama-lookup-ngram", type=int, default=2, help="LlamaPromptLookupDecoding max_ngram_size")
    ap.add_argument("--llama-omp-wait", default="passive", choices=["passive", "active"],
                    help="OMP_WAIT_POLICY of llama.cpp's process")
    ap.add_argument("--baseline-cli", default=None,
                    help="a second kvstash binary (before a change): its plain and lookup runs alternate with --cli's, "
                         "rows marked (before)")
    ap.add_argument("--cpu", action="store_true",
                    help="also a `-n 1` run of each binary per round: the column 'decode CPU s' is the process CPU "
                         "time (user + system, spin-waiting threads included: use -t 1 for the work alone) less that "
                         "prompt-only run's, medians")
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_worker:
        return llama_worker(args.model, args.ids, args.threads, args.n, args.llama_lookup_k, args.llama_lookup_ngram)
    model_path = args.model or os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    with open("/proc/loadavg") as f:
        print(f"load average at the start: {' '.join(f.read().split()[:3])}", file=sys.stderr)
    # variant name -> (binary, extra flags, n); "plain" rows are each binary's reference (speed-up, same text).
    binaries = {"": args.cli}
    if args.baseline_cli:
        binaries[" (before)"] = args.baseline_cli
    variants = {}
    for tag, cli in binaries.items():
        variants["plain" + tag] = (cli, [], args.n)
        for k in args.spec_max:
            variants[f"lookup, --spec-max {k}{tag}"] = (cli, ["--spec", "lookup", "--spec-max", str(k)], args.n)
        if args.cpu:
            variants["prompt only" + tag] = (cli, [], 1)
    model = (["-m", args.model] if args.model else []) + ([] if args.no_chat else ["--chat"])
    llama = {"llama.cpp": 0, "llama.cpp lookup": args.llama_lookup_k} if args.llama_python else {}
    cpu_head, cpu_rule = (" decode CPU s |", "---:|") if args.cpu else ("", "")
    print(f"| workload | variant | decode tok/s (median) | speed-up |{cpu_head} vs llama lookup | drafted | accepted "
          "| acceptance | same text |")
    print(f"|---|---|---:|---:|{cpu_rule}---:|---:|---:|---:|---|")
    for name, prompt in workloads(args.doc_chars).items():
        if name not in args.workloads:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(prompt)
            path = f.name
        ids_path = path + ".ids.json"
        if llama:
            with open(ids_path, "w") as f:
                json.dump(prompt_ids(model_path, prompt, not args.no_chat), f)
        results = {v: [] for v in list(variants) + list(llama)}
        for _ in range(args.rounds):
            for v, (cli, extra, n) in variants.items():
                results[v].append(run(cli, path, args.threads, n, model + extra))
            for v, k in llama.items():
                results[v].append(run_llama(args, model_path, ids_path, k))
        os.unlink(path)
        if llama:
            os.unlink(ids_path)
        llama_lookup = statistics.median(r["tok_s"] for r in results["llama.cpp lookup"]) if llama else None
        for v, rs in results.items():
            if v.startswith("prompt only"):
                continue
            tag = " (before)" if v.endswith(" (before)") else ""
            plain = statistics.median(r["tok_s"] for r in results["plain" + tag])
            speed = statistics.median(r["tok_s"] for r in rs)
            drafted, accepted = rs[0]["drafted"], rs[0]["accepted"]
            reference = results["llama.cpp" if v.startswith("llama.cpp") else "plain"][0]["out"]
            same = all(r["out"] == reference for r in rs)
            rate = f"{100 * accepted / drafted:.0f}%" if drafted else "-"
            vs_llama = f"{speed / llama_lookup:.2f}x" if llama_lookup else "-"
            cpu = ""
            if args.cpu and not v.startswith("llama.cpp"):
                prompt_cpu = statistics.median(r["cpu_s"] for r in results["prompt only" + tag])
                cpu = f" {statistics.median(r['cpu_s'] for r in rs) - prompt_cpu:.2f} |"
            elif args.cpu:
                cpu = " - |"
            print(f"| {name} | {v} | {speed:.1f} | {speed / plain:.2f}x |{cpu} {vs_llama} | {drafted} | {accepted} "
                  f"| {rate} | {same} |")


if __name__ == "__main__":
    main()
