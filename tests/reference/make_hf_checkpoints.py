#!/usr/bin/env python3
"""Tiny random-weight Hugging Face model directories (`kvstash -m DIR`) with the GGUF llama.cpp's converter
makes of each, and transformers fp32 logits (tests/fixtures/hf/).

For every variant this writes
  tests/fixtures/hf/<name>/            -- the directory as save_pretrained writes it: config.json,
                                          model.safetensors (or model-0000x-of-0000y.safetensors + index),
                                          tokenizer.json, tokenizer_config.json (generation_config.json dropped)
  (llama3_rope_f32: Llama 3.1 "llama3" rope scaling, a 160-token sequence past original_max_position_embeddings 64)
  tests/fixtures/hf/<name>.gguf        -- convert_hf_to_gguf.py <dir> --outtype <dtype of the dir> (f32, f16, bf16)
  tests/fixtures/hf/llama_f32.q8_0.gguf -- the same converter with --outtype q8_0 (for `--quantize q8_0`)
  tests/fixtures/hf/<name>.json        -- transformers fp32 logits for the token sequences below, the converter's
                                          pre-tokenizer name, tokenizer ids for a few strings

Method:
  1. The tiny byte-level BPE tokenizer of make_recurrent_models.train_tokenizer (320 ids, <|endoftext|> = 0), its
     pre-tokenizer replaced per family by the family's real one: llama 3's and Qwen2's Split regex (+ ByteLevel
     without regex), GPT-2's ByteLevel(use_regex=True). kvstash picks the GGUF `tokenizer.ggml.pre` name from that
     regex as llama.cpp's converter would from its hash; the converter here is patched to write that name.
  2. The model built from a config (torch.manual_seed), every parameter redrawn by make_transformer_models.redraw
     (norm weights 1 + N(0, 0.2), biases N(0, 0.2), ...), saved with save_pretrained in the variant's dtype
     (safetensors), sharded with max_shard_size for the `_sharded` variant. GPT-2 gets `n_ctx` (= n_positions) as
     make_transformer_models.py explains.
  3. transformers logits: the saved directory loaded back with from_pretrained(dtype=float32), eager attention,
     model.eval(), one forward over each whole token sequence, use_cache=False.
  4. The GGUF: convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist, llamacpp_sdist.py) with --outtype the
     directory's dtype, so that kvstash's fingerprint of the directory must equal the GGUF's.

Run: python tests/reference/make_hf_checkpoints.py [--only NAME]   (~1 min on 2 cores)
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)
import llamacpp_sdist  # noqa: E402
from make_recurrent_models import train_tokenizer  # noqa: E402
from make_transformer_models import redraw  # noqa: E402

import torch  # noqa: E402

VOCAB = 320
OUT = os.path.join(refutil.FIXTURES, "hf")
SEQUENCES = [[0, 17, 200, 45, 3, 99, 301, 12, 7, 250, 64, 64, 1, 319, 88, 150, 42, 5, 260, 30],
             [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111]]
TEXTS = ["Hello world", " the quick brown fox", "It's 2026: 12345 apples!", "  two  spaces\nnew line",
         "<|endoftext|>after special", "héllo wörld ☃"]

# Pre-tokenizer regexes as the families' tokenizer.json files write them.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
                       bos_token_id=0, eos_token_id=0)


def llama3_rope_config():
    # Llama 3.1 "llama3" rope scaling shrunk to the tiny model: head_dim 16 (8 frequencies, wavelengths 2*pi*10000^(i/8):
    # 6.3, 19.9, 62.8, ...), original context 64, so frequency 0 keeps factor 1, 1 and 2 are in the smooth band and the
    # rest get `factor`; the long sequence goes past position 64.
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 64},
                       tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)


def qwen2_config():
    from transformers import Qwen2Config
    return Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                       use_sliding_window=False, bos_token_id=None, eos_token_id=0)


def gpt2_config():
    from transformers import GPT2Config
    return GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32, n_inner=None,
                      activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)


def gemma3_config():
    from transformers import Gemma3TextConfig
    return Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=128, rms_norm_eps=1e-6, query_pre_attn_scalar=16,
        sliding_window=8, sliding_window_pattern=6, final_logit_softcapping=None, attn_logit_softcapping=None,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)


VARIANTS = [
    dict(name="llama_f32", make_config=llama_config, cls="LlamaForCausalLM", dtype="f32", pre="llama-bpe",
         regex=LLAMA3_REGEX, seed=501, shard=None, extra_outtypes=["q8_0"]),
    dict(name="qwen2_f32_sharded", make_config=qwen2_config, cls="Qwen2ForCausalLM", dtype="f32", pre="qwen2",
         regex=QWEN2_REGEX, seed=502, shard="60KB"),
    dict(name="gpt2_f32", make_config=gpt2_config, cls="GPT2LMHeadModel", dtype="f32", pre="gpt-2", regex=None,
         seed=503, shard=None),
    dict(name="gemma3_bf16", make_config=gemma3_config, cls="Gemma3ForCausalLM", dtype="bf16", pre="gpt-2",
         regex=None, seed=504, shard=None),
    dict(name="llama3_rope_f32", make_config=llama3_rope_config, cls="LlamaForCausalLM", dtype="f32",
         pre="llama-bpe", regex=LLAMA3_REGEX, seed=506, shard=None,
         sequences=[SEQUENCES[0], [int(t) for t in np.random.default_rng(506).integers(0, VOCAB, 160)]]),
    dict(name="llama_f16", make_config=llama_config, cls="LlamaForCausalLM", dtype="f16", pre="llama-bpe",
         regex=LLAMA3_REGEX, seed=505, shard=None),
]
TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def family_tokenizer(base, regex):
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    tok = Tokenizer.from_str(base.to_str())
    if regex is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


def save_dir(v, base_tok, model_dir):
    import transformers
    from transformers import PreTrainedTokenizerFast
    config = v["make_config"]()
    config._attn_implementation = "eager"
    torch.manual_seed(v["seed"])
    model = getattr(transformers, v["cls"])(config).to(torch.float32)
    redraw(model, v["seed"])
    model = model.to(TORCH_DTYPE[v["dtype"]])
    kwargs = {"max_shard_size": v["shard"]} if v["shard"] else {}
    model.save_pretrained(model_dir, **kwargs)
    tok = family_tokenizer(base_tok, v["regex"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token=None, add_bos_token=False)
    fast.save_pretrained(model_dir)
    for extra in ("generation_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(model_dir, extra)):
            os.remove(os.path.join(model_dir, extra))
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        tcfg = json.load(f)
    tcfg["chat_template"] = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|endoftext|>{% endfor %}"
                             "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(tcfg, f, indent=2)
    if v["cls"] == "GPT2LMHeadModel":
        path = os.path.join(model_dir, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg.setdefault("n_ctx", cfg["n_positions"])
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)


@torch.no_grad()
def reference_logits(v, model_dir, sequences):
    import transformers
    model = getattr(transformers, v["cls"]).from_pretrained(model_dir, dtype=torch.float32,
                                                            attn_implementation="eager")
    model.eval()
    out = []
    for seq in sequences:
        logits = model(torch.tensor([seq]), use_cache=False).logits[0].float().numpy()
        out.append(refutil.f32_rows(logits))
    return out


def build(v, base_tok, conv):
    name = v["name"]
    model_dir = os.path.join(OUT, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    save_dir(v, base_tok, model_dir)
    from transformers import AutoTokenizer
    hf_tok = AutoTokenizer.from_pretrained(model_dir)
    token_ids = {t: hf_tok.encode(t, add_special_tokens=False) for t in TEXTS}
    sequences = v.get("sequences", SEQUENCES)
    logits = reference_logits(v, model_dir, sequences)
    gguf_path = os.path.join(OUT, name + ".gguf")
    with tempfile.TemporaryDirectory(prefix="kvstash_hf_") as tmp:
        # The converter writes general.name from the folder name; convert a copy so no __pycache__ etc. lands.
        copy = os.path.join(tmp, name)
        shutil.copytree(model_dir, copy)
        conv.convert(copy, gguf_path, v["dtype"], pre_tokenizer=v["pre"])
        for outtype in v.get("extra_outtypes", []):
            # what `kvstash -m DIR --quantize <outtype>` must equal (fingerprint and logits)
            conv.convert(copy, os.path.join(OUT, f"{name}.{outtype}.gguf"), outtype, pre_tokenizer=v["pre"])
    refutil.write_json(os.path.join(OUT, name + ".json"), {
        "generator": refutil.generator(__file__),
        "versions": refutil.versions(),
        "method": "transformers from_pretrained(dir, dtype=float32, eager), one forward per sequence, "
                  "use_cache=False; GGUF by convert_hf_to_gguf.py --outtype " + v["dtype"],
        "class": v["cls"], "dtype": v["dtype"], "pre": v["pre"], "sharded": bool(v["shard"]),
        "sequences": sequences, "logits": logits, "texts": TEXTS,
        "token_ids": [token_ids[t] for t in TEXTS],
    })
    print(f"{name}: {sorted(os.listdir(model_dir))}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    base_tok = train_tokenizer()
    with llamacpp_sdist.Converter() as conv:
        for v in VARIANTS:
            if args.only and v["name"] != args.only:
                continue
            build(v, base_tok, conv)


if __name__ == "__main__":
    main()
