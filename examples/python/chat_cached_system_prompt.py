#!/usr/bin/env python3
"""A long system prompt computed once, then (1) a hand-written token loop with our own sampling over it,
and (2) a multi-turn chat (kvstash.Session) streaming its replies through callbacks.

    .venv/bin/python examples/python/chat_cached_system_prompt.py [--model PATH] [--max-tokens N]

The hand-written loop is what people write around transformers' past_key_values: compute the system
prompt once, and for each question continue a copy of it token by token. With kvstash the copy is
State.fork() (O(1), copy-on-write), and the logits are a zero-copy NumPy view.
"""

import argparse
import os
import sys

import numpy as np

import kvstash

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

SYSTEM = (
    "You are a concise assistant for a small bakery called The Rolling Pin. "
    "Opening hours: Monday to Friday 7am to 6pm, Saturday 8am to 2pm, closed on Sunday. "
    "Bestsellers: sourdough loaf (5 euros), croissant (1.80 euros), cinnamon roll (2.50 euros). "
    "Gluten-free bread is baked on Tuesdays and Fridays only. Orders for cakes need two days' notice. "
    "Answer in one or two sentences and never invent products that are not listed here. " * 3
)


def sample(logits: np.ndarray, rng: np.random.Generator, temperature: float = 0.7, top_k: int = 40) -> int:
    """Top-k sampling with temperature, written by hand on the logits array."""
    top = np.argpartition(logits, -top_k)[-top_k:]
    z = logits[top].astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(top[rng.choice(top_k, p=p / p.sum())])


def manual_loop(model: kvstash.Model, questions, max_tokens: int) -> None:
    system_text = model.apply_chat_template([("system", SYSTEM)], add_generation_prompt=False)
    system_state = model.prefill(system_text)  # computed once
    print(f"system prompt: {len(system_state)} tokens, computed once")
    rng = np.random.default_rng(0)
    for question in questions:
        full = model.apply_chat_template([("system", SYSTEM), ("user", question)])
        assert full.startswith(system_text)  # the template is prefix-stable
        state = system_state.fork()
        model.eval(state, model.tokenize(full[len(system_text) :], add_special=False))
        out = b""
        for _ in range(max_tokens):
            token = sample(state.logits, rng)
            if model.is_eog(token):
                break
            out += model.token_piece(token)
            model.eval(state, [token])
        print(f"Q: {question}\nA: {out.decode('utf-8', 'replace').strip()}\n")
    assert len(system_state) == model.prefill(system_text).n_tokens  # untouched by the forks


def streaming_chat(model: kvstash.Model, turns, max_tokens: int) -> None:
    chat = kvstash.Session(model, SYSTEM)
    print(f"session: system block of {chat.system_tokens} tokens")
    for i, turn in enumerate(turns):
        print(f"user: {turn}\nassistant: ", end="", flush=True)
        n_pieces = 0

        def show(token: int, text: str) -> bool:
            nonlocal n_pieces
            n_pieces += 1
            print(text, end="", flush=True)
            return True  # False would stop the reply here

        chat.reply(turn, max_tokens, callback=show, temperature=0.7, top_p=0.9, seed=i)
        stats = chat.last_turn
        print(f"\n  [{n_pieces} pieces; prompt {stats['prompt_tokens']} tokens: {stats['computed']} computed, "
              f"{stats['reused']} reused]")
        assert stats["reused"] >= chat.system_tokens  # the system prompt is never computed again
    # The same again, as an iterator.
    print("user: Thanks!\nassistant: ", end="")
    for piece in chat.reply("Thanks!", max_tokens, stream=True, temperature=0):
        print(piece, end="", flush=True)
    print()
    assert chat.undo() and len(chat.messages) == 1 + 2 * len(turns)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("KVSTASH_MODEL", DEFAULT_MODEL))
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    model = kvstash.Model(args.model, threads=args.threads)
    manual_loop(model, ["When are you open on Saturday?", "Do you have gluten-free bread today?"], args.max_tokens)
    streaming_chat(model, ["How much is a croissant?", "And a cinnamon roll?"], args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
