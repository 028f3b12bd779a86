#!/usr/bin/env python3
"""Random-weight Mamba-2 and Granite-4.0-H-style hybrid GGUF models of a realistic size for speed benchmarks
(kvstash vs llama.cpp, bench/compare_llamacpp.py); not for accuracy.

Shapes (Mamba-2 mixers as in Granite 4.0-H: d_state 128, head_dim 64, n_group 1, d_conv 4, expand 2):
  mamba2         n_embd 1024, 32 layers, d_inner 2048 (32 heads x 64), vocab 32000, untied output
                 (Mamba-2 370m's depth and width, with Granite's d_state / grouping)
  granitehybrid  n_embd 1024, 24 layers, attention in layers 5, 11, 17, 23 (1 in 6; the rest Mamba-2 as above),
                 attention 8 query / 2 KV heads of 128 with no positional encoding (as Granite 4.0-H), dense SwiGLU
                 FFN 2048 in every layer, Granite multipliers, vocab 32000, untied output
Recurrent state per sequence: 32 heads x 64 x 128 floats = 1 MiB per Mamba layer (+ the conv window), read
and written once per decoded token; the weights are read once per token as in any model.

Method: the transformers model (Mamba2ForCausalLM / GraniteMoeHybridForCausalLM, no experts) is built from its
config and every parameter redrawn with tests/reference/make_recurrent_models.py's redraw() (sane scales: A in
[-8, -0.5], softplus(dt_bias) in [0.01, 0.3], conv N(0, 0.4), matrices N(0, 1/sqrt(in)), norms 1 + N(0, 0.1)),
saved with the fixtures' byte-level BPE tokenizer (320 ids; the converter pads the vocabulary to vocab_size
with [PAD] tokens), and converted by llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist,
tests/reference/llamacpp_sdist.py) with --outtype q8_0, and with --outtype f16 then quantized to Q4_K_M by
llama.cpp's llama_model_quantize (llama-cpp-python, run with --llamacpp-python); the f16 file is deleted.

Written to models/ (git ignores it):
  bench-mamba2-1024x32-q8_0.gguf, bench-mamba2-1024x32-q4_k.gguf,
  bench-granitehybrid-1024x24-q8_0.gguf, bench-granitehybrid-1024x24-q4_k.gguf

Run (a few minutes per model on 2 cores; ~2 GB of RAM per model):
  KVSTASH_VOCAB_SDIST=/path/llama_cpp_python-0.3.36.tar.gz /work/venv-hf/bin/python bench/make_recurrent_models.py \
      --llamacpp-python /work/venv-bench/bin/python [--only mamba2] [--types q8_0 q4_k]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llamacpp_sdist  # noqa: E402
import make_recurrent_models as fx  # noqa: E402  (tokenizer, redraw(), GRANITE_SCALES; imports torch)

import torch  # noqa: E402

N_EMBD, VOCAB, D_STATE, HEAD_DIM, N_GROUP, D_CONV = 1024, 32000, 128, 64, 1, 4
N_SSM_HEAD = 2 * N_EMBD // HEAD_DIM


def mamba2_config():
    from transformers import Mamba2Config
    return Mamba2Config(vocab_size=VOCAB, hidden_size=N_EMBD, num_heads=N_SSM_HEAD, head_dim=HEAD_DIM, expand=2,
                        n_groups=N_GROUP, state_size=D_STATE, conv_kernel=D_CONV, num_hidden_layers=32,
                        use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5, chunk_size=256,
                        tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None)


GRANITE_LAYERS = 24
GRANITE_ATTENTION = {5, 11, 17, 23}


def granite_config():
    from transformers import GraniteMoeHybridConfig
    layer_types = ["full_attention" if i in GRANITE_ATTENTION else "linear_attention" for i in range(GRANITE_LAYERS)]
    return GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=N_EMBD, intermediate_size=2048, shared_intermediate_size=2048,
        num_hidden_layers=GRANITE_LAYERS, num_attention_heads=8, num_key_value_heads=2, num_local_experts=0,
        num_experts_per_tok=0, layer_types=layer_types, mamba_n_heads=N_SSM_HEAD, mamba_d_head=HEAD_DIM,
        mamba_n_groups=N_GROUP, mamba_d_state=D_STATE, mamba_d_conv=D_CONV, mamba_expand=2, mamba_chunk_size=256,
        mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-5, position_embedding_type="nope",
        rope_parameters=None, attention_bias=False, tie_word_embeddings=False, pad_token_id=None, bos_token_id=None,
        eos_token_id=None, max_position_embeddings=32768, **fx.GRANITE_SCALES)


MODELS = {
    "mamba2": dict(file="bench-mamba2-1024x32", arch="mamba2", make_config=mamba2_config, cls="Mamba2ForCausalLM",
                   seed=2026),
    "granitehybrid": dict(file="bench-granitehybrid-1024x24", arch="granitehybrid", make_config=granite_config,
                          cls="GraniteMoeHybridForCausalLM", seed=2027),
}

QUANTIZE = r"""
import sys
import llama_cpp as L
src, dst, ftype = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = L.llama_model_quantize_default_params()
p.ftype = ftype
p.nthread = 2
rc = L.llama_model_quantize(src.encode(), dst.encode(), p)
sys.exit(rc)
"""


def save_hf(m, tok, model_dir):
    import transformers
    config = m["make_config"]()
    torch.manual_seed(m["seed"])
    model = getattr(transformers, m["cls"])(config).to(torch.float32)
    out_gain = 1.25 * (fx.GRANITE_SCALES["logits_scaling"] if m["arch"] == "granitehybrid" else 1.0)
    fx.redraw(model, m["seed"], out_gain)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(model_dir)
    del model
    fx.save_tokenizer(tok, model_dir)
    if m["arch"] == "granitehybrid":  # the converter's layer names (see make_recurrent_models.py step 3)
        cfg_path = os.path.join(model_dir, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["layer_types"] = [{"linear_attention": "mamba", "full_attention": "attention"}[t]
                              for t in cfg["layer_types"]]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
    return n_params


def check_hybrid_pattern(path):
    import gguf
    r = gguf.GGUFReader(path)
    field = r.get_field("granitehybrid.attention.head_count_kv")
    kv = [int(field.parts[i][0]) for i in field.data]
    want = [2 if i in GRANITE_ATTENTION else 0 for i in range(GRANITE_LAYERS)]
    assert kv == want, f"{path}: head_count_kv per layer {kv}, expected {want}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(MODELS))
    ap.add_argument("--types", nargs="+", default=["q8_0", "q4_k"], choices=["q8_0", "q4_k"])
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "models"))
    ap.add_argument("--llamacpp-python", default=os.environ.get("KVSTASH_LLAMACPP_PYTHON"),
                    help="python of a venv with llama-cpp-python==0.3.36 (for Q4_K_M)")
    args = ap.parse_args()
    if "q4_k" in args.types and not args.llamacpp_python:
        ap.error("q4_k needs --llamacpp-python (or KVSTASH_LLAMACPP_PYTHON)")
    torch.set_num_threads(2)
    os.makedirs(args.out_dir, exist_ok=True)
    tok = fx.train_tokenizer()
    with llamacpp_sdist.Converter() as conv, tempfile.TemporaryDirectory(prefix="kvstash_bench_recurrent_") as tmp:
        for name, m in MODELS.items():
            if args.only and name not in args.only:
                continue
            t0 = time.time()
            model_dir = os.path.join(tmp, m["file"])  # the converter takes general.name from the folder name
            n_params = save_hf(m, tok, model_dir)
            print(f"{name}: {n_params / 1e6:.0f} M parameters ({time.time() - t0:.0f} s)", file=sys.stderr)
            outputs = []
            if "q8_0" in args.types:
                path = os.path.join(args.out_dir, m["file"] + "-q8_0.gguf")
                conv.convert(model_dir, path, "q8_0")
                outputs.append(path)
            if "q4_k" in args.types:
                f16 = os.path.join(tmp, m["file"] + "-f16.gguf")
                conv.convert(model_dir, f16, "f16")
                path = os.path.join(args.out_dir, m["file"] + "-q4_k.gguf")
                subprocess.run([args.llamacpp_python, "-c", QUANTIZE, f16, path, "15"], check=True)  # Q4_K_M
                os.remove(f16)
                outputs.append(path)
            for path in outputs:
                if m["arch"] == "granitehybrid":
                    check_hybrid_pattern(path)
                print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB ({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
