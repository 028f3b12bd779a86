#!/usr/bin/env python3
"""A tiny random-weight Gemma3ForCausalLM written as GGUF, with transformers fp32 logits as the oracle
(tests/fixtures/gemma3_tiny/).

Writes tests/fixtures/gemma3_tiny/<name>.gguf and <name>.json for:
  gemma3_tiny_f32   every matrix f32
  gemma3_tiny_q5_0  the same weights with every matrix quantized to Q5_0 by gguf-py (the type kvstash repacks
                    to Q8_0 at load); the transformers model gets the dequantized Q5_0 weights back, so its
                    logits are the fp32 reference for exactly the stored weights.

The model: 6 layers, d_model 64, 4 heads / 2 KV heads of 16, FFN 128 (GeGLU, tanh GELU), sliding window 8 with
pattern 3 (layers 0, 1, 3, 4 local, 2 and 5 global: both kinds and the window are exercised by 40 tokens), rope
base 1e6 global and 2e4 local (not llama.cpp's default 1e4, so a reader that ignores rope.freq_base_swa fails),
query_pre_attn_scalar 16 (= head_dim, the scale llama.cpp derives), RMSNorm eps 1e-6, tied output, no softcap.
Every parameter is redrawn from a seeded generator (norm weights N(0, 0.3), i.e. scales 1 + w: a reader that
forgets a norm fails).

The GGUF is written directly with gguf-py (llama.cpp's converter for Gemma 3 is not in the 0.3.36 sdist), as the
converter writes Gemma 3 (docs/gemma3.md): tensor names blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
attn_q_norm, attn_k_norm, post_attention_norm, ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm}, norm
weights stored as 1 + w, Q/K rows not permuted (NEOX rope), no output.weight (tied). No tokenizer: tests feed ids.

Oracle: model.eval(), one forward over all N_TOKENS tokens, use_cache=False, fp32, eager attention (the sliding
mask is transformers' own). Run: /work/venv-hf/bin/python tests/reference/make_gemma3_tiny.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)

import gguf  # noqa: E402
import torch  # noqa: E402
from gguf import quants  # noqa: E402

VOCAB = 96
N_TOKENS = 40
SEED = 1403
TOKEN_SEED = 20261126
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "gemma3_tiny")


def make_model():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    config = Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=128,
        rms_norm_eps=1e-6, query_pre_attn_scalar=16, sliding_window=8, sliding_window_pattern=3,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}},
        final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=1, attn_implementation="eager")
    torch.manual_seed(SEED)
    model = Gemma3ForCausalLM(config).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            std = 0.3 if "norm" in name else (1.0 if "embed" in name else 0.15)
            p.copy_(torch.randn(tuple(p.shape), generator=g, dtype=torch.float32) * std)
    assert [t for t in config.layer_types] == ["sliding_attention", "sliding_attention", "full_attention"] * 2, \
        config.layer_types
    return model, config


def tensors_of(model, config):
    """GGUF name -> (numpy f32 array in HF layout (rows, cols), is_matrix)."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": (sd["model.embed_tokens.weight"], True),
           "output_norm.weight": (1.0 + sd["model.norm.weight"], False)}
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm"}
    for il in range(config.num_hidden_layers):
        for hf, gg in names.items():
            w = sd[f"model.layers.{il}.{hf}.weight"]
            is_norm = "norm" in hf
            out[f"blk.{il}.{gg}.weight"] = ((1.0 + w) if is_norm else w, not is_norm)
    return out


def write_gguf(path, config, tensors, qtype):
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name("gemma3-tiny")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_rope_freq_base(config.rope_parameters["full_attention"]["rope_theta"])
    w.add_float32("gemma3.rope.freq_base_swa", config.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_sliding_window(config.sliding_window)
    w.add_uint32("gemma3.attention.sliding_window_pattern", 3)
    stored = {}
    for name, (a, is_matrix) in tensors.items():
        if is_matrix and qtype is not None:
            q = quants.quantize(a, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
            stored[name] = quants.dequantize(q, qtype).reshape(a.shape).astype(np.float32)
        else:
            w.add_tensor(name, a)
            stored[name] = a
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def load_back(model, config, stored):
    """Copies the stored (dequantized) matrices back into the transformers model."""
    hf = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj"}
    sd = model.state_dict()
    with torch.no_grad():
        sd["model.embed_tokens.weight"].copy_(torch.from_numpy(stored["token_embd.weight"]))
        for il in range(config.num_hidden_layers):
            for gg, name in hf.items():
                sd[f"model.layers.{il}.{name}.weight"].copy_(torch.from_numpy(stored[f"blk.{il}.{gg}.weight"]))


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    rng = np.random.default_rng(TOKEN_SEED)
    tokens = [2] + [int(t) for t in rng.integers(0, VOCAB, N_TOKENS - 1)]
    for name, qtype in (("gemma3_tiny_f32", None), ("gemma3_tiny_q5_0", gguf.GGMLQuantizationType.Q5_0)):
        model, config = make_model()
        path = os.path.join(OUT_DIR, name + ".gguf")
        stored = write_gguf(path, config, tensors_of(model, config), qtype)
        load_back(model, config, stored)
        with torch.no_grad():
            logits = model(torch.tensor([tokens]), use_cache=False).logits[0].numpy().astype(np.float32)
            # The window matters: the same tokens with full attention everywhere give other logits.
            saved = list(config.layer_types)
            for layer in model.model.layers:
                layer.self_attn.sliding_window = None
                layer.attention_type = "full_attention"
            model.config.layer_types = ["full_attention"] * config.num_hidden_layers
            no_window = model(torch.tensor([tokens]), use_cache=False).logits[0].numpy().astype(np.float32)
            model.config.layer_types = saved
        window_effect = float(np.abs(no_window - logits).max())
        refutil.write_json(os.path.join(OUT_DIR, name + ".json"), {
            "generator": refutil.generator(__file__),
            "command": refutil.command_line(),
            "versions": refutil.versions(),
            "model": name + ".gguf",
            "description": __doc__.split("\n\n")[2].strip(),
            "method": "transformers Gemma3ForCausalLM, eval(), one forward over all tokens, use_cache=False, fp32, "
                      "eager attention; the GGUF's matrices dequantized back into the model for quantized variants",
            "sliding_window": config.sliding_window,
            "layer_types": list(config.layer_types),
            "window_effect_max_abs": window_effect,
            "tokens": tokens,
            "logits": refutil.f32_rows(logits),
        })
        print(name, "max|logit|", float(np.abs(logits).max()), "window effect", window_effect)


if __name__ == "__main__":
    main()
