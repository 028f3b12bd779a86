#!/usr/bin/env python3
"""Tiny random-weight Qwen2 and GPT-2 transformers converted to GGUF by llama.cpp's own converter, with
transformers fp32 and llama.cpp logits as oracles (tests/fixtures/qwen2/, tests/fixtures/gpt2/).

For every variant this writes
  tests/fixtures/<family>/<name>.gguf  -- made by llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36
                                          sdist, see llamacpp_sdist.py) from a Hugging Face model directory
  tests/fixtures/<family>/<name>.json  -- reference logits, greedy continuations and the config
and tests/fixtures/<family>/README.md gets the gguf-py dump of each GGUF (metadata, tensors).

Method (the same as make_recurrent_models.py, whose tokenizer, oracle and GGUF helpers this reuses):
  1. The tiny byte-level BPE tokenizer of make_recurrent_models.train_tokenizer (320 ids, <|endoftext|> = 0).
  2. Qwen2ForCausalLM / GPT2LMHeadModel built from a config (torch.manual_seed(seed)), EVERY parameter then
     redrawn from a seeded torch.Generator (redraw() below): default initialisation leaves biases 0 and norm
     weights 1 and would hide a bug in them. Saved with save_pretrained plus the tokenizer.
  3. GPT-2: transformers 5.x does not write `n_ctx` to config.json; the converter reads it, so it is added
     (= n_positions) before converting.
  4. convert_hf_to_gguf.py DIR --outtype f32|q8_0, get_vocab_base_pre patched to return "qwen2" (Qwen2) or
     "gpt-2" (GPT-2): the converter refuses tokenizers whose hash it does not know.
  5. Quantized variants (qwen2_q8_0, gpt2_q8_0): every Q8_0 matrix of the GGUF is dequantized with gguf-py and
     copied back into the transformers model (Qwen2 rows are not permuted by the converter; GPT-2's Conv1D
     weights are transposed back), so `logits` is the fp32 reference for exactly the stored weights;
     `logits_q8_activations` also rounds every matmul input to Q8_0 as ggml's CPU backend does; for Qwen2 it
     must reproduce llama.cpp to < 1e-4 (asserted; GPT-2's llama.cpp GELU reads an f16 table, so not there).
  6. transformers logits: model.eval(), one forward over all N_TOKENS tokens, use_cache=False, fp32, eager
     attention. greedy: generate(do_sample=False, use_cache=True, no EOS); margins from one no-cache forward.
  7. llama.cpp: llamacpp_oracle.py with the llama-cpp-python venv's Python on the same GGUF.
  8. Qwen2's tokenizer_config.json gets Qwen 2.5's chat template (tests/fixtures/chat/qwen2_5.json), which the
     converter writes to tokenizer.chat_template (asserted).
  9. Tokenizer (f32 variants): tests/fixtures/<family>/tokenizer_corpus.json holds the ids transformers'
     AutoTokenizer.from_pretrained(model_dir) gives (encode(text, add_special_tokens=False)) for every string
     of tokenizer_corpus.corpus_texts(): the oracle for the tokenizer kvstash builds from the converter's GGUF
     (for Qwen2, transformers applies Qwen2's own split rule, which the GGUF names as pre-tokenizer "qwen2").
  Cross-check `sensitivity_max_abs_diff`: max |logits change| when one kind of parameter (every layer) is set
  to a neutral value (biases 0, norm weights 1, position embeddings 0): each must be clearly above the parity
  tolerance, so the fixture fails an engine that ignores it.

Run: python tests/reference/make_transformer_models.py --llamacpp-python /path/venv-llamacpp/bin/python [--only NAME]
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import llamacpp_sdist  # noqa: E402
from make_recurrent_models import hf_greedy, hf_logits_stepwise, run_llamacpp, save_tokenizer, train_tokenizer  # noqa: E402
from tokenizer_corpus import corpus_texts  # noqa: E402
from recurrent_checks import check_tensors, dump_text, hf_logits, q8_0_roundtrip, read_gguf  # noqa: E402

import torch  # noqa: E402

VOCAB = 320
N_TOKENS = 48
PROMPT_LEN = 8
N_GEN = 24
TOKEN_SEED = 20261127
GPT2_N_POSITIONS = 64  # small, so the bounds check on learned positions is cheap to test


def qwen2_config():
    from transformers import Qwen2Config
    return Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                       use_sliding_window=False, pad_token_id=None, bos_token_id=None, eos_token_id=None)


def gpt2_config():
    from transformers import GPT2Config
    return GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=GPT2_N_POSITIONS,
                      n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                      pad_token_id=None, bos_token_id=None, eos_token_id=None)


VARIANTS = [
    dict(name="qwen2_f32", family="qwen2", make_config=qwen2_config, cls="Qwen2ForCausalLM", outtype="f32",
         pre="qwen2", seed=401,
         description="Qwen2: 3 layers, d_model 64, 4 heads / 2 KV heads (GQA), head_dim 16, q/k/v biases, NEOX "
                     "RoPE base 1e6, SwiGLU FFN 96, RMSNorm eps 1e-6, untied output"),
    dict(name="qwen2_q8_0", family="qwen2", make_config=qwen2_config, cls="Qwen2ForCausalLM", outtype="q8_0",
         pre="qwen2", seed=401,
         description="qwen2_f32 (same seed, same weights before quantization) converted with --outtype q8_0"),
    dict(name="gpt2_q8_0", family="gpt2", make_config=gpt2_config, cls="GPT2LMHeadModel", outtype="q8_0",
         pre="gpt-2", seed=402,
         description="gpt2_f32 (same seed, same weights before quantization) converted with --outtype q8_0: the "
                     "fused attn_qkv, token and position tables quantized"),
    dict(name="gpt2_f32", family="gpt2", make_config=gpt2_config, cls="GPT2LMHeadModel", outtype="f32",
         pre="gpt-2", seed=402,
         description=f"GPT-2 (distilgpt2's shape, scaled down): 3 layers, d_model 64, 4 heads, learned positions "
                     f"({GPT2_N_POSITIONS}), LayerNorm with bias eps 1e-5, fused QKV with bias, GELU (tanh) FFN "
                     f"256 with biases, tied output"),
]


def redraw(model, seed: int) -> dict:
    """Redraws every parameter (none keeps a default that would hide a bug). Returns name -> rule."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    rules = {}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            leaf = name.rsplit(".", 1)[-1]
            is_norm = "norm" in name or re.search(r"\.ln_(1|2|f)\.", name)
            if is_norm and leaf == "weight":
                v, rule = normal(shape, 0.2, 1.0), "1 + N(0, 0.2)"
            elif is_norm and leaf == "bias":
                v, rule = normal(shape, 0.2), "N(0, 0.2)"
            elif leaf == "bias":
                v, rule = normal(shape, 0.2), "N(0, 0.2)"
            elif name.endswith("wpe.weight"):
                v, rule = normal(shape, 0.5), "N(0, 0.5)"
            elif "embed" in name or name.endswith("wte.weight"):
                v, rule = normal(shape, 1.0), "N(0, 1)"
            elif name.startswith("lm_head"):
                v, rule = normal(shape, 1.25 / math.sqrt(shape[1])), "N(0, 1.25/sqrt(in))"
            elif len(shape) == 2:
                # GPT-2's Conv1D stores (in, out); nn.Linear (out, in)
                fan_in = shape[0] if ".c_" in name else shape[1]
                v, rule = normal(shape, 1.0 / math.sqrt(fan_in)), "N(0, 1/sqrt(in))"
            else:
                raise AssertionError(f"no redraw rule for {name} {shape}")
            p.copy_(v)
            rules[name] = rule
    return rules


def make_model(v):
    import transformers
    config = v["make_config"]()
    config._attn_implementation = "eager"
    torch.manual_seed(v["seed"])
    model = getattr(transformers, v["cls"])(config).to(torch.float32)
    rules = redraw(model, v["seed"])
    model.eval()
    return model, rules


@torch.no_grad()
def sensitivity(model, tokens, ref) -> dict:
    out = {}
    params = dict(model.named_parameters())
    kinds = {}
    for name in params:
        kinds.setdefault(re.sub(r"\.\d+\.", ".N.", name), []).append(name)
    for kind, names in sorted(kinds.items()):
        leaf = kind.rsplit(".", 1)[-1]
        is_norm = "norm" in kind or re.search(r"\.ln_(1|2|f)\.", kind)
        if leaf == "bias":
            label, make = "0", torch.zeros_like
        elif is_norm and leaf == "weight":
            label, make = "1", torch.ones_like
        elif kind.endswith("wpe.weight"):
            label, make = "0", torch.zeros_like
        else:
            continue
        saved = {n: params[n].detach().clone() for n in names}
        for n in names:
            params[n].copy_(make(params[n]))
        out[f"{kind} = {label}"] = refutil.f32(np.abs(hf_logits(model, tokens) - ref).max())
        for n in names:
            params[n].copy_(saved[n])
    assert np.abs(hf_logits(model, tokens) - ref).max() == 0, "sensitivity check did not restore the model"
    return out


def load_quantized_back(model, family: str, tensors: dict) -> list:
    """Copies the GGUF's dequantized Q8_0 matrices into the transformers model. Qwen2: no row permutation.
    GPT-2: Conv1D stores (in, out), the GGUF (out rows of in), so each matrix is transposed back; the tied
    token table is also the output matrix."""
    hf = dict(model.named_parameters())
    if family == "gpt2":
        gpt2_map = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_up": "mlp.c_fc",
                    "ffn_down": "mlp.c_proj"}
        copied = []
        for tn, t in tensors.items():
            if t["type"] in ("F32", "F16"):
                continue
            w = t["data"].astype(np.float32)
            if tn == "token_embd.weight":
                target = "transformer.wte.weight"
            elif tn == "position_embd.weight":
                target = "transformer.wpe.weight"
            else:
                _, bid, kind, leaf = tn.split(".")
                assert leaf == "weight", tn
                target = f"transformer.h.{bid}.{gpt2_map[kind]}.weight"
                w = np.ascontiguousarray(w.T)
            p = hf[target]
            assert tuple(p.shape) == w.shape, (tn, target, p.shape, w.shape)
            before = p.detach().numpy().copy()
            rel = float(np.abs(before - w).max() / np.abs(before).max())
            assert rel < 0.02, f"{tn} -> {target}: dequantized differs by {rel} (wrong mapping?)"
            with torch.no_grad():
                p.copy_(torch.from_numpy(w))
            copied.append(f"{tn} -> {target}")
        return copied
    leaf_map = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}
    copied = []
    for tn, t in tensors.items():
        if t["type"] in ("F32", "F16"):
            continue
        if tn == "token_embd.weight":
            target = "model.embed_tokens.weight"
        elif tn == "output.weight":
            target = "lm_head.weight"
        else:
            _, bid, kind, leaf = tn.split(".")
            assert leaf == "weight", tn
            target = f"model.layers.{bid}.{leaf_map[kind]}.weight"
        w = t["data"].astype(np.float32)
        p = hf[target]
        assert tuple(p.shape) == w.shape, (tn, target, p.shape, w.shape)
        before = p.detach().numpy().copy()
        rel = float(np.abs(before - w).max() / np.abs(before).max())
        assert rel < 0.02, f"{tn} -> {target}: dequantized differs by {rel} (wrong mapping?)"
        with torch.no_grad():
            p.copy_(torch.from_numpy(w))
        copied.append(f"{tn} -> {target}")
    return copied


def write_tokenizer_corpus(v, model_dir: str, out_dir: str) -> None:
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = corpus_texts()
    entries = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False)
        e = {"text": t, "ids": ids}
        decoded = tok.decode(ids)
        if decoded != t:
            e["decoded"] = decoded  # Qwen2's NFC normalizer: decode gives the normalized text
        entries.append(e)
    obj = {
        "generator": refutil.generator(__file__),
        "versions": refutil.versions(),
        "tokenizer": f"transformers AutoTokenizer.from_pretrained(<the {v['cls']} directory the GGUF was converted "
                     f"from>) = {type(tok).__name__}; ids = encode(text, add_special_tokens=False); decoded = "
                     f"decode(ids), only where it differs from text",
        "pre_tokenizer": v["pre"],
        "entries": entries,
    }
    refutil.write_json(os.path.join(out_dir, "tokenizer_corpus.json"), obj)


@torch.no_grad()
def logits_q8_activations(model, tokens) -> np.ndarray:
    """recurrent_checks.hf_logits_q8_activations, with GPT-2's Conv1D layers hooked as well as nn.Linear."""
    from transformers.pytorch_utils import Conv1D
    handles = [mod.register_forward_pre_hook(lambda mod, args: (q8_0_roundtrip(args[0]),) + tuple(args[1:]))
               for mod in model.modules() if isinstance(mod, (torch.nn.Linear, Conv1D))]
    try:
        return hf_logits(model, tokens)
    finally:
        for h in handles:
            h.remove()


def fixture_config(v, model, meta) -> dict:
    c = model.config
    out = dict(architecture=v["family"], hf_architecture=v["cls"], n_vocab=VOCAB, outtype=v["outtype"],
               tokenizer_pre=meta["tokenizer.ggml.pre"])
    if v["family"] == "qwen2":
        out.update(n_embd=c.hidden_size, n_layer=c.num_hidden_layers, n_head=c.num_attention_heads,
                   n_head_kv=c.num_key_value_heads, head_dim=c.hidden_size // c.num_attention_heads,
                   n_ff=c.intermediate_size, rms_norm_eps=c.rms_norm_eps,
                   rope_theta=c.rope_parameters["rope_theta"], rope="NEOX (rotate halves)", qkv_bias=True,
                   tied_output=False, n_ctx_train=c.max_position_embeddings)
    else:
        out.update(n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head, n_head_kv=c.n_head,
                   head_dim=c.n_embd // c.n_head, n_ff=4 * c.n_embd, layer_norm_eps=c.layer_norm_epsilon,
                   activation=c.activation_function, position_embedding="learned (position_embd)",
                   n_ctx_train=c.n_positions, tied_output="output.weight" not in v["_tensors"])
    out["tensor_types"] = sorted({f"{t['type']}" for t in v["_tensors"].values()})
    return out


def build(v, tok, conv, llamacpp_python, tmp_root) -> None:
    t0 = time.time()
    name = v["name"]
    out_dir = os.path.join(refutil.FIXTURES, v["family"])
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=tmp_root)
    model_dir = os.path.join(tmp, name)  # the converter writes general.name from the folder name
    model, rules = make_model(v)
    model.save_pretrained(model_dir)
    save_tokenizer(tok, model_dir)
    if v["family"] == "qwen2":
        # Qwen 2.5's own chat template (as tests/fixtures/chat/qwen2_5.json records it), which the converter
        # writes to tokenizer.chat_template: kvstash must recognise it in a converted qwen2 GGUF.
        with open(os.path.join(refutil.FIXTURES, "chat", "qwen2_5.json"), encoding="utf-8") as f:
            template = json.load(f)["template"]
        cfg_path = os.path.join(model_dir, "tokenizer_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["chat_template"] = template
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2)
    if v["family"] == "gpt2":
        cfg_path = os.path.join(model_dir, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg.setdefault("n_ctx", cfg["n_positions"])  # transformers 5.x omits it; the converter needs it
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)

    if v["outtype"] == "f32":
        write_tokenizer_corpus(v, model_dir, out_dir)
    gguf_path = os.path.join(out_dir, name + ".gguf")
    conv.convert(model_dir, gguf_path, v["outtype"], pre_tokenizer=v["pre"])
    meta, tensors = read_gguf(gguf_path)
    v["_tensors"] = tensors
    check_tensors(tensors)
    assert meta["general.architecture"] == v["family"], meta["general.architecture"]
    assert meta["tokenizer.ggml.pre"] == v["pre"] and len(meta["tokenizer.ggml.tokens"]) == VOCAB
    if v["family"] == "qwen2":
        assert meta["tokenizer.chat_template"].startswith("{%- if tools %}"), "chat template not converted"

    rng = np.random.default_rng(TOKEN_SEED + v["seed"])
    tokens = rng.integers(1, VOCAB, size=N_TOKENS).tolist()
    prompt = tokens[:PROMPT_LEN]

    quant_note = None
    if v["outtype"] != "f32":
        unquant = hf_logits(model, tokens)
        quant_note = dict(copied_back=load_quantized_back(model, v["family"], tensors))
    logits = hf_logits(model, tokens)
    q8_act = None
    if quant_note is not None:
        quant_note["unquantized_weights_max_abs_diff"] = refutil.f32(np.abs(unquant - logits).max())
        q8_act = logits_q8_activations(model, tokens)
    stepwise = hf_logits_stepwise(model, tokens)
    cont, margins, argmax = hf_greedy(model, prompt)
    sens = sensitivity(model, tokens, logits) if v["outtype"] == "f32" else None

    ll_logits, ll_cont, ll_version = run_llamacpp(llamacpp_python, gguf_path, tokens, prompt, tmp)
    assert ll_logits.shape == logits.shape, (ll_logits.shape, logits.shape)
    diff = np.abs(ll_logits - logits)
    max_ref = float(np.abs(logits).max())
    if q8_act is not None:
        quant_note["logits_q8_activations_max_abs_diff_llamacpp"] = refutil.f32(np.abs(q8_act - ll_logits).max())
        quant_note["logits_q8_activations_max_abs_diff_logits"] = refutil.f32(np.abs(q8_act - logits).max())
        if v["family"] == "qwen2":  # llama.cpp's GELU reads an f16 table: gpt2 differs by more (as gpt2_f32)
            assert np.abs(q8_act - ll_logits).max() < 1e-4, "Q8_0 activation emulation does not reproduce llama.cpp"

    versions = refutil.versions()
    versions["llama_cpp_python"] = ll_version
    versions["converter"] = f"llama-cpp-python 0.3.36 sdist (sha256 {conv.sdist_sha256}) convert_hf_to_gguf.py"
    method = (
        f"{v['cls']} built from `config` (torch.manual_seed({v['seed']}), eager attention), every parameter then "
        f"redrawn from torch.Generator().manual_seed({v['seed']}) (rules in `weight_init`), saved with "
        f"save_pretrained together with a byte-level BPE tokenizer ({VOCAB} ids, trained with tokenizers' "
        f"BpeTrainer on tests/fixtures/text/persuasion_ch1-2.txt). "
        + ("config.json gets n_ctx = n_positions (transformers 5.x omits it; the converter reads it). "
           if v["family"] == "gpt2" else "")
        + f"GGUF written by llama.cpp's convert_hf_to_gguf.py --outtype {v['outtype']} from the llama-cpp-python "
        f"0.3.36 sdist, with TextModel.get_vocab_base_pre patched to return '{v['pre']}'. "
        + ("The Q8_0 GGUF matrices were dequantized with gguf-py and copied back into the transformers model "
           "before computing `logits` (`quantization`), so `logits` is the fp32 reference for the stored weights. "
           "`logits_q8_activations`: the same with every nn.Linear input rounded to Q8_0 as ggml's CPU backend "
           "does; it reproduces `llamacpp_logits` to float rounding. " if quant_note is not None else "")
        + f"`tokens`: numpy.random.default_rng({TOKEN_SEED + v['seed']}).integers(1, {VOCAB}, {N_TOKENS}). "
        f"`logits`: transformers, model.eval(), one forward of all tokens with use_cache=False, fp32, CPU (row i = "
        f"after tokens[0..i]). `llamacpp_logits`: llama-cpp-python Llama(logits_all=True, n_threads=2, F32 KV), one "
        f"eval of all tokens. `greedy.continuation`: transformers generate(do_sample=False, use_cache=True, "
        f"max_new_tokens={N_GEN}, no EOS); `greedy.top2_margin[k]`: top-1 minus top-2 logit before "
        f"continuation[k]; `greedy.llamacpp_continuation`: llama-cpp-python argmax one token at a time.")
    obj = {
        "model": name + ".gguf",
        "description": v["description"],
        "generator": refutil.generator(__file__),
        "versions": versions,
        "method": method,
        "config": fixture_config(v, model, meta),
        "weight_init": rules,
    }
    if quant_note is not None:
        obj["quantization"] = quant_note
    if sens is not None:
        obj["sensitivity_max_abs_diff"] = sens
    obj.update({
        "n_tokens": N_TOKENS,
        "tokens": tokens,
        "max_abs_ref": refutil.f32(max_ref),
        "max_abs_diff_transformers_llamacpp": refutil.f32(diff.max()),
        "cache_vs_no_cache_max_abs_diff": refutil.f32(np.abs(stepwise - logits).max()),
        "greedy": {
            "prompt": prompt,
            "continuation": cont,
            "llamacpp_continuation": ll_cont,
            "continuations_agree": cont == ll_cont,
            "first_disagreement": next((k for k in range(N_GEN) if cont[k] != ll_cont[k]), None),
            "no_cache_argmax_agrees": argmax == cont,
            "top2_margin": refutil.f32_list(margins),
            "min_top2_margin": refutil.f32(margins.min()),
        },
        "logits": refutil.f32_rows(logits),
        "llamacpp_logits": refutil.f32_rows(ll_logits),
    })
    if q8_act is not None:
        obj["logits_q8_activations"] = refutil.f32_rows(q8_act)
    refutil.write_json(os.path.join(out_dir, name + ".json"), obj)
    print(f"{name}: max|ref| {max_ref:.3f}  max|hf-llama.cpp| {diff.max():.3g}  cache-vs-nocache "
          f"{np.abs(stepwise - logits).max():.3g}  greedy agree {cont == ll_cont}  min margin {margins.min():.3g}  "
          f"sensitivity {sens}  ({time.time() - t0:.1f} s)", file=sys.stderr)


README_HEAD = """# Tiny {family} reference models

Written by `tests/reference/make_transformer_models.py` (method: its header and each JSON's `method`). Below: what
llama.cpp's converter wrote into each GGUF, dumped with gguf-py (tokenizer arrays abbreviated). Tensor shapes are
GGUF `ne` order: `ne[0]` is the contiguous dimension.

"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamacpp-python", default=os.environ.get("KVSTASH_LLAMACPP_PYTHON"),
                    help="python of a venv with llama-cpp-python==0.3.36 (default $KVSTASH_LLAMACPP_PYTHON)")
    ap.add_argument("--only", action="append", help="only this variant (repeatable)")
    args = ap.parse_args()
    if not args.llamacpp_python:
        ap.error("--llamacpp-python (or KVSTASH_LLAMACPP_PYTHON) is required")
    torch.set_num_threads(2)
    tok = train_tokenizer()
    with llamacpp_sdist.Converter() as conv, tempfile.TemporaryDirectory(prefix="kvstash_transformer_") as tmp_root:
        for v in VARIANTS:
            if args.only and v["name"] not in args.only:
                continue
            build(v, tok, conv, args.llamacpp_python, tmp_root)
    for family in sorted({v["family"] for v in VARIANTS}):
        dumps = []
        for v in VARIANTS:
            path = os.path.join(refutil.FIXTURES, family, v["name"] + ".gguf")
            if v["family"] == family and os.path.exists(path):
                dumps.append(dump_text(v["name"], *read_gguf(path)))
        if dumps:
            with open(os.path.join(refutil.FIXTURES, family, "README.md"), "w", encoding="utf-8", newline="\n") as f:
                f.write(README_HEAD.format(family=family) + "\n".join(dumps))


if __name__ == "__main__":
    main()
