"""A State's KV cache as NumPy arrays and as a Hugging Face transformers ``DynamicCache``, and back.

Shapes: per attention layer, K and V are [n_tokens, n_head_kv, head_dim] (NumPy) or
[1, n_head_kv, n_tokens, head_dim] (torch, as transformers keeps them).

RoPE layout: convert_hf_to_gguf permutes a llama model's q/k projection rows so that RoPE rotates
adjacent pairs (x[2i], x[2i+1]) ("normal" layout) where transformers rotates halves (x[i], x[i+d/2]).
kvstash's K therefore holds, per head, the rotated dimensions in the interleaved order; layout="hf"
converts them to transformers' order (and back on import). NEOX-layout models (qwen2, gemma3) need no
conversion. V is never permuted.

The torch functions import torch and transformers only when called.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ._core import Model, State
from .errors import Unsupported

__all__ = ["kv_layers", "state_from_kv", "to_dynamic_cache", "from_dynamic_cache"]

Layers = List[Tuple[np.ndarray, np.ndarray]]


def _check_layout(layout: str) -> None:
    if layout not in ("native", "hf"):
        raise ValueError(f"layout must be 'native' or 'hf', not {layout!r}")


def _gguf_to_hf(k: np.ndarray, n_rot: int) -> np.ndarray:
    """[..., head_dim]: rotated dims from adjacent pairs (2i, 2i+1) to halves (i, i + n_rot/2)."""
    rot = k[..., :n_rot].reshape(*k.shape[:-1], n_rot // 2, 2).swapaxes(-1, -2).reshape(*k.shape[:-1], n_rot)
    return np.concatenate([rot, k[..., n_rot:]], axis=-1)


def _hf_to_gguf(k: np.ndarray, n_rot: int) -> np.ndarray:
    """The inverse of _gguf_to_hf."""
    rot = k[..., :n_rot].reshape(*k.shape[:-1], 2, n_rot // 2).swapaxes(-1, -2).reshape(*k.shape[:-1], n_rot)
    return np.concatenate([rot, k[..., n_rot:]], axis=-1)


def _needs_permute(model: Model) -> Tuple[bool, int]:
    layout, n_rot = model._rope
    return layout == "normal" and n_rot > 0, n_rot


def kv_layers(state: State, layout: str = "native") -> Layers:
    """Per attention layer, (K, V) as float32 arrays [n_tokens, n_head_kv, head_dim] (copies)."""
    _check_layout(layout)
    info = state.model.info
    shape = (-1, info["n_head_kv"], info["head_dim"])
    keys = state._kv_export(False).astype(np.float32)
    values = state._kv_export(True).astype(np.float32)
    permute, n_rot = _needs_permute(state.model)
    out: Layers = []
    for k, v in zip(keys, values):
        k = k.reshape(shape)
        if layout == "hf" and permute:
            k = _gguf_to_hf(k, n_rot)
        out.append((np.ascontiguousarray(k), v.reshape(shape)))
    return out


def state_from_kv(
    model: Model,
    tokens: Sequence[int],
    layers: Sequence[Tuple[Any, Any]],
    *,
    layout: str = "native",
    kv_type: str = "f32",
    n_ctx: int = 0,
) -> State:
    """A State holding `tokens` with the given per-layer (K, V) [n_tokens, n_head_kv, head_dim].

    The State has no logits yet: evaluate at least one more token (model.eval) before sampling. Its KV
    was not computed by kvstash, so the prefix cache never takes it. Raises Unsupported for a model with
    recurrent layers (their state is not K/V).
    """
    _refuse_recurrent(model, "state_from_kv")
    _check_layout(layout)
    dtype = np.float32 if kv_type == "f32" else np.float16
    permute, n_rot = _needs_permute(model)
    n = len(tokens)
    ks, vs = [], []
    for k, v in layers:
        k = np.asarray(k, dtype=np.float32)
        if layout == "hf" and permute:
            k = _hf_to_gguf(k, n_rot)
        ks.append(k.reshape(n, -1))
        vs.append(np.asarray(v, dtype=np.float32).reshape(n, -1))
    keys = np.ascontiguousarray(np.stack(ks), dtype=dtype)
    values = np.ascontiguousarray(np.stack(vs), dtype=dtype)
    return State._kv_import(model, list(tokens), keys, values, kv_type, n_ctx)


def _refuse_recurrent(model: Model, what: str) -> None:
    """A DynamicCache holds attention K/V only: a model with recurrent (Mamba) layers has state it cannot hold."""
    info = model.info
    if info["n_recurrent_layers"] > 0:
        raise Unsupported(
            f"{what}: {info['architecture']} has {info['n_recurrent_layers']} recurrent (Mamba) layers, whose "
            "convolution and SSM states a DynamicCache cannot hold (transformers keeps them in the model's own "
            "hybrid cache class, which kvstash does not convert yet); keep the State in kvstash (fork, save, "
            "State.load) or use kv_layers() for its attention layers' K/V"
        )


def to_dynamic_cache(state: State, dtype: Optional[Any] = None) -> Any:
    """A transformers DynamicCache holding the State's KV (HF layout), for model(..., cache=) (transformers
    5.x; past_key_values= in 4.x). Raises Unsupported for a model with recurrent layers (Mamba, hybrids)."""
    _refuse_recurrent(state.model, "to_dynamic_cache")
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv_layers(state, "hf")):
        kt = torch.from_numpy(k).transpose(0, 1).unsqueeze(0).contiguous()  # [1, heads, tokens, dim]
        vt = torch.from_numpy(v).transpose(0, 1).unsqueeze(0).contiguous()
        if dtype is not None:
            kt, vt = kt.to(dtype), vt.to(dtype)
        cache.update(kt, vt, i)
    return cache


def _cache_layers(cache: Any) -> List[Tuple[Any, Any]]:
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def from_dynamic_cache(
    model: Model, cache: Any, tokens: Sequence[int], *, kv_type: str = "f32", n_ctx: int = 0
) -> State:
    """A State from a transformers DynamicCache (batch 1) computed for `tokens`; evaluate a token next."""
    layers = []
    for k, v in _cache_layers(cache):
        if k.shape[0] != 1:
            raise ValueError("from_dynamic_cache: only batch size 1 caches can become a State")
        layers.append(
            (
                k[0].transpose(0, 1).detach().float().cpu().numpy(),
                v[0].transpose(0, 1).detach().float().cpu().numpy(),
            )
        )
    return state_from_kv(model, tokens, layers, layout="hf", kv_type=kv_type, n_ctx=n_ctx)
