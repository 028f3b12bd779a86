#!/usr/bin/env python3
"""Adapters on a tiny random Llama: a LoRA made with PEFT and converted by llama.cpp's convert_lora_to_gguf.py,
and a control vector in llama.cpp's --control-vector GGUF format, with transformers(+PEFT) fp32 and llama.cpp
logits as oracles (tests/fixtures/adapters/).

Writes
  tests/fixtures/adapters/base.gguf            -- llama, 4 layers, d_model 64, 4 heads / 2 KV heads, SwiGLU 96,
                                                  untied output; convert_hf_to_gguf.py --outtype f32 (llama.cpp's
                                                  converter from the llama-cpp-python 0.3.36 sdist, llamacpp_sdist.py)
  tests/fixtures/adapters/lora.gguf            -- PEFT LoRA r=4, lora_alpha=8 on q/k/v/o/gate/up/down and lm_head,
                                                  converted by convert_lora_to_gguf.py --outtype f32
  tests/fixtures/adapters/peft_lora/            -- that PEFT LoRA as PEFT saves it (adapter_config.json +
                                                  adapter_model.safetensors, F32), read directly by kvstash
  tests/fixtures/adapters/cvec.gguf            -- direction.1 .. direction.3 (F32, 64), written with gguf-py as
                                                  llama.cpp's cvector-generator writes them
  tests/fixtures/adapters/lora_wrong_shape.gguf -- a LoRA for a model with d_model 32 (refusal test)
  tests/fixtures/adapters/adapters.json        -- tokens and reference logits (below)

Method:
  1. Tokenizer: make_recurrent_models.train_tokenizer (320 ids). Model: LlamaForCausalLM from the config above,
     every parameter redrawn by make_transformer_models.redraw (seeded). save_pretrained + tokenizer, converted.
  2. LoRA: peft.get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=..., lora_dropout=0)), then
     every lora_A redrawn N(0, 1/sqrt(in)) and lora_B N(0, 1/sqrt(r)) from a seeded generator (PEFT's default
     B = 0 would make the adapter a no-op). PEFT scales by lora_alpha / r = 2. save_pretrained -> adapter
     directory -> convert_lora_to_gguf.py --base <model dir> --outtype f32.
  3. Logits: one forward of N_TOKENS tokens, fp32, eager attention, use_cache=False:
       logits_base            transformers, no adapter
       logits_lora_peft       transformers + PEFT (scale 1: the effective scale is alpha / r)
       logits_lora_llamacpp   llama.cpp, Llama(lora_path=lora.gguf, lora_scale=1.0)
       logits_lora_llamacpp_half  the same with lora_scale=0.5
       logits_cvec_hf         transformers with a forward hook adding CVEC_SCALE * direction.<il> to the output of
                              decoder layer il (il >= 1)
       logits_cvec_llamacpp   llama.cpp, llama_set_adapter_cvec(data = CVEC_SCALE * directions, il 1 .. n_layer)
       logits_cvec_llamacpp_range  the same with il_start = il_end = CVEC_RANGE (only that layer)
     llama.cpp runs in the llama-cpp-python venv (llamacpp_adapter_oracle.py), KV cache F32.
  Cross-checks recorded: max |PEFT - llama.cpp| (LoRA), max |hook - llama.cpp| (control vector), and how far
  each adapter moves the logits from the base (must be well above the parity tolerance).

Run: python tests/reference/make_adapters.py --llamacpp-python /path/venv-llamacpp/bin/python
     python tests/reference/make_adapters.py --peft-only   (only peft_lora/, checked against the recorded logits)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import llamacpp_sdist  # noqa: E402
import make_recurrent_models  # noqa: E402
import make_transformer_models  # noqa: E402

import gguf  # noqa: E402
import torch  # noqa: E402

OUT_DIR = os.path.join(refutil.FIXTURES, "adapters")
PEFT_DIR = os.path.join(OUT_DIR, "peft_lora")
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_adapter_oracle.py")
N_TOKENS = 24
SEED = 501
LORA_SEED = 502
CVEC_SEED = 503
N_LAYER = 4
N_EMBD = 64
CVEC_SCALE = 0.8
CVEC_RANGE = 2
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=make_recurrent_models.VOCAB, hidden_size=N_EMBD, intermediate_size=96,
                       num_hidden_layers=N_LAYER, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=256, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
                       pad_token_id=None, bos_token_id=None, eos_token_id=None)


def make_model():
    from transformers import LlamaForCausalLM
    config = llama_config()
    config._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    make_transformer_models.redraw(model, SEED)
    model.eval()
    return model


def logits_of(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].float().numpy()


def run_llamacpp(python: str, tmp: str, **req) -> np.ndarray:
    req_path = os.path.join(tmp, "req.json")
    out = os.path.join(tmp, "out.npz")
    with open(req_path, "w") as f:
        json.dump(req, f)
    subprocess.run([python, ORACLE, req_path, out], check=True)
    z = np.load(out)
    return z["logits"], str(z["version"])


def write_cvec(path: str, directions: dict) -> None:
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_uint32("controlvector.layer_count", len(directions))
    for layer, v in sorted(directions.items()):
        w.add_tensor(f"direction.{layer}", np.asarray(v, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_wrong_shape_lora(path: str) -> None:
    """A well-formed GGUF LoRA for a llama with d_model 32: attn_q's lora_a has 32 columns, not 64."""
    g = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 8.0)
    w.add_tensor("blk.0.attn_q.weight.lora_a", g.standard_normal((4, 32)).astype(np.float32))
    w.add_tensor("blk.0.attn_q.weight.lora_b", g.standard_normal((32, 4)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_peft_lora():
    """The PEFT LoRA on a fresh copy of the model (get_peft_model wraps it in place), A and B redrawn."""
    import peft
    lora_model = peft.get_peft_model(make_model(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS,
                                                                   lora_dropout=0.0, bias="none"))
    g = torch.Generator().manual_seed(LORA_SEED)
    with torch.no_grad():
        for name, p in sorted(lora_model.named_parameters()):
            if ".lora_A." in name:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    lora_model.eval()
    return lora_model


def save_peft_fixture(lora_model) -> None:
    """The PEFT adapter directory itself (adapter_config.json + adapter_model.safetensors), as kvstash reads it."""
    lora_model.save_pretrained(PEFT_DIR)
    readme = os.path.join(PEFT_DIR, "README.md")  # PEFT's model-card template: not part of the adapter
    if os.path.exists(readme):
        os.remove(readme)


def peft_only() -> None:
    """Writes only peft_lora/ and checks it is the adapter the recorded logits came from: its transformers+PEFT
    logits must equal adapters.json's logits_lora_peft bitwise (the fixture's other files stay as they are)."""
    lora_model = make_peft_lora()
    save_peft_fixture(lora_model)
    with open(os.path.join(OUT_DIR, "adapters.json")) as f:
        recorded = np.asarray(json.load(f)["logits_lora_peft"], dtype=np.float32)
    tokens = json.load(open(os.path.join(OUT_DIR, "adapters.json")))["tokens"]
    got = logits_of(lora_model, tokens).astype(np.float32)
    worst = float(np.max(np.abs(got - recorded)))
    print(f"peft_lora/: max |logits - recorded logits_lora_peft| = {worst}")
    assert worst == 0.0, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp-python", help="python of a venv with llama-cpp-python==0.3.36")
    ap.add_argument("--peft-only", action="store_true",
                    help="write only peft_lora/ and check it reproduces the recorded PEFT logits bitwise")
    args = ap.parse_args()
    if args.peft_only:
        peft_only()
        return
    if not args.llamacpp_python:
        ap.error("--llamacpp-python is required (unless --peft-only)")
    import peft

    os.makedirs(OUT_DIR, exist_ok=True)
    tok = make_recurrent_models.train_tokenizer()
    tmp = tempfile.mkdtemp(prefix="kvstash_adapters_")
    model_dir = os.path.join(tmp, "base")
    lora_dir = os.path.join(tmp, "lora")
    model = make_model()
    model.save_pretrained(model_dir)
    make_recurrent_models.save_tokenizer(tok, model_dir)
    tokens = np.random.default_rng(SEED).integers(1, make_recurrent_models.VOCAB, N_TOKENS).tolist()
    base_logits = logits_of(model, tokens)

    base_path = os.path.join(OUT_DIR, "base.gguf")
    lora_path = os.path.join(OUT_DIR, "lora.gguf")
    cvec_path = os.path.join(OUT_DIR, "cvec.gguf")
    with llamacpp_sdist.Converter() as conv:
        conv.convert(model_dir, base_path, "f32", pre_tokenizer="gpt-2")
        lora_model = make_peft_lora()
        lora_model.save_pretrained(lora_dir)
        save_peft_fixture(lora_model)
        conv.convert_lora(lora_dir, model_dir, lora_path, "f32")
        sdist_sha256 = conv.sdist_sha256
    peft_logits = logits_of(lora_model, tokens)

    g = np.random.default_rng(CVEC_SEED)
    directions = {il: (g.standard_normal(N_EMBD) * 0.5).astype(np.float32) for il in range(1, N_LAYER)}
    write_cvec(cvec_path, directions)
    write_wrong_shape_lora(os.path.join(OUT_DIR, "lora_wrong_shape.gguf"))

    # Control vector through transformers: a hook on each decoder layer il >= 1 adds scale * direction.
    hooks = []
    for il, layer in enumerate(model.model.layers):
        if il not in directions:
            continue
        v = torch.from_numpy(directions[il] * np.float32(CVEC_SCALE))

        def add(module, inputs, output, v=v):
            if isinstance(output, tuple):
                return (output[0] + v,) + tuple(output[1:])
            return output + v
        hooks.append(layer.register_forward_hook(add))
    cvec_hf = logits_of(model, tokens)
    for h in hooks:
        h.remove()

    py = args.llamacpp_python
    scaled = [[il, (v * np.float32(CVEC_SCALE)).tolist()] for il, v in sorted(directions.items())]
    lc_lora, version = run_llamacpp(py, tmp, model=base_path, tokens=tokens, lora=lora_path, lora_scale=1.0)
    lc_lora_half, _ = run_llamacpp(py, tmp, model=base_path, tokens=tokens, lora=lora_path, lora_scale=0.5)
    lc_cvec, _ = run_llamacpp(py, tmp, model=base_path, tokens=tokens, cvec=scaled, cvec_range=[1, N_LAYER])
    lc_cvec_range, _ = run_llamacpp(py, tmp, model=base_path, tokens=tokens, cvec=scaled,
                                    cvec_range=[CVEC_RANGE, CVEC_RANGE])
    lc_base, _ = run_llamacpp(py, tmp, model=base_path, tokens=tokens)

    def diff(a, b):
        return refutil.f32(np.max(np.abs(np.asarray(a) - np.asarray(b))))

    cross = {
        "lora_peft_vs_llamacpp": diff(peft_logits, lc_lora),
        "cvec_hf_vs_llamacpp": diff(cvec_hf, lc_cvec),
        "base_transformers_vs_llamacpp": diff(base_logits, lc_base),
        "lora_moves_logits_by": diff(peft_logits, base_logits),
        "lora_half_moves_logits_by": diff(lc_lora_half, lc_base),
        "cvec_moves_logits_by": diff(cvec_hf, base_logits),
        "cvec_range_moves_logits_by": diff(lc_cvec_range, lc_base),
        "cvec_range_vs_all_layers": diff(lc_cvec_range, lc_cvec),
    }
    print(json.dumps(cross, indent=1))
    assert cross["lora_peft_vs_llamacpp"] < 1e-3 and cross["cvec_hf_vs_llamacpp"] < 1e-3, cross
    assert min(cross["lora_moves_logits_by"], cross["cvec_moves_logits_by"], cross["cvec_range_vs_all_layers"],
               cross["lora_half_moves_logits_by"]) > 0.05, cross

    fixture = {
        "generator": refutil.generator(__file__),
        "command": refutil.command_line(),
        "versions": {**refutil.versions(), "peft": peft.__version__, "llama_cpp_python": version,
                     "llama_cpp_python_sdist_sha256": sdist_sha256},
        "model": refutil.rel(base_path),
        "lora": refutil.rel(lora_path),
        "lora_r": 4,
        "lora_alpha": 8.0,
        "lora_targets": TARGETS,
        "cvec": refutil.rel(cvec_path),
        "cvec_scale": CVEC_SCALE,
        "cvec_range": CVEC_RANGE,
        "tokens": tokens,
        "cross_check": cross,
        "logits_base": refutil.f32_rows(base_logits),
        "logits_lora_peft": refutil.f32_rows(peft_logits),
        "logits_lora_llamacpp": refutil.f32_rows(lc_lora),
        "logits_lora_llamacpp_half": refutil.f32_rows(lc_lora_half),
        "logits_cvec_hf": refutil.f32_rows(cvec_hf),
        "logits_cvec_llamacpp": refutil.f32_rows(lc_cvec),
        "logits_cvec_llamacpp_range": refutil.f32_rows(lc_cvec_range),
    }
    refutil.write_json(os.path.join(OUT_DIR, "adapters.json"), fixture)


if __name__ == "__main__":
    main()
