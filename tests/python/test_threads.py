"""What may be shared across threads: one Model by any number of threads, each with its own State
(each call leases its own evaluator, the GIL is released while it computes). A State is used by one
thread at a time; a second user during a call gets InvalidArgument instead of a data race."""

import threading

import numpy as np
import pytest

import kvstash

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "The best way to learn is"]


def test_one_model_many_threads(model):
    expected = [model.generate(model.prefill(p), max_tokens=12, temperature=0.8, seed=i) for i, p in enumerate(PROMPTS)]
    got = [None] * len(PROMPTS)
    barrier = threading.Barrier(len(PROMPTS))

    def work(i):
        state = model.prefill(PROMPTS[i])  # each thread its own State
        barrier.wait()
        got[i] = model.generate(state, max_tokens=12, temperature=0.8, seed=i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_forks_in_threads_share_a_prefix(model):
    base = model.prefill("A long shared document. " * 10)
    before = base.logits.copy()
    out = {}

    def work(i):
        out[i] = model.generate(base.fork(), f" Question {i}:", max_tokens=6, temperature=0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(base.logits, before)
    assert out[0] == model.generate(base.fork(), " Question 0:", max_tokens=6, temperature=0)


def test_state_in_use_is_refused(model):
    state = model.prefill("Hello")
    errors = []

    def meddle(token, text):
        try:
            model.eval(state, [token])  # the State is inside generate(): refused, not corrupted
        except kvstash.InvalidArgument as e:
            errors.append(str(e))
        return False

    model.generate(state, max_tokens=5, callback=meddle)
    assert errors and "in use" in errors[0]
