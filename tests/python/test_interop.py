"""KV export to NumPy and to/from transformers' DynamicCache, on the committed tiny random-weight llama
GGUF (tests/fixtures/tiny/gqa_f32.gguf: GQA 4/2 heads, head_dim 24; made by
tests/reference/make_tiny_models.py). transformers reads the same GGUF (un-permuting q/k), so:
transformers continuing from a kvstash-computed cache gives the greedy tokens transformers gives from
scratch, and kvstash continuing from a transformers-computed cache gives kvstash's own from scratch.
The torch tests skip where torch/transformers are missing (the project .venv); run them with
an environment that has them (docs/python.md, "Hugging Face interop")."""

import numpy as np
import pytest

import kvstash
from kvstash import interop
from conftest import TINY

PROMPT = [1, 17, 42, 99, 5, 61, 23, 88, 7, 150, 31, 64, 12, 200, 77, 3, 45]
N_NEW = 12


def greedy_kvstash(model, state, n):
    out = []
    for _ in range(n):
        tok = int(np.argmax(state.logits))
        out.append(tok)
        model.eval(state, [tok])
    return out


def test_kv_layers_shapes_and_roundtrip(tiny_model):
    info = tiny_model.info
    state = kvstash.State(tiny_model, kv_type="f32")
    tiny_model.eval(state, PROMPT)
    layers = state.kv()
    assert len(layers) == info["n_kv_layers"]
    k, v = layers[0]
    assert k.shape == v.shape == (len(PROMPT), info["n_head_kv"], info["head_dim"])
    assert k.dtype == np.float32
    hf = state.kv("hf")
    assert not np.array_equal(hf[0][0], k)  # llama: the rotation layout differs
    assert np.array_equal(hf[0][1], v)  # V never does
    assert np.array_equal(interop._hf_to_gguf(hf[0][0], tiny_model._rope[1]), k)
    # Back into a State (HF layout in, bit-exact for f32): continuing equals continuing the original.
    rebuilt = interop.state_from_kv(tiny_model, PROMPT[:-1], [(a[:-1], b[:-1]) for a, b in hf], layout="hf")
    tiny_model.eval(rebuilt, PROMPT[-1:])
    assert np.array_equal(rebuilt.logits, state.logits)


def test_kv_import_rejects_bad_shapes(tiny_model):
    k = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(kvstash.InvalidArgument):
        kvstash.State._kv_import(tiny_model, [1, 2], k, k, "f32", 0)


def hf_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(TINY), gguf_file="gqa_f32.gguf", dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def hf_greedy(model, cache, first_token, position, n):
    import torch

    out, tok = [], first_token
    with torch.no_grad():
        for i in range(n):
            r = model(
                input_ids=torch.tensor([[tok]]),
                past_key_values=cache,
                use_cache=True,
                cache_position=torch.tensor([position + i]),
            )
            cache = r.past_key_values
            tok = int(r.logits[0, -1].argmax())
            out.append(tok)
    return out


def test_transformers_continues_a_kvstash_cache(tiny_model):
    hf = hf_model()
    import torch

    with torch.no_grad():
        scratch = hf.generate(torch.tensor([PROMPT]), max_new_tokens=N_NEW, do_sample=False)[0, len(PROMPT) :].tolist()
    state = kvstash.State(tiny_model, kv_type="f32")
    tiny_model.eval(state, PROMPT[:-1])
    cache = interop.to_dynamic_cache(state)
    assert cache.get_seq_length() == len(PROMPT) - 1
    assert hf_greedy(hf, cache, PROMPT[-1], len(PROMPT) - 1, N_NEW) == scratch


def test_kvstash_continues_a_transformers_cache(tiny_model):
    hf = hf_model()
    import torch

    with torch.no_grad():
        cache = hf(input_ids=torch.tensor([PROMPT[:-1]]), use_cache=True).past_key_values
    state = interop.from_dynamic_cache(tiny_model, cache, PROMPT[:-1])
    tiny_model.eval(state, PROMPT[-1:])
    scratch = kvstash.State(tiny_model, kv_type="f32")
    tiny_model.eval(scratch, PROMPT)
    np.testing.assert_allclose(state.logits, scratch.logits, rtol=0, atol=1e-4)
    assert greedy_kvstash(tiny_model, state, N_NEW) == greedy_kvstash(tiny_model, scratch, N_NEW)
