#!/usr/bin/env python3
"""Hugging Face model directories of the recurrent fixtures, written back from their GGUFs (issue 33 item 7).

tests/fixtures/recurrent/mamba1_f32.gguf was made by make_recurrent_models.py: a tiny random
transformers MambaForCausalLM converted by llama.cpp's convert_hf_to_gguf.py. This script undoes that
conversion with numpy only (no torch or transformers needed), so that the directory holds the checkpoint
transformers would have saved, up to float32 rounding of A:
  backbone.embeddings.weight        token_embd.weight
  backbone.layers.N.norm.weight     blk.N.attn_norm.weight
  backbone.layers.N.mixer.in_proj.weight / x_proj / dt_proj(.bias) / out_proj
                                    blk.N.ssm_in / ssm_x / ssm_dt(.bias) / ssm_out
  backbone.layers.N.mixer.conv1d.weight [d_inner, 1, k]  blk.N.ssm_conv1d.weight [d_inner, k] (the converter squeezes)
  backbone.layers.N.mixer.conv1d.bias   blk.N.ssm_conv1d.bias
  backbone.layers.N.mixer.A_log     log(-blk.N.ssm_a) (the converter writes A = -exp(A_log)), in float64, stored f32
  backbone.layers.N.mixer.D         blk.N.ssm_d
  backbone.norm_f.weight            output_norm.weight
  lm_head.weight                    output.weight (absent: tied embeddings)
config.json has the converter's inputs (hidden_size, state_size, expand, conv_kernel, time_step_rank, ...);
tokenizer.json is the GGUF's byte-level BPE (tokens, merges; <|endoftext|> as the special added token).

Mamba2ForCausalLM likewise from mamba2_f32.gguf (see mamba2()), GraniteMoeHybridForCausalLM from
granitehybrid_f32.gguf (see granite_hybrid()).

  python tests/reference/make_hf_recurrent_dirs.py      # writes tests/fixtures/hf/mamba1_f32/ and mamba2_f32/
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """(metadata dict, {name: float32 array in row-major [ne[-1], ..., ne[0]]}) of an all-F32 GGUF."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            item, n = take("<I"), take("<Q")
            return [value(item) for _ in range(n)]
        return take(_SCALARS[kind])

    magic, version, n_tensors, n_kv = take("<I"), take("<I"), take("<Q"), take("<Q")
    assert magic == 0x46554747 and version == 3, "not a GGUF v3 file"
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        kind, offset = take("<I"), take("<Q")
        assert kind == 0, f"{name}: only F32 tensors are read here"
        infos.append((name, dims, offset))
    alignment = meta.get("general.alignment", 32)
    base = (pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, dims, offset in infos:
        count = int(np.prod(dims))
        array = np.frombuffer(data, dtype="<f4", count=count, offset=base + offset)
        tensors[name] = array.reshape(list(reversed(dims))).copy()
    return meta, tensors


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def tokenizer_json(meta):
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta["tokenizer.ggml.token_type"]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, (t, kind) in enumerate(zip(tokens, types)) if kind == 3]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": meta["tokenizer.ggml.merges"]},
    }


def write_dir(name, config, meta, hf):
    out = os.path.join(FIXTURES, "hf", name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(meta), f, ensure_ascii=False)
    write_safetensors(os.path.join(out, "model.safetensors"), hf)
    print(f"{out}: {len(hf)} tensors", file=sys.stderr)


def mamba1():
    meta, g = read_gguf(os.path.join(FIXTURES, "recurrent", "mamba1_f32.gguf"))
    a = "mamba."
    n_layer = meta[a + "block_count"]
    d_model, d_inner = meta[a + "embedding_length"], meta[a + "ssm.inner_size"]
    hf = {"backbone.embeddings.weight": g["token_embd.weight"], "backbone.norm_f.weight": g["output_norm.weight"]}
    if "output.weight" in g:
        hf["lm_head.weight"] = g["output.weight"]
    for i in range(n_layer):
        b, p = f"blk.{i}.", f"backbone.layers.{i}."
        hf[p + "norm.weight"] = g[b + "attn_norm.weight"]
        m = p + "mixer."
        hf[m + "in_proj.weight"] = g[b + "ssm_in.weight"]
        hf[m + "x_proj.weight"] = g[b + "ssm_x.weight"]
        hf[m + "dt_proj.weight"] = g[b + "ssm_dt.weight"]
        hf[m + "dt_proj.bias"] = g[b + "ssm_dt.bias"]
        hf[m + "out_proj.weight"] = g[b + "ssm_out.weight"]
        hf[m + "conv1d.weight"] = g[b + "ssm_conv1d.weight"].reshape(d_inner, 1, -1)
        hf[m + "conv1d.bias"] = g[b + "ssm_conv1d.bias"]
        hf[m + "A_log"] = np.log(-g[b + "ssm_a"].astype(np.float64)).astype(np.float32)
        hf[m + "D"] = g[b + "ssm_d"]
    config = {
        "architectures": ["MambaForCausalLM"], "model_type": "mamba",
        "vocab_size": len(meta["tokenizer.ggml.tokens"]), "hidden_size": d_model, "state_size": meta[a + "ssm.state_size"],
        "num_hidden_layers": n_layer, "expand": d_inner // d_model, "conv_kernel": meta[a + "ssm.conv_kernel"],
        "time_step_rank": meta[a + "ssm.time_step_rank"], "layer_norm_epsilon": meta[a + "attention.layer_norm_rms_epsilon"],
        "use_bias": False, "use_conv_bias": True, "tie_word_embeddings": "output.weight" not in g,
        "bos_token_id": meta["tokenizer.ggml.bos_token_id"], "eos_token_id": meta["tokenizer.ggml.eos_token_id"],
        "pad_token_id": meta["tokenizer.ggml.eos_token_id"],
        "generator": "tests/reference/make_hf_recurrent_dirs.py (from tests/fixtures/recurrent/mamba1_f32.gguf)",
    }
    write_dir("mamba1_f32", config, meta, hf)


def mamba2():
    """Mamba2ForCausalLM: as Mamba 1, plus dt_bias, per-head A_log and D ([n_head]; the converter writes them
    [n_head, 1]) and the gated norm's weight ([d_inner]; written [n_group, d_inner / n_group])."""
    meta, g = read_gguf(os.path.join(FIXTURES, "recurrent", "mamba2_f32.gguf"))
    a = "mamba2."
    n_layer = meta[a + "block_count"]
    d_model, d_inner = meta[a + "embedding_length"], meta[a + "ssm.inner_size"]
    n_head = meta[a + "ssm.time_step_rank"]
    hf = {"backbone.embeddings.weight": g["token_embd.weight"], "backbone.norm_f.weight": g["output_norm.weight"]}
    if "output.weight" in g:
        hf["lm_head.weight"] = g["output.weight"]
    for i in range(n_layer):
        b, p = f"blk.{i}.", f"backbone.layers.{i}."
        hf[p + "norm.weight"] = g[b + "attn_norm.weight"]
        m = p + "mixer."
        hf[m + "in_proj.weight"] = g[b + "ssm_in.weight"]
        hf[m + "out_proj.weight"] = g[b + "ssm_out.weight"]
        hf[m + "conv1d.weight"] = g[b + "ssm_conv1d.weight"].reshape(g[b + "ssm_conv1d.weight"].shape[0], 1, -1)
        hf[m + "conv1d.bias"] = g[b + "ssm_conv1d.bias"]
        hf[m + "dt_bias"] = g[b + "ssm_dt.bias"]
        hf[m + "A_log"] = np.log(-g[b + "ssm_a"].astype(np.float64)).astype(np.float32).reshape(n_head)
        hf[m + "D"] = g[b + "ssm_d"].reshape(n_head)
        hf[m + "norm.weight"] = g[b + "ssm_norm.weight"].reshape(d_inner)
    config = {
        "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
        "vocab_size": len(meta["tokenizer.ggml.tokens"]), "hidden_size": d_model, "state_size": meta[a + "ssm.state_size"],
        "num_hidden_layers": n_layer, "expand": d_inner // d_model, "conv_kernel": meta[a + "ssm.conv_kernel"],
        "n_groups": meta[a + "ssm.group_count"], "num_heads": n_head, "head_dim": d_inner // n_head,
        "layer_norm_epsilon": meta[a + "attention.layer_norm_rms_epsilon"], "rms_norm": True,
        "use_bias": False, "use_conv_bias": True, "tie_word_embeddings": "output.weight" not in g,
        "bos_token_id": meta["tokenizer.ggml.bos_token_id"], "eos_token_id": meta["tokenizer.ggml.eos_token_id"],
        "pad_token_id": meta["tokenizer.ggml.eos_token_id"],
        "generator": "tests/reference/make_hf_recurrent_dirs.py (from tests/fixtures/recurrent/mamba2_f32.gguf)",
    }
    write_dir("mamba2_f32", config, meta, hf)


def unpermute(w, n_head):
    """The inverse of the converter's LlamaModel.permute (rotate-half rows -> GGUF's interleaved pairs)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def granite_hybrid():
    """GraniteMoeHybridForCausalLM without experts: Mamba 2 layers (model.layers.N.mamba.*), attention layers
    where layer_types says "attention" (q/k rows un-permuted: the converter permutes them as for Llama), the
    shared MLP's gate and up rows concatenated into shared_mlp.input_linear (gate first), Granite's multipliers."""
    meta, g = read_gguf(os.path.join(FIXTURES, "recurrent", "granitehybrid_f32.gguf"))
    a = "granitehybrid."
    n_layer = meta[a + "block_count"]
    d_model, d_inner = meta[a + "embedding_length"], meta[a + "ssm.inner_size"]
    n_ssm_head, n_head = meta[a + "ssm.time_step_rank"], meta[a + "attention.head_count"]
    kv_heads = meta[a + "attention.head_count_kv"]
    hf = {"model.embed_tokens.weight": g["token_embd.weight"], "model.norm.weight": g["output_norm.weight"]}
    if "output.weight" in g:
        hf["lm_head.weight"] = g["output.weight"]
    for i in range(n_layer):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        hf[p + "input_layernorm.weight"] = g[b + "attn_norm.weight"]
        hf[p + "post_attention_layernorm.weight"] = g[b + "ffn_norm.weight"]
        hf[p + "shared_mlp.input_linear.weight"] = np.concatenate([g[b + "ffn_gate.weight"], g[b + "ffn_up.weight"]])
        hf[p + "shared_mlp.output_linear.weight"] = g[b + "ffn_down.weight"]
        if kv_heads[i] > 0:
            hf[p + "self_attn.q_proj.weight"] = unpermute(g[b + "attn_q.weight"], n_head)
            hf[p + "self_attn.k_proj.weight"] = unpermute(g[b + "attn_k.weight"], kv_heads[i])
            hf[p + "self_attn.v_proj.weight"] = g[b + "attn_v.weight"]
            hf[p + "self_attn.o_proj.weight"] = g[b + "attn_output.weight"]
            continue
        m = p + "mamba."
        hf[m + "in_proj.weight"] = g[b + "ssm_in.weight"]
        hf[m + "out_proj.weight"] = g[b + "ssm_out.weight"]
        hf[m + "conv1d.weight"] = g[b + "ssm_conv1d.weight"].reshape(g[b + "ssm_conv1d.weight"].shape[0], 1, -1)
        hf[m + "conv1d.bias"] = g[b + "ssm_conv1d.bias"]
        hf[m + "dt_bias"] = g[b + "ssm_dt.bias"]
        hf[m + "A_log"] = np.log(-g[b + "ssm_a"].astype(np.float64)).astype(np.float32).reshape(n_ssm_head)
        hf[m + "D"] = g[b + "ssm_d"].reshape(n_ssm_head)
        hf[m + "norm.weight"] = g[b + "ssm_norm.weight"].reshape(d_inner)
    config = {
        "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
        "vocab_size": meta[a + "vocab_size"], "hidden_size": d_model, "num_hidden_layers": n_layer,
        "num_attention_heads": n_head, "num_key_value_heads": max(kv_heads),
        "layer_types": ["attention" if k > 0 else "mamba" for k in kv_heads],
        "intermediate_size": meta[a + "feed_forward_length"],
        "shared_intermediate_size": meta[a + "expert_shared_feed_forward_length"],
        "num_local_experts": meta[a + "expert_count"], "num_experts_per_tok": meta[a + "expert_used_count"],
        "mamba_n_heads": n_ssm_head, "mamba_d_head": d_inner // n_ssm_head, "mamba_n_groups": meta[a + "ssm.group_count"],
        "mamba_d_state": meta[a + "ssm.state_size"], "mamba_d_conv": meta[a + "ssm.conv_kernel"],
        "mamba_expand": d_inner // d_model, "mamba_chunk_size": 16, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "rms_norm_eps": meta[a + "attention.layer_norm_rms_epsilon"], "rope_theta": meta[a + "rope.freq_base"],
        "position_embedding_type": "rope" if meta.get(a + "rope.scaling.finetuned", True) else "nope",
        "embedding_multiplier": meta[a + "embedding_scale"], "residual_multiplier": meta[a + "residual_scale"],
        "attention_multiplier": meta[a + "attention.scale"], "logits_scaling": meta[a + "logit_scale"],
        "tie_word_embeddings": "output.weight" not in g,
        "bos_token_id": meta["tokenizer.ggml.bos_token_id"], "eos_token_id": meta["tokenizer.ggml.eos_token_id"],
        "pad_token_id": meta["tokenizer.ggml.eos_token_id"],
        "generator": "tests/reference/make_hf_recurrent_dirs.py (from tests/fixtures/recurrent/granitehybrid_f32.gguf)",
    }
    write_dir("granitehybrid_f32", config, meta, hf)


if __name__ == "__main__":
    mamba1()
    mamba2()
    granite_hybrid()
