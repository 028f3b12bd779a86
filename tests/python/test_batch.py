"""Batched generation (issue 33 item 7): several prompts or forks decoded together through the evaluator's
batching, each result bitwise what generating it alone gives (tokens, text, stop reason, the State's
logits and random sequence)."""

import numpy as np
import pytest

import kvstash

PREFIX = "Once upon a time, in a small village by the sea,"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4,", "Hello"]


def assert_same(batched, alone, state_batched, state_alone):
    assert batched.tokens == alone.tokens
    assert batched.text == alone.text
    assert batched.stop_reason == alone.stop_reason
    assert batched.prompt_tokens == alone.prompt_tokens
    assert state_batched.tokens == state_alone.tokens
    assert np.array_equal(state_batched.logits, state_alone.logits)


def test_forks_sampled_together_equal_one_at_a_time(model):
    base = model.prefill(PREFIX)
    forks = [base.fork() for _ in range(4)]
    alone_states = [base.fork() for _ in range(4)]
    sampling = dict(temperature=0.9, top_k=40, top_p=0.95, seed=7)
    batched = model.complete_batch(forks, [" The", " A", None, " One"], 12, **sampling)
    for i, state in enumerate(alone_states):
        alone = model.complete(state, [" The", " A", None, " One"][i], 12, **sampling)
        assert_same(batched[i], alone, forks[i], state)
    # Continuing the States' own random sequences (seed=None) stays bitwise too.
    again = model.complete_batch(forks, None, 6, temperature=0.9)
    for i, state in enumerate(alone_states):
        assert_same(again[i], model.complete(state, None, 6, temperature=0.9), forks[i], state)


def test_prompts_of_different_lengths_and_stops(model):
    states = [kvstash.State(model) for _ in PROMPTS]
    batched = model.complete_batch(states, PROMPTS, 16, temperature=0, stop=["\n"])
    reasons = set()
    for prompt, completion, state in zip(PROMPTS, batched, states):
        single = kvstash.State(model)
        assert_same(completion, model.complete(single, prompt, 16, temperature=0, stop=["\n"]), state, single)
        reasons.add(completion.stop_reason)
    assert len({len(c.tokens) for c in batched}) > 1 or len(reasons) > 1  # sequences finished at different steps
    texts = model.generate_batch(PROMPTS, 16, temperature=0, stop=["\n"])
    assert texts == [c.text for c in batched]


def test_batch_of_a_state_twice_is_refused(model):
    state = model.prefill(PREFIX)
    with pytest.raises(kvstash.InvalidArgument, match="fork"):
        model.complete_batch([state, state], None, 4)
    with pytest.raises(kvstash.InvalidArgument, match="one per state"):
        model.complete_batch([state.fork(), state.fork()], ["a"], 4)
    assert len(state) == len(model.prefill(PREFIX))  # unchanged
