#!/usr/bin/env python3
"""Tiny random-weight Llama GGUF models and their reference logits (tests/fixtures/tiny/).

For every variant this writes
  tests/fixtures/tiny/<name>.gguf   -- a GGUF v3 file written with gguf-py's GGUFWriter, arch "llama"
  tests/fixtures/tiny/<name>.json   -- reference logits from Hugging Face transformers

The weights are drawn (seeded) directly in GGUF's layout, i.e. Q/K rows are already in the order
llama.cpp's convert_hf_to_gguf.py produces with its `permute()` (each head's rotary pairs interleaved
(x0,x1),(x2,x3),... = GGUF "normal" RoPE). transformers undoes that permutation when it loads a llama
GGUF, so its logits are the reference for an engine that reads the GGUF as llama.cpp would.

Reference method (per fixture, recorded in its "reference" key):
  * "transformers-gguf": AutoModelForCausalLM.from_pretrained(dir, gguf_file=<name>.gguf,
    dtype=float32, attn_implementation="eager"); transformers dequantizes every tensor to fp32 with
    gguf-py (gguf.quants.dequantize) and reverse-permutes attn_q/attn_k. model.eval(); one forward of
    all tokens (no KV cache, use_cache=False), positions 0..n-1, logits in fp32.
  * "transformers-gguf+rope_parameters": the same, but the config is read from the GGUF and then given
    rope_parameters = llama3 (factor, low/high_freq_factor, original_max_position_embeddings) before
    loading, because transformers' GGUF loader ignores rope_freqs.weight. The GGUF's rope_freqs.weight
    is computed exactly as convert_hf_to_gguf.py does for rope_type "llama3"; the script checks that
    transformers' inv_freq equals base_inv_freq / rope_freqs (see cross_check).

Cross-checks (recorded under "cross_check"): block-quantized tensors are also decoded with
transformers' separate torch dequantizer (transformers.integrations.gguf.dequant) and must agree with
gguf-py's. Every model is also built by hand -- LlamaForCausalLM from a
config made from the GGUF metadata, tensors dequantized with gguf-py, Q/K un-permuted by this script,
rope inv_freq divided by rope_freqs.weight where present -- and its logits must match transformers'
(max abs diff recorded). The same manual build without the Q/K un-permute must differ clearly (recorded),
so a parity test against these fixtures can fail on a RoPE-layout bug.

Quantized variants: Q8_0, Q4_0, Q4_1, F16 and BF16 weights are produced with gguf-py's own quantizer
(gguf.quants.quantize) from seeded normal floats. gguf-py cannot quantize K-quants, so Q4_K, Q5_K and
Q6_K blocks are random-but-valid bytes (random 6-bit scales/mins and quants; f16 super-block scales d,
dmin positive and chosen so each block is roughly zero-mean with the target spread). The reference only
ever sees what gguf-py dequantizes from the stored bytes.

Run: /path/to/venv/bin/python tests/reference/make_tiny_models.py  (about a minute on 2 cores)
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refutil  # noqa: E402  (sets HF_HUB_OFFLINE before transformers is imported)

import gguf  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

OUT_DIR = os.path.join(refutil.FIXTURES, "tiny")
N_TOKENS = 40

LLAMA3_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Real Llama 3.1 uses 8192; scaled down so the three regimes (unscaled, smoothed, scaled by 1/factor)
    # all occur among a head_dim-32 model's 16 frequencies with rope base 10000.
    "original_max_position_embeddings": 32,
}


def variant(name, *, dim, n_head, n_head_kv, ffn, vocab, n_layer=2, tied=False, wtype=QT.F32,
            embd_type=None, out_type=None, rope_base=10000.0, eps=1e-5, ctx=256, llama3=False, seed=0,
            note=""):
    return dict(name=name, dim=dim, n_head=n_head, n_head_kv=n_head_kv, head_dim=dim // n_head, ffn=ffn,
                vocab=vocab, n_layer=n_layer, tied=tied, wtype=wtype,
                embd_type=embd_type if embd_type is not None else wtype,
                out_type=out_type if out_type is not None else wtype,
                rope_base=rope_base, eps=eps, ctx=ctx, llama3=llama3, seed=seed, note=note)


GQA_SHAPE = dict(dim=96, n_head=4, n_head_kv=2, ffn=160, vocab=300)      # head_dim 24
QUANT_SHAPE = dict(dim=256, n_head=4, n_head_kv=2, ffn=512, vocab=320)   # head_dim 64; K-quant friendly

VARIANTS = [
    variant("gqa_f32", **GQA_SHAPE, seed=1,
            note="GQA 4/2 heads, untied output, all F32, odd sizes (dim 96, ffn 160, head_dim 24)"),
    variant("mha_tied_f32", dim=80, n_head=5, n_head_kv=5, ffn=144, vocab=300, tied=True, seed=2,
            rope_base=500000.0, eps=1e-6,
            note="n_head == n_head_kv (no GQA), tied output (no output.weight), F32, head_dim 16"),
    variant("llama3_rope_f32", dim=64, n_head=2, n_head_kv=1, ffn=128, vocab=300, seed=3, llama3=True,
            note="Llama 3.1 rope scaling via rope_freqs.weight (factor 8, low 1, high 4, original ctx 32; "
                 "rope base 10000, head_dim 32), GQA 2/1 heads, untied, F32"),
    # F16 / BF16 need no block alignment: reuse the odd GQA shape (same seed as gqa_f32, so the logits
    # differ from gqa_f32's only by the rounding of the weights).
    variant("gqa_f16", **GQA_SHAPE, seed=1, wtype=QT.F16,
            note="gqa_f32's weights rounded to F16 (all 2-D tensors incl. token_embd/output); norms F32"),
    variant("gqa_bf16", **GQA_SHAPE, seed=1, wtype=QT.BF16,
            note="gqa_f32's weights rounded to BF16 (all 2-D tensors incl. token_embd/output); norms F32"),
] + [
    variant(f"q_{t.name.lower()}", **QUANT_SHAPE, seed=10 + i, wtype=t,
            note=f"all 2-D tensors (token_embd, output, attn, ffn) {t.name}; norms F32; ffn_down rows span "
                 f"{512 // gguf.GGML_QUANT_SIZES[t][0]} blocks")
    for i, t in enumerate([QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_K, QT.Q6_K])
]

FILE_TYPE = {
    QT.F32: gguf.LlamaFileType.ALL_F32, QT.F16: gguf.LlamaFileType.MOSTLY_F16,
    QT.BF16: gguf.LlamaFileType.MOSTLY_BF16, QT.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
    QT.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, QT.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
    QT.Q4_K: gguf.LlamaFileType.MOSTLY_Q4_K_M, QT.Q5_K: gguf.LlamaFileType.MOSTLY_Q5_K_M,
    QT.Q6_K: gguf.LlamaFileType.MOSTLY_Q6_K,
}


# --------------------------------------------------------------------------------------------------
# tokenizer metadata: a byte-level BPE ("gpt2") vocabulary, so loaders that require one are satisfied


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BPE_TRAINING_TEXT = (
    "the quick brown fox jumps over the lazy dog. a tiny model for testing the inference engine: "
    "it reads the weights, runs the layers and writes the logits. there is nothing to learn here, "
    "the weights are random and the tokens are random too. "
) * 3


def tiny_vocab(vocab_size):
    """id 0 = <|endoftext|> (control), ids 1..256 = the 256 byte tokens, the rest = greedy BPE merges
    learned on a fixed English snippet (GPT-2 byte spelling, 'Ġ' = space)."""
    b2u = bytes_to_unicode()
    tokens = ["<|endoftext|>"] + [b2u[b] for b in range(256)]
    types = [gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * 256
    words = {}
    for i, w in enumerate(BPE_TRAINING_TEXT.split(" ")):
        w = ("" if i == 0 else " ") + w
        key = tuple(b2u[b] for b in w.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges = []
    seen = set(tokens)
    while len(tokens) < vocab_size:
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            raise ValueError("training text too small for the vocabulary size")
        best = max(sorted(pairs), key=lambda p: pairs[p])  # deterministic tie-break (sorted order)
        merged = best[0] + best[1]
        merges.append(f"{best[0]} {best[1]}")
        if merged not in seen:
            tokens.append(merged)
            types.append(gguf.TokenType.NORMAL)
            seen.add(merged)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return tokens, types, merges


# --------------------------------------------------------------------------------------------------
# weights


def llama3_rope_factors(base, head_dim, p):
    """convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors) for rope_type 'llama3'."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor, lo, hi, old = p["factor"], p["low_freq_factor"], p["high_freq_factor"], p["original_max_position_embeddings"]
    low_freq_wavelen = old / lo
    high_freq_wavelen = old / hi
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(rope_factors, dtype=np.float32)


def _f16(x):
    return np.asarray(x, dtype=np.float16).reshape(-1, 1).view(np.uint8)


def random_kquant(rng, qtype, rows, cols, std):
    """Random-but-valid K-quant blocks, shape (rows, cols/256*type_size) uint8."""
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, tsize), dtype=np.uint8)
    if qtype in (QT.Q4_K, QT.Q5_K):
        # layout: d f16 | dmin f16 | 12 bytes of 6-bit scales/mins | (Q5_K: 32 bytes high bits) | quants
        # value = d * sc_j * q - dmin * m_j. Dequantize twice with (d,dmin) = (1,0) and (0,1) to find the
        # two parts, then pick d, dmin per block: zero block mean, target std.
        one, zero = _f16(np.ones(nb)), _f16(np.zeros(nb))
        a = raw.copy(); a[:, 0:2] = one; a[:, 2:4] = zero
        b = raw.copy(); b[:, 0:2] = zero; b[:, 2:4] = one
        pa = gguf.quants.dequantize(a, qtype)  # sc_j * q
        pb = gguf.quants.dequantize(b, qtype)  # -m_j
        ma, mb = pa.mean(1), -pb.mean(1)
        mb = np.where(mb < 1, 1.0, mb)  # all mins zero: no offset available (rare); keep it valid
        dmin_over_d = ma / mb
        spread = (pa - dmin_over_d[:, None] * (-pb)).std(1)
        spread = np.where(spread <= 0, 1.0, spread)
        d = std / spread
        raw[:, 0:2] = _f16(d)
        raw[:, 2:4] = _f16(d * dmin_over_d)
    elif qtype == QT.Q6_K:
        # layout: ql[128] | qh[64] | int8 scales[16] | d f16 ; value = d * scale_j * (q - 32)
        a = raw.copy(); a[:, -2:] = _f16(np.ones(nb))
        spread = gguf.quants.dequantize(a, qtype).std(1)
        spread = np.where(spread <= 0, 1.0, spread)
        raw[:, -2:] = _f16(std / spread)
    else:
        raise ValueError(qtype)
    out = raw.reshape(rows, -1)
    assert np.isfinite(gguf.quants.dequantize(out, qtype)).all()
    return out


def encode_tensor(rng, w, qtype, std):
    """Returns (data, raw_dtype) for GGUFWriter.add_tensor; w is the float32 weight in (rows, cols)."""
    if qtype == QT.F32:
        return w.astype(np.float32), None
    if qtype == QT.F16:
        return w.astype(np.float16), None
    if qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        return random_kquant(rng, qtype, w.shape[0], w.shape[1], std), qtype
    return gguf.quants.quantize(w.astype(np.float32), qtype), qtype


def make_weights(v):
    """Float weights in GGUF layout (numpy (rows=out, cols=in), i.e. GGUF ne = [cols, rows])."""
    rng = np.random.default_rng(v["seed"])
    d, f, hd = v["dim"], v["ffn"], v["head_dim"]
    qd, kvd = v["n_head"] * hd, v["n_head_kv"] * hd
    ws = {}  # name -> (float weight, std)

    def mat(name, rows, cols, std):
        ws[name] = (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std), std)

    def norm(name, n):
        ws[name] = ((1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32), None)

    # tied: the embedding is also the output matrix, so keep logits O(1) rather than O(sqrt(dim))
    mat("token_embd.weight", v["vocab"], d, 1.5 / math.sqrt(d) if v["tied"] else 1.0)
    for i in range(v["n_layer"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", qd, d, 1 / math.sqrt(d))
        mat(p + "attn_k.weight", kvd, d, 1 / math.sqrt(d))
        mat(p + "attn_v.weight", kvd, d, 1 / math.sqrt(d))
        mat(p + "attn_output.weight", d, qd, 1 / math.sqrt(qd))
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", f, d, 1 / math.sqrt(d))
        mat(p + "ffn_up.weight", f, d, 1 / math.sqrt(d))
        mat(p + "ffn_down.weight", d, f, 1 / math.sqrt(f))
    norm("output_norm.weight", d)
    if not v["tied"]:
        mat("output.weight", v["vocab"], d, 1.5 / math.sqrt(d))
    return ws, rng


def write_gguf(v, path):
    ws, rng = make_weights(v)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"kvstash-tiny-{v['name']}")
    w.add_description("random weights for kvstash parity tests; generated by tests/reference/make_tiny_models.py")
    w.add_context_length(v["ctx"])
    w.add_embedding_length(v["dim"])
    w.add_block_count(v["n_layer"])
    w.add_feed_forward_length(v["ffn"])
    w.add_head_count(v["n_head"])
    w.add_head_count_kv(v["n_head_kv"])
    w.add_rope_freq_base(v["rope_base"])
    w.add_layer_norm_rms_eps(v["eps"])
    w.add_rope_dimension_count(v["head_dim"])
    w.add_vocab_size(v["vocab"])
    w.add_file_type(FILE_TYPE[v["wtype"]])
    tokens, types, merges = tiny_vocab(v["vocab"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)

    types_written = {}
    for name, (arr, std) in ws.items():
        if arr.ndim == 1:
            data, raw = arr, None
        else:
            qt = v["embd_type"] if name == "token_embd.weight" else v["out_type"] if name == "output.weight" else v["wtype"]
            data, raw = encode_tensor(rng, arr, qt, std)
        if raw is None:
            w.add_tensor(name, data)
        else:
            # uint8 block data: the writer derives the element shape from the byte shape
            assert data.dtype == np.uint8
            w.add_tensor(name, data, raw_dtype=raw)
        types_written[name] = (raw or (QT.F16 if data.dtype == np.float16 else QT.F32)).name
    if v["llama3"]:
        rf = llama3_rope_factors(v["rope_base"], v["head_dim"], LLAMA3_ROPE)
        w.add_tensor("rope_freqs.weight", rf)
        types_written["rope_freqs.weight"] = "F32"
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types_written


# --------------------------------------------------------------------------------------------------
# references


def hf_model_transformers(v, path):
    from transformers import AutoConfig, AutoModelForCausalLM

    d, fname = os.path.dirname(path), os.path.basename(path)
    kw = dict(gguf_file=fname, dtype=torch.float32, attn_implementation="eager")
    if v["llama3"]:
        config = AutoConfig.from_pretrained(d, gguf_file=fname)
        config.rope_parameters = {"rope_type": "llama3", "rope_theta": v["rope_base"], **LLAMA3_ROPE}
        kw["config"] = config
    model = AutoModelForCausalLM.from_pretrained(d, **kw)
    model.eval()
    return model


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute (GGUF row order -> HF row order)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_model_manual(v, path, do_unpermute=True):
    from transformers import LlamaConfig, LlamaForCausalLM

    reader = gguf.GGUFReader(path)
    config = LlamaConfig(
        vocab_size=v["vocab"], hidden_size=v["dim"], intermediate_size=v["ffn"], num_hidden_layers=v["n_layer"],
        num_attention_heads=v["n_head"], num_key_value_heads=v["n_head_kv"], head_dim=v["head_dim"],
        rms_norm_eps=float(np.float32(v["eps"])), max_position_embeddings=v["ctx"],
        rope_parameters={"rope_type": "default", "rope_theta": v["rope_base"]},
        tie_word_embeddings=v["tied"], attention_bias=False, mlp_bias=False, hidden_act="silu")
    config._attn_implementation = "eager"
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.float32)
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    sub = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {}
    rope_freqs = None
    for t in reader.tensors:
        arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        arr = arr.reshape([int(x) for x in reversed(t.shape)])
        base = t.name.rsplit(".", 1)[0]
        if base == "rope_freqs":
            rope_freqs = arr
            continue
        if base.startswith("blk."):
            _, i, leaf = base.split(".")
            if do_unpermute and leaf == "attn_q":
                arr = unpermute(arr, v["n_head"])
            if do_unpermute and leaf == "attn_k":
                arr = unpermute(arr, v["n_head_kv"])
            hf = f"model.layers.{i}.{sub[leaf]}"
        else:
            hf = names[base]
        sd[hf + ".weight"] = torch.from_numpy(arr.copy())
    if v["tied"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if v["tied"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if rope_freqs is not None:
        rot = model.model.rotary_emb
        rot.inv_freq = rot.inv_freq / torch.from_numpy(rope_freqs)
        rot.original_inv_freq = rot.inv_freq.clone()
    model.eval()
    return model


TORCH_DEQUANT_TYPES = (QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_K, QT.Q6_K)


def second_dequant_diff(path):
    """Max |gguf-py dequantize - transformers' own torch dequantizer| over the file's block tensors.

    transformers.integrations.gguf.dequant is an implementation independent of gguf.quants (used by
    transformers' newer GGUF path for other architectures), so agreement checks the bytes decode the
    same way in both."""
    from transformers.integrations.gguf.dequant import dequantize as torch_dequantize

    worst = 0.0
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type not in TORCH_DEQUANT_TYPES:
            continue
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        b = torch_dequantize(torch.from_numpy(np.array(t.data).reshape(-1)), int(t.tensor_type)).numpy()
        worst = max(worst, float(np.abs(a - b).max()))
    return worst


@torch.no_grad()
def logits_of(model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(OUT_DIR, exist_ok=True)
    vers = refutil.versions()
    summary = []
    for v in VARIANTS:
        path = os.path.join(OUT_DIR, v["name"] + ".gguf")
        types_written = write_gguf(v, path)
        tokens = [int(t) for t in np.random.default_rng(1000 + v["seed"]).integers(0, v["vocab"], N_TOKENS)]

        model = hf_model_transformers(v, path)
        ref = logits_of(model, tokens)
        cfg = model.config
        assert cfg.num_attention_heads == v["n_head"] and cfg.num_key_value_heads == v["n_head_kv"]
        assert cfg.head_dim == v["head_dim"] and cfg.tie_word_embeddings == v["tied"]
        assert cfg.vocab_size == v["vocab"]
        cross = {}
        manual = hf_model_manual(v, path)
        cross["manual_loader_max_abs_diff"] = refutil.f32(np.abs(logits_of(manual, tokens) - ref).max())
        if v["llama3"]:
            inv_hf = model.model.rotary_emb.inv_freq.numpy()
            inv_manual = manual.model.rotary_emb.inv_freq.numpy()
            cross["inv_freq_max_rel_diff_transformers_llama3_vs_rope_freqs"] = refutil.f32(
                np.abs(inv_hf / inv_manual - 1).max())
            assert cross["inv_freq_max_rel_diff_transformers_llama3_vs_rope_freqs"] < 1e-5, cross
            # without the scaling, the logits must differ
            plain = hf_model_manual(v, path)
            rot = plain.model.rotary_emb
            rot.inv_freq = 1.0 / (v["rope_base"] ** (torch.arange(0, v["head_dim"], 2, dtype=torch.float) / v["head_dim"]))
            cross["no_rope_scaling_max_abs_diff"] = refutil.f32(np.abs(logits_of(plain, tokens) - ref).max())
            assert cross["no_rope_scaling_max_abs_diff"] > 1e-2, cross
        if v["wtype"] in TORCH_DEQUANT_TYPES:
            cross["second_dequantizer_max_abs_diff"] = refutil.f32(second_dequant_diff(path))
            assert cross["second_dequantizer_max_abs_diff"] < 1e-6, cross
        wrong = hf_model_manual(v, path, do_unpermute=False)
        cross["without_qk_unpermute_max_abs_diff"] = refutil.f32(np.abs(logits_of(wrong, tokens) - ref).max())
        assert cross["manual_loader_max_abs_diff"] < 1e-4, cross
        assert cross["without_qk_unpermute_max_abs_diff"] > 1e-2, cross

        config = {
            "arch": "llama", "n_layer": v["n_layer"], "n_embd": v["dim"], "n_ff": v["ffn"], "n_head": v["n_head"],
            "n_head_kv": v["n_head_kv"], "head_dim": v["head_dim"], "n_vocab": v["vocab"], "n_ctx_train": v["ctx"],
            "rope_freq_base": v["rope_base"], "rms_norm_eps": refutil.f32(v["eps"]), "tied_output": v["tied"],
            "matrix_type": v["wtype"].name, "tensor_types": types_written,
            "rope_scaling": dict(type="llama3", **LLAMA3_ROPE, source="rope_freqs.weight") if v["llama3"] else None,
        }
        ref_method = "transformers-gguf+rope_parameters" if v["llama3"] else "transformers-gguf"
        out = {
            "model": v["name"] + ".gguf",
            "description": v["note"],
            "generator": refutil.generator(__file__),
            "versions": vers,
            "reference": ref_method,
            "method": (
                "AutoModelForCausalLM.from_pretrained(tests/fixtures/tiny, gguf_file=model, dtype=torch.float32, "
                "attn_implementation='eager'"
                + (", config=<GGUF config with rope_parameters={rope_type: llama3, rope_theta, factor, "
                   "low_freq_factor, high_freq_factor, original_max_position_embeddings} as in config.rope_scaling>"
                   if v["llama3"] else "")
                + "); model.eval(); logits = model(input_ids=[tokens], use_cache=False).logits[0] in float32: one "
                "forward pass over all tokens, positions 0..n-1, no BOS added, causal attention. "
                "logits[i] is the full-vocabulary logit row at position i."
            ),
            "cross_check": cross,
            "config": config,
            "tokens": tokens,
            "logits": refutil.f32_rows(ref),
        }
        refutil.write_json(os.path.join(OUT_DIR, v["name"] + ".json"), out)
        size = os.path.getsize(path)
        summary.append((v["name"], size, cross))
        print(f"{v['name']:18s} {size / 1e6:6.3f} MB  logit std {ref.std():.3f}  {cross}", flush=True)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print(f"total tests/fixtures/tiny: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
