#!/usr/bin/env python3
"""Fork one State into several continuations: each fork shares the prefix's KV (copy-on-write), so it
costs the same whatever the prefix length, and the prefix is left untouched.

    .venv/bin/python examples/python/fork_continuations.py [--model PATH] [--max-tokens N]
"""

import argparse
import os
import sys
import time

import numpy as np

import kvstash

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("KVSTASH_MODEL", DEFAULT_MODEL))
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    model = kvstash.Model(args.model, threads=args.threads)
    story = model.prefill("Write a short story opening. It was a cold morning in the harbour town, and")
    before = story.logits.copy()
    t = time.perf_counter()
    forks = [story.fork() for _ in range(4)]
    fork_us = (time.perf_counter() - t) * 1e6 / len(forks)
    print(f"prefix: {len(story)} tokens, {story.kv_bytes} KV bytes; one fork: {fork_us:.1f} us")
    endings = []
    for seed, fork in enumerate(forks):
        text = model.generate(fork, max_tokens=args.max_tokens, temperature=0.9, seed=seed)
        endings.append(text)
        print(f"--- continuation {seed} ({len(fork)} tokens)\n...and{text}")
    assert np.array_equal(story.logits, before) and len(story) < len(forks[0])  # the prefix is untouched
    assert len(set(endings)) > 1  # different seeds, different continuations
    # The same seed from the same prefix gives the same continuation (bit-exact).
    assert model.generate(story.fork(), max_tokens=args.max_tokens, temperature=0.9, seed=0) == endings[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
