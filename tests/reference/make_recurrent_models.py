#!/usr/bin/env python3
"""Tiny random-weight recurrent and hybrid models (Mamba-1, Mamba-2, Granite-4.0-H style) converted to GGUF by
llama.cpp's own converter, with transformers fp32 and llama.cpp logits as oracles (tests/fixtures/recurrent/).

For every variant this writes
  tests/fixtures/recurrent/<name>.gguf  -- made by llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36
                                           sdist, see llamacpp_sdist.py) from a Hugging Face model directory
  tests/fixtures/recurrent/<name>.json  -- reference logits, greedy continuations and the config
and tests/fixtures/recurrent/README.md gets the gguf-py dump of every GGUF (metadata, tensors).

Method, per model:
  1. A tiny byte-level BPE tokenizer (tokenizers' BpeTrainer, ByteLevel pre-tokenizer/decoder, 256 byte
     tokens + <|endoftext|> (id 0) + merges up to VOCAB ids) is trained on tests/fixtures/text/persuasion_ch1-2.txt
     (deterministic: the trainer has no randomness; the script trains it twice and checks the results agree).
  2. The transformers model is built from its config (torch.manual_seed(seed)), then EVERY parameter is redrawn
     from a seeded torch.Generator (see redraw()): default initialisation leaves biases 0 and norms 1 and
     makes a bug in them invisible. Saved with save_pretrained (safetensors) plus the tokenizer.
  3. transformers 5.x writes a hybrid's layer_types as linear_attention/full_attention; llama.cpp's converter
     looks for "attention" and would silently write an all-recurrent GGUF. The saved config.json's layer_types
     are therefore rewritten to the converter's names ("mamba"/"attention", as Granite 4.0-H's own config.json
     has them) before converting, and the GGUF's per-layer head_count_kv is asserted.
  4. convert_hf_to_gguf.py DIR --outtype f32|q8_0, with get_vocab_base_pre patched to return "gpt-2" (the
     converter refuses tokenizers whose hash it does not know). Every GGUF tensor is asserted non-constant.
  5. Quantized variants: the Q8_0 GGUF matrices (token_embd, output, ssm_in, ssm_out, attention, ffn) are
     dequantized with gguf-py and copied back into the transformers model (attn_q/attn_k rows un-permuted from
     llama.cpp's RoPE order; ffn_gate/ffn_up re-joined into shared_mlp.input_linear), so `logits` is the fp32
     reference for exactly the stored weights. `logits_q8_activations` also rounds every matmul input to Q8_0
     as ggml's CPU backend does; it must reproduce llama.cpp to < 1e-4 (asserted).
  Cross-checks: every f32 fixture records `sensitivity_max_abs_diff` (recurrent_checks.sensitivity).
  6. transformers logits: model.eval(), one forward over all N_TOKENS tokens, use_cache=False, fp32.
     cache_vs_no_cache_max_abs_diff: the same tokens fed one at a time through transformers' cache.
  7. greedy: model.generate(prompt, do_sample=False, use_cache=True, max_new_tokens=N_GEN, no EOS stop);
     margins (top-1 minus top-2 logit) from one use_cache=False forward over prompt + continuation.
  8. llama.cpp: llamacpp_oracle.py run with the llama-cpp-python venv's Python on the same GGUF (logits_all,
     one eval of all tokens; greedy by argmax + eval of one token at a time).

Run (see tests/reference/README.md "Regenerating"):
  python tests/reference/make_recurrent_models.py --llamacpp-python /path/venv-llamacpp/bin/python [--only NAME]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import llamacpp_sdist  # noqa: E402
from recurrent_checks import (check_layer_pattern, check_tensors, dump_text, hf_logits,  # noqa: E402
                              hf_logits_q8_activations, load_quantized_back, read_gguf, sensitivity)

import torch  # noqa: E402

OUT_DIR = os.path.join(refutil.FIXTURES, "recurrent")
CORPUS = os.path.join(refutil.FIXTURES, "text", "persuasion_ch1-2.txt")
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_oracle.py")
VOCAB = 320          # a multiple of 16: the converter pads Mamba's vocab to 8 and Mamba-2's to 16 (see README)
N_TOKENS = 48
PROMPT_LEN = 8
N_GEN = 24
TOKEN_SEED = 20261126

# Granite multipliers: all different from 1 and from the defaults they replace, so a missed scale fails.
GRANITE_SCALES = dict(embedding_multiplier=2.5, residual_multiplier=0.6, attention_multiplier=0.15,
                      logits_scaling=2.0)


def mamba1_config():
    from transformers import MambaConfig
    return MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2,
                       conv_kernel=4, time_step_rank=8, use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5,
                       tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None)


def mamba2_config():
    from transformers import Mamba2Config
    return Mamba2Config(vocab_size=VOCAB, hidden_size=64, num_heads=8, head_dim=16, expand=2, n_groups=2,
                        state_size=16, conv_kernel=4, num_hidden_layers=2, use_bias=False, use_conv_bias=True,
                        layer_norm_epsilon=1e-5, chunk_size=16, tie_word_embeddings=False, pad_token_id=None,
                        bos_token_id=None, eos_token_id=None)


def granite_config(rope: bool):
    # rope=True is not used: for GraniteMoeHybridForCausalLM with any Mamba layer the converter writes
    # rope.scaling.finetuned = false, which llama.cpp reads as "no RoPE" whatever position_embedding_type says,
    # so a RoPE hybrid converted this way disagrees with transformers (see tests/reference/README.md).
    from transformers import GraniteMoeHybridConfig
    # intermediate_size == shared_intermediate_size: the converter writes feed_forward_length from
    # intermediate_size, and llama.cpp's dense (non-MoE) branch expects ffn_gate/up/down of that width.
    return GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, shared_intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=0, num_experts_per_tok=0,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=16, mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-5,
        position_embedding_type="rope" if rope else "nope",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0} if rope else None,
        attention_bias=False, tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        max_position_embeddings=4096, **GRANITE_SCALES)


VARIANTS = [
    dict(name="mamba1_f32", arch="mamba", make_config=mamba1_config, cls="MambaForCausalLM", outtype="f32",
         seed=101, description="Mamba-1: 2 layers, d_model 64, d_inner 128, d_state 16, d_conv 4, dt_rank 8, "
                               "conv bias, untied output"),
    dict(name="mamba2_f32", arch="mamba2", make_config=mamba2_config, cls="Mamba2ForCausalLM", outtype="f32",
         seed=202, description="Mamba-2: 2 layers, d_model 64, d_inner 128, 8 heads x 16, 2 groups, d_state 16, "
                               "d_conv 4, conv bias, untied output"),
    dict(name="mamba2_q8_0", arch="mamba2", make_config=mamba2_config, cls="Mamba2ForCausalLM", outtype="q8_0",
         seed=202, description="mamba2_f32 (same seed, same weights before quantization) converted with "
                               "--outtype q8_0"),
    dict(name="granitehybrid_f32", arch="granitehybrid", make_config=lambda: granite_config(False),
         cls="GraniteMoeHybridForCausalLM", outtype="f32", seed=303,
         description="Granite-4.0-H style hybrid without experts: 4 layers [mamba, attention, mamba, mamba], "
                     "d_model 64, Mamba-2 mixer 8 heads x 16, 2 groups, d_state 16; attention 4 heads / 2 KV "
                     "heads, head_dim 16, no positional encoding (nope); dense SwiGLU FFN 96; Granite "
                     "multipliers; untied output"),
    dict(name="granitehybrid_q8_0", arch="granitehybrid", make_config=lambda: granite_config(False),
         cls="GraniteMoeHybridForCausalLM", outtype="q8_0", seed=303,
         description="granitehybrid_f32 (same seed, same weights before quantization) converted with "
                     "--outtype q8_0"),
]


# ---------------------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    lines = [ln for ln in text.split("\n") if ln.strip()]

    def train():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(lines, trainer=trainer)
        return tok

    tok = train()
    assert tok.to_str() == train().to_str(), "BPE training is not deterministic"
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id("<|endoftext|>") == 0
    return tok


def save_tokenizer(tok, model_dir: str) -> None:
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token=None, add_bos_token=False)
    fast.save_pretrained(model_dir)


# ---------------------------------------------------------------------------------------------------------
# weights


def inv_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def redraw(model, seed: int, out_gain: float) -> dict:
    """Redraws every parameter (so none keeps a default that would hide a bug). Returns name -> rule."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    rules = {}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "A_log":
                # A = -exp(A_log) in [-8, -0.5]: some channels forget fast, some slowly.
                v, rule = torch.log(uniform(shape, 0.5, 8.0)), "log(U(0.5, 8))"
            elif leaf == "D":
                v, rule = uniform(shape, 0.5, 1.5), "U(0.5, 1.5)"
            elif leaf == "dt_bias" or name.endswith("dt_proj.bias"):
                # softplus(dt_bias) log-uniform in [0.01, 0.3] (the usual Mamba init range, a bit wider)
                dt = torch.exp(uniform(shape, math.log(0.01), math.log(0.3)))
                v, rule = inv_softplus(dt), "inv_softplus(exp(U(log 0.01, log 0.3)))"
            elif "conv1d" in name and leaf == "weight":
                v, rule = normal(shape, 0.4), "N(0, 0.4)"
            elif "norm" in name and leaf == "weight":
                v, rule = normal(shape, 0.1, 1.0), "1 + N(0, 0.1)"
            elif leaf == "bias":
                v, rule = normal(shape, 0.1), "N(0, 0.1)"
            elif "embed" in name:
                v, rule = normal(shape, 1.0), "N(0, 1)"
            elif name.startswith("lm_head"):
                std = out_gain / math.sqrt(shape[1])
                v, rule = normal(shape, std), f"N(0, {out_gain:g}/sqrt(in))"
            elif len(shape) == 2:
                v, rule = normal(shape, 1.0 / math.sqrt(shape[1])), "N(0, 1/sqrt(in))"
            else:
                raise AssertionError(f"no redraw rule for {name} {shape}")
            p.copy_(v)
            rules[name] = rule
    return rules


def make_model(v):
    import transformers
    config = v["make_config"]()
    torch.manual_seed(v["seed"])
    model = getattr(transformers, v["cls"])(config).to(torch.float32)
    out_gain = 1.25 * (GRANITE_SCALES["logits_scaling"] if v["arch"] == "granitehybrid" else 1.0)
    rules = redraw(model, v["seed"], out_gain)
    model.eval()
    return model, rules


# ---------------------------------------------------------------------------------------------------------
# transformers references


@torch.no_grad()
def hf_logits_stepwise(model, tokens) -> np.ndarray:
    ids = torch.tensor([tokens], dtype=torch.long)
    out = model(input_ids=ids[:, :1], use_cache=True)
    rows = [out.logits[0, -1]]
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None) or getattr(out, "cache_params")
    for i in range(1, len(tokens)):
        out = model(input_ids=ids[:, i:i + 1], cache=cache, use_cache=True)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None) or getattr(out, "cache_params")
        rows.append(out.logits[0, -1])
    return torch.stack(rows).float().numpy()


@torch.no_grad()
def hf_greedy(model, prompt):
    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, max_new_tokens=N_GEN, use_cache=True, eos_token_id=None,
                          pad_token_id=0, bos_token_id=None)
    out = model.generate(torch.tensor([prompt], dtype=torch.long), generation_config=gc,
                         attention_mask=torch.ones((1, len(prompt)), dtype=torch.long))
    cont = out[0, len(prompt):].tolist()
    assert len(cont) == N_GEN
    full = hf_logits(model, prompt + cont)
    rows = full[len(prompt) - 1: len(prompt) - 1 + N_GEN]
    srt = np.sort(rows, axis=1)
    margins = srt[:, -1] - srt[:, -2]
    argmax = rows.argmax(axis=1).tolist()
    return cont, margins, argmax


def run_llamacpp(python: str, gguf_path: str, tokens, prompt, tmp: str):
    req = os.path.join(tmp, "req.json")
    out = os.path.join(tmp, "out.npz")
    with open(req, "w") as f:
        json.dump(dict(model=gguf_path, tokens=tokens, prompt=prompt, n_gen=N_GEN), f)
    subprocess.run([python, ORACLE, req, out], check=True)
    z = np.load(out)
    return z["logits"], z["continuation"].tolist(), str(z["version"])


# ---------------------------------------------------------------------------------------------------------


def fixture_config(v, model, meta, kv) -> dict:
    c = model.config
    a = v["arch"]
    out = dict(architecture=a, hf_architecture=v["cls"], n_vocab=VOCAB, n_embd=c.hidden_size,
               n_layer=c.num_hidden_layers, tied_output=False, outtype=v["outtype"])
    if a == "mamba":
        out.update(d_inner=c.intermediate_size, d_state=c.state_size, d_conv=c.conv_kernel, dt_rank=c.time_step_rank,
                   conv_bias=c.use_conv_bias, proj_bias=c.use_bias, rms_norm_eps=c.layer_norm_epsilon,
                   ssm_a_stored_as="-exp(A_log)")
    elif a == "mamba2":
        out.update(d_inner=c.expand * c.hidden_size, d_state=c.state_size, d_conv=c.conv_kernel,
                   n_ssm_head=c.num_heads, ssm_head_dim=c.head_dim, n_group=c.n_groups, conv_bias=c.use_conv_bias,
                   proj_bias=c.use_bias, rms_norm_eps=c.layer_norm_epsilon, hf_chunk_size=c.chunk_size,
                   ssm_a_stored_as="-exp(A_log)", ssm_norm="gated RMSNorm per group: rmsnorm(y * silu(z)) over "
                   "d_inner/n_group channels")
    else:
        out.update(d_inner=c.mamba_expand * c.hidden_size, d_state=c.mamba_d_state, d_conv=c.mamba_d_conv,
                   n_ssm_head=c.mamba_n_heads, ssm_head_dim=c.mamba_d_head, n_group=c.mamba_n_groups,
                   conv_bias=c.mamba_conv_bias, proj_bias=c.mamba_proj_bias, rms_norm_eps=c.rms_norm_eps,
                   hf_chunk_size=c.mamba_chunk_size, ssm_a_stored_as="-exp(A_log)",
                   layer_types=["attention" if t == "full_attention" else "mamba" for t in c.layer_types],
                   head_count_kv_per_layer=kv, n_head=c.num_attention_heads, n_head_kv=c.num_key_value_heads,
                   head_dim=c.hidden_size // c.num_attention_heads, n_ff=c.shared_intermediate_size,
                   ffn="SwiGLU: down(silu(gate(x)) * up(x))", n_expert=c.num_local_experts,
                   position_embedding=c.position_embedding_type,
                   embedding_multiplier=c.embedding_multiplier, residual_multiplier=c.residual_multiplier,
                   attention_multiplier=c.attention_multiplier, logits_scaling=c.logits_scaling,
                   logits_scaling_meaning="logits = output(norm(h)) / logits_scaling",
                   attn_qk_rows="GGUF attn_q/attn_k rows carry llama.cpp's RoPE permute() (irrelevant without RoPE)")
    out["tensor_types"] = sorted({f"{t['type']}" for t in v["_tensors"].values()})
    return out


def build(v, tok, conv, llamacpp_python, tmp_root) -> tuple:
    t0 = time.time()
    name = v["name"]
    tmp = tempfile.mkdtemp(dir=tmp_root)
    model_dir = os.path.join(tmp, name)  # the converter writes general.name from the folder name
    model, rules = make_model(v)
    model.save_pretrained(model_dir)
    save_tokenizer(tok, model_dir)
    if v["arch"] == "granitehybrid":
        cfg_path = os.path.join(model_dir, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["layer_types"] = [{"linear_attention": "mamba", "full_attention": "attention"}[t]
                              for t in cfg["layer_types"]]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)

    gguf_path = os.path.join(OUT_DIR, name + ".gguf")
    log = conv.convert(model_dir, gguf_path, v["outtype"])
    meta, tensors = read_gguf(gguf_path)
    v["_tensors"] = tensors
    check_tensors(tensors)
    kv = check_layer_pattern(v, meta, model.config)
    assert meta["tokenizer.ggml.pre"] == "gpt-2" and len(meta["tokenizer.ggml.tokens"]) == VOCAB

    rng = np.random.default_rng(TOKEN_SEED)
    tokens = rng.integers(1, VOCAB, size=N_TOKENS).tolist()
    prompt = tokens[:PROMPT_LEN]

    quant_note = None
    if v["outtype"] != "f32":
        unquant = hf_logits(model, tokens)
        copied = load_quantized_back(model, v, tensors)
        quant_note = dict(copied_back=copied)
    logits = hf_logits(model, tokens)
    q8_act = None
    if quant_note is not None:
        quant_note["unquantized_weights_max_abs_diff"] = refutil.f32(np.abs(unquant - logits).max())
        q8_act = hf_logits_q8_activations(model, tokens)
        assert np.abs(hf_logits(model, tokens) - logits).max() == 0, "q8 activation hooks not removed"
    stepwise = hf_logits_stepwise(model, tokens)
    cont, margins, argmax = hf_greedy(model, prompt)
    sens = sensitivity(model, v, tokens, logits, GRANITE_SCALES) if v["outtype"] == "f32" else None

    ll_logits, ll_cont, ll_version = run_llamacpp(llamacpp_python, gguf_path, tokens, prompt, tmp)
    assert ll_logits.shape == logits.shape, (ll_logits.shape, logits.shape)
    diff = np.abs(ll_logits - logits)
    max_ref = float(np.abs(logits).max())
    if q8_act is not None:
        quant_note["logits_q8_activations_max_abs_diff_llamacpp"] = refutil.f32(np.abs(q8_act - ll_logits).max())
        quant_note["logits_q8_activations_max_abs_diff_logits"] = refutil.f32(np.abs(q8_act - logits).max())
        assert np.abs(q8_act - ll_logits).max() < 1e-4, "Q8_0 activation emulation does not reproduce llama.cpp"

    versions = refutil.versions()
    versions["llama_cpp_python"] = ll_version
    versions["converter"] = f"llama-cpp-python 0.3.36 sdist (sha256 {conv.sdist_sha256}) convert_hf_to_gguf.py"
    method = (
        f"{v['cls']} built from `config` (torch.manual_seed({v['seed']})), every parameter then redrawn from "
        f"torch.Generator().manual_seed({v['seed']}) (rules in `weight_init`), saved with save_pretrained together "
        f"with a byte-level BPE tokenizer ({VOCAB} ids, trained with tokenizers' BpeTrainer on "
        f"tests/fixtures/text/persuasion_ch1-2.txt). GGUF written by llama.cpp's convert_hf_to_gguf.py "
        f"--outtype {v['outtype']} from the llama-cpp-python 0.3.36 sdist, with TextModel.get_vocab_base_pre patched "
        f"to return 'gpt-2' (tokenizer.ggml.pre = gpt-2; the converter refuses tokenizers whose hash it does not "
        f"know). "
        + ("config.json layer_types rewritten from transformers 5.x's linear_attention/full_attention to "
           "mamba/attention before converting (the converter only recognises 'attention'); the GGUF's "
           "head_count_kv per layer is asserted. " if v["arch"] == "granitehybrid" else "")
        + ("The quantized GGUF matrices were dequantized with gguf-py and copied back into the transformers model "
           "(attn_q/attn_k rows un-permuted) before computing `logits`, so `logits` is the fp32 reference for "
           "exactly the stored weights (`quantization`). llama.cpp multiplies Q8_0 weights with activations it "
           "quantizes to Q8_0 (ggml's q8_0 x q8_0 dot product), so `llamacpp_logits` differ from `logits` by that "
           "activation rounding; past a step whose top-2 margin is below that difference the greedy "
           "continuations may part (`greedy.first_disagreement`). `logits_q8_activations`: transformers with "
           "dequantized weights and every nn.Linear input rounded to Q8_0 as ggml does (blocks of 32, d = "
           "max|x|/127, q = round-half-even(x/d), scale stored fp16); it reproduces llama.cpp to float rounding "
           "(`quantization.logits_q8_activations_max_abs_diff_llamacpp`), which confirms the Q8_0 weight mapping and "
           "the cause of the difference. " if quant_note is not None else "")
        + f"`tokens`: numpy.random.default_rng({TOKEN_SEED}).integers(1, {VOCAB}, {N_TOKENS}). `logits`: "
        f"transformers, model.eval(), one forward of all tokens with use_cache=False, fp32, CPU (row i = after "
        f"tokens[0..i]). `llamacpp_logits`: llama-cpp-python Llama(logits_all=True, n_threads=2), one eval of all "
        f"tokens. `greedy.continuation`: transformers generate(do_sample=False, use_cache=True, "
        f"max_new_tokens={N_GEN}, no EOS); `greedy.top2_margin[k]`: top-1 minus top-2 logit before continuation[k], "
        f"from one use_cache=False forward over prompt + continuation; `greedy.llamacpp_continuation`: "
        f"llama-cpp-python, eval prompt, then argmax (lowest id on ties) and eval one token at a time. "
        f"`cache_vs_no_cache_max_abs_diff`: transformers with its cache, one token per call, vs `logits`.")
    obj = {
        "model": name + ".gguf",
        "description": v["description"],
        "generator": refutil.generator(__file__),
        "versions": versions,
        "method": method,
        "config": fixture_config(v, model, meta, kv),
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
    refutil.write_json(os.path.join(OUT_DIR, name + ".json"), obj)
    elapsed = time.time() - t0
    print(f"{name}: max|ref| {max_ref:.3f}  max|hf-llama.cpp| {diff.max():.3g}  cache-vs-nocache "
          f"{np.abs(stepwise - logits).max():.3g}  greedy agree {cont == ll_cont}  min margin {margins.min():.3g}  "
          f"({elapsed:.1f} s)", file=sys.stderr)
    return log


README_HEAD = """# Recurrent and hybrid reference models

Written by `tests/reference/make_recurrent_models.py` (method: its header and each JSON's `method`; overview in
`tests/reference/README.md`). Below: what llama.cpp's converter wrote into each GGUF, dumped with gguf-py
(tokenizer arrays abbreviated). Tensor shapes are GGUF `ne` order: `ne[0]` is the contiguous dimension, so a
matrix `[n_in, n_out]` is stored as n_out rows of n_in values (transformers' `weight[out][in]`). Value ranges are
of the dequantized data. `granitehybrid.attention.head_count_kv[il] == 0` marks a recurrent layer;
`granitehybrid.rope.scaling.finetuned = False` is llama.cpp's "no RoPE" switch for this architecture.

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
    os.makedirs(OUT_DIR, exist_ok=True)
    tok = train_tokenizer()
    t0 = time.time()
    with llamacpp_sdist.Converter() as conv, tempfile.TemporaryDirectory(prefix="kvstash_recurrent_") as tmp_root:
        for v in VARIANTS:
            if args.only and v["name"] not in args.only:
                continue
            build(v, tok, conv, args.llamacpp_python, tmp_root)
    # The dump covers every GGUF present, whether made by this run or an earlier one.
    dumps = []
    for v in VARIANTS:
        path = os.path.join(OUT_DIR, v["name"] + ".gguf")
        if os.path.exists(path):
            dumps.append(dump_text(v["name"], *read_gguf(path)))
    with open(os.path.join(OUT_DIR, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(README_HEAD + "\n".join(dumps))
    print(f"total {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
