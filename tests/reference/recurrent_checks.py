"""Checks and helpers for make_recurrent_models.py: GGUF reading and dumping (gguf-py), assertions on the
converted GGUF, copying a quantized GGUF's weights back into the transformers model, the Q8_0 activation-rounding
emulation of llama.cpp's CPU matmuls, and the sensitivity cross-check."""
import math
import re

import numpy as np

import refutil

import gguf
import torch


@torch.no_grad()
def hf_logits(model, tokens) -> np.ndarray:
    ids = torch.tensor([tokens], dtype=torch.long)
    return model(input_ids=ids, use_cache=False).logits[0].float().numpy()


# ---------------------------------------------------------------------------------------------------------
# GGUF inspection


def field_value(field):
    t = field.types[0] if field.types else None
    if t == gguf.GGUFValueType.ARRAY:
        sub = field.types[1] if len(field.types) > 1 else None
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    return field.parts[field.data[0]].tolist()[0]


def read_gguf(path: str):
    r = gguf.GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        meta[k] = field_value(f)
    tensors = {}
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)]) \
            if t.tensor_type not in (gguf.GGMLQuantizationType.F32,) else np.array(t.data)
        tensors[t.name] = dict(type=t.tensor_type.name, shape=[int(x) for x in t.shape], data=np.asarray(data))
    return meta, tensors


def dump_text(name: str, meta: dict, tensors: dict) -> str:
    lines = [f"### `{name}.gguf`", "", "```"]
    for k, v in meta.items():
        if k.startswith("tokenizer.ggml.") and isinstance(v, list):
            lines.append(f"{k} = [{len(v)} entries: {', '.join(repr(x) for x in v[:4])}, ...]")
        else:
            lines.append(f"{k} = {v!r}")
    lines.append("")
    lines.append(f"{'tensor':<28} {'type':<6} {'ne (ne[0] contiguous)':<22} value range (dequantized)")
    for tn, t in tensors.items():
        d = t["data"]
        lines.append(f"{tn:<28} {t['type']:<6} {str(t['shape']):<22} [{d.min():.4g}, {d.max():.4g}]")
    lines += ["```", ""]
    return "\n".join(lines)


def check_tensors(tensors: dict) -> None:
    for tn, t in tensors.items():
        d = t["data"].astype(np.float64).ravel()
        assert d.size > 1 and np.ptp(d) > 0, f"GGUF tensor {tn} is constant"
        assert np.all(np.isfinite(d)), tn


def check_layer_pattern(v, meta: dict, config) -> list:
    arch = meta["general.architecture"]
    assert arch == v["arch"], (arch, v["arch"])
    if arch != "granitehybrid":
        return []
    kv = meta["granitehybrid.attention.head_count_kv"]
    want = [config.num_key_value_heads if t == "full_attention" else 0 for t in config.layer_types]
    assert kv == want, f"GGUF layer pattern {kv} != transformers' {config.layer_types}"
    assert any(x == 0 for x in kv) and any(x != 0 for x in kv)
    return kv


# ---------------------------------------------------------------------------------------------------------
# quantized variants: copy the GGUF's dequantized matrices back into the transformers model


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    # inverse of convert_hf_to_gguf's LlamaModel.permute (rows per head: (2, dim/2) -> (dim/2, 2))
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_quantized_back(model, v, tensors: dict) -> list:
    cfg = model.config
    hf = dict(model.named_parameters())
    mapping = {"token_embd.weight": "embeddings.weight" if v["arch"] != "granitehybrid" else "embed_tokens.weight",
               "output.weight": "lm_head.weight"}
    prefix = "backbone." if v["arch"] in ("mamba", "mamba2") else "model."
    copied = []
    for tn, t in tensors.items():
        if t["type"] in ("F32", "F16"):
            continue
        w = t["data"].astype(np.float32)
        if tn in mapping:
            target = mapping[tn] if tn == "output.weight" else prefix + mapping[tn]
        else:
            _, bid, kind, _ = tn.split(".")
            if v["arch"] in ("mamba", "mamba2"):
                target = f"backbone.layers.{bid}.mixer." + {"ssm_in": "in_proj", "ssm_out": "out_proj"}[kind] + ".weight"
            else:
                lay = f"model.layers.{bid}."
                if kind in ("ssm_in", "ssm_out"):
                    target = lay + "mamba." + {"ssm_in": "in_proj", "ssm_out": "out_proj"}[kind] + ".weight"
                elif kind in ("attn_q", "attn_k", "attn_v", "attn_output"):
                    target = lay + "self_attn." + {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
                                                   "attn_output": "o_proj"}[kind] + ".weight"
                    if kind == "attn_q":
                        w = unpermute_rows(w, cfg.num_attention_heads)
                    elif kind == "attn_k":
                        w = unpermute_rows(w, cfg.num_key_value_heads)
                elif kind in ("ffn_gate", "ffn_up"):
                    target = lay + "shared_mlp.input_linear.weight"
                    full = hf[target].detach().numpy().copy()
                    n = cfg.shared_intermediate_size
                    full[(0 if kind == "ffn_gate" else n):(n if kind == "ffn_gate" else 2 * n)] = w
                    w = full
                elif kind == "ffn_down":
                    target = lay + "shared_mlp.output_linear.weight"
                else:
                    raise AssertionError(f"no transformers tensor for quantized {tn}")
        p = hf[target]
        assert tuple(p.shape) == w.shape, (tn, target, p.shape, w.shape)
        before = p.detach().numpy().copy()
        with torch.no_grad():
            p.copy_(torch.from_numpy(w))
        rel = float(np.abs(before - w).max() / np.abs(before).max())
        assert rel < 0.02, f"{tn} -> {target}: dequantized differs by {rel} (wrong mapping?)"
        copied.append(f"{tn} -> {target}")
    return copied


# ---------------------------------------------------------------------------------------------------------
# sensitivity: the fixture must fail an engine that ignores or mis-applies any one parameter or scale


def neutral_value(name: str, p: torch.Tensor):
    leaf = name.rsplit(".", 1)[-1]
    if "norm" in name and leaf == "weight":
        return torch.ones_like(p), "1"
    if leaf in ("bias", "dt_bias", "D"):
        return torch.zeros_like(p), "0"
    if leaf == "A_log":
        return torch.zeros_like(p), "0 (A = -1)"
    if "conv1d" in name and leaf == "weight":
        w = torch.zeros_like(p)
        w[..., -1] = 1.0  # identity: the current step only
        return w, "identity (last tap 1, others 0)"
    return None, None


@torch.no_grad()
def sensitivity(model, v, tokens, ref, scale_keys) -> dict:
    """max |logits - ref| when one kind of parameter (all layers at once) is set to a neutral value, or one
    scale / one normalisation detail is changed: each must be clearly above the parity tolerance."""
    out = {}
    params = dict(model.named_parameters())
    kinds = {}
    for name in params:
        kinds.setdefault(re.sub(r"\.\d+\.", ".N.", name), []).append(name)
    for kind, names in sorted(kinds.items()):
        saved = {n: params[n].detach().clone() for n in names}
        label = None
        for n in names:
            val, label = neutral_value(n, params[n])
            if val is None:
                break
            params[n].copy_(val)
        if label is not None:
            out[f"{kind} = {label}"] = refutil.f32(np.abs(hf_logits(model, tokens) - ref).max())
        for n in names:
            params[n].copy_(saved[n])
    cfg = model.config
    if v["arch"] == "granitehybrid":
        for key in scale_keys:
            old = getattr(cfg, key)
            setattr(cfg, key, 1.0)
            for mod in model.modules():  # some modules copy the multiplier at construction
                for attr in ("embedding_multiplier", "residual_multiplier", "logits_scaling", "scaling"):
                    if hasattr(mod, attr) and not isinstance(getattr(mod, attr), torch.nn.Module):
                        setattr(mod, "_saved_" + attr, getattr(mod, attr))
                        if attr == "scaling" and key == "attention_multiplier":
                            setattr(mod, attr, 1.0 / math.sqrt(cfg.hidden_size // cfg.num_attention_heads))
                        elif attr == key:
                            setattr(mod, attr, 1.0)
            out[f"{key} = 1 (attention: 1/sqrt(head_dim))" if key == "attention_multiplier" else f"{key} = 1"] = \
                refutil.f32(np.abs(hf_logits(model, tokens) - ref).max())
            setattr(cfg, key, old)
            for mod in model.modules():
                for attr in ("embedding_multiplier", "residual_multiplier", "logits_scaling", "scaling"):
                    if hasattr(mod, "_saved_" + attr):
                        setattr(mod, attr, getattr(mod, "_saved_" + attr))
                        delattr(mod, "_saved_" + attr)
    if v["arch"] in ("mamba2", "granitehybrid"):
        norms = [m for n, m in model.named_modules() if n.endswith("mixer.norm") or n.endswith("mamba.norm")]
        assert norms
        for m in norms:
            m.group_size, m._saved = m.weight.shape[0], m.group_size
        out["ssm_norm over all d_inner channels (ignoring groups)"] = \
            refutil.f32(np.abs(hf_logits(model, tokens) - ref).max())
        for m in norms:
            m.group_size = m._saved
            del m._saved
    assert np.abs(hf_logits(model, tokens) - ref).max() == 0, "sensitivity check did not restore the model"
    return out


def q8_0_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """x rounded as ggml quantizes an activation row to Q8_0 before a Q8_0 matmul: blocks of 32 along the last
    axis, d = max|x| / 127 (fp32), q = round(x / d) (AVX2 path: round-half-even), stored scale fp16(d)."""
    b = x.reshape(-1, 32).float()
    d = b.abs().amax(dim=1, keepdim=True) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(b * inv)
    return (q * d.half().float()).reshape(x.shape)


@torch.no_grad()
def hf_logits_q8_activations(model, tokens) -> np.ndarray:
    """hf_logits with every nn.Linear's input rounded by q8_0_roundtrip (all Linear weights are Q8_0 in the
    quantized GGUFs): an emulation of llama.cpp's CPU arithmetic for them."""
    handles = [mod.register_forward_pre_hook(lambda mod, args: (q8_0_roundtrip(args[0]),) + tuple(args[1:]))
               for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    try:
        return hf_logits(model, tokens)
    finally:
        for h in handles:
            h.remove()
