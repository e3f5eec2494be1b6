"""The Triton Lightning Attention kernels called from JAX through jax-triton (registry name
``lightning/jax-triton``), with a ``jax.custom_vjp``. GPU only; cu_seqlens is not supported here.

jax-triton is imported lazily (``common.jax_triton``). It refuses autotuned kernels whose key
lacks a scalar argument, so the plain kernels are launched with one fixed config
(``configs.JAX_CONFIG``, ``configs.JAX_WIDE_CONFIG`` for wide head dims, ``configs.FP32_CONFIG``
for fp32); the backward is the three passes, one ``triton_call`` each.
"""
from __future__ import annotations

import functools

import numpy as np

from ...common.arith import cdiv, pow2, shape_bucket
from ...common.jax_triton import check_qkv, dot_precision, jax_triton
from . import configs as _cfg
from . import kernels as _k


def _config(d: int, e: int, dtype) -> tuple:
    """(BT, BV, num_warps, num_stages, TR) for head dims d, e and the input dtype: the torch path's
    FP32_CONFIG for fp32 (IEEE dots at the big tiles take long to compile, and at D 48 / E 96 the
    call with JAX_CONFIG ended the process on the H200), else JAX_CONFIG, or JAX_WIDE_CONFIG when that is
    transposed and a padded head dim exceeds 128."""
    import jax.numpy as jnp

    if dtype == jnp.float32:
        return _cfg.FP32_CONFIG
    cfg = _cfg.JAX_CONFIG
    if cfg[4] and max(pow2(d), pow2(e)) > 128:
        return _cfg.JAX_WIDE_CONFIG
    return cfg


def _fwd_call(q, k, v, g, h0, scale, reverse, store_ht=True):
    import jax
    import jax.numpy as jnp

    jt = jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    bt, bv, w, s, tr = _config(d, e, q.dtype)
    outs = [jax.ShapeDtypeStruct((b, t, h, e), q.dtype), jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
    o, ht = jt.triton_call(
        q, k, v, h0 if h0 is not None else g, g, g, t, h, hkv, np.float32(scale), shape_bucket(t, b * h),
        kernel=_k.lightning_fwd_kernel, out_shape=outs, grid=(cdiv(e, bv), b * h),
        num_warps=w, num_stages=s,
        KD=d, VD=e, BK=pow2(d), REVERSE=bool(reverse), HAS_H0=h0 is not None, STORE_HT=store_ht,
        IS_VARLEN=False, DOT_PREC=dot_precision(q.dtype), BT=bt, BV=bv, TR=tr)
    return o, ht


def _bwd_call(q, k, v, do, g, h0, dht, scale, reverse):
    import jax
    import jax.numpy as jnp

    jt = jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    bt, bv, w, s, tr = _config(d, e, q.dtype)
    gdt = q.dtype if grp == 1 else jnp.float32
    kw = dict(num_warps=w, num_stages=s, KD=d, VD=e, BKD=pow2(d), BVD=pow2(e), REVERSE=bool(reverse),
              HAS_H0=h0 is not None, HAS_DHT=True, IS_VARLEN=False, DOT_PREC=dot_precision(q.dtype), BT=bt, BV=bv,
              TR=tr)
    args = (q, k, v, do, h0 if h0 is not None else g, dht, g, g, t, h, hkv, np.float32(scale),
            shape_bucket(t, b * h))
    res = []
    for role, dim, odt in ((0, d, q.dtype), (1, d, gdt), (2, e, gdt)):
        outs = [jax.ShapeDtypeStruct((b, t, h, dim), odt), jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
        dx, dh0 = jt.triton_call(*args, kernel=_k.lightning_bwd_kernel, out_shape=outs,
                                 grid=(cdiv(dim, bv), b * h), ROLE=role, **kw)
        res.append((dx, dh0))
    return (res[0][0],) + _gqa_sum(res[1][0], res[2][0], grp, q.dtype) + (res[2][1],)


def _gqa_sum(dk, dv, grp, dtype):
    """GQA: dk, dv per query head (fp32) summed over each kv head's group, in the input dtype."""
    if grp > 1:
        b, t, h, d = dk.shape
        dk = dk.reshape(b, t, h // grp, grp, d).sum(3).astype(dtype)
        dv = dv.reshape(b, t, h // grp, grp, dv.shape[3]).sum(3).astype(dtype)
    return dk, dv


def _make_fn():
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
    def attn(q, k, v, g, h0, scale, reverse):
        return _fwd_call(q, k, v, g, h0, scale, reverse)

    def fwd(q, k, v, g, h0, scale, reverse):
        o, ht = _fwd_call(q, k, v, g, h0, scale, reverse)
        return (o, ht), (q, k, v, g, h0)

    def bwd(scale, reverse, resid, cts):
        q, k, v, g, h0 = resid
        do, dht = cts
        do = jnp.asarray(do, q.dtype)
        dht = jnp.asarray(dht, jnp.float32)
        dq, dk, dv, dh0 = _bwd_call(q, k, v, do, g, h0, dht, scale, reverse)
        return dq, dk, dv, jnp.zeros_like(g), (None if h0 is None else dh0.astype(h0.dtype))

    attn.defvjp(fwd, bwd)
    return attn


_FN = None


def lightning_attn_jax_triton(q, k, v, gamma=None, scale=None, initial_state=None, reverse=False,
                              cu_seqlens=None):
    """Lightning Attention from JAX on the bundled Triton kernels; returns (o, final_state fp32).

    Layout [B, T, H, D]; same recurrence and options as ``lightning_attn_triton`` except
    cu_seqlens (NotImplementedError). Differentiable in q, k, v, initial_state and through S_T.
    """
    global _FN
    import jax.numpy as jnp

    q, k, v, initial_state = check_qkv(q, k, v, initial_state, cu_seqlens)
    h, d = q.shape[2], q.shape[3]
    g = jnp.zeros((h,), jnp.float32) if gamma is None else jnp.asarray(gamma, jnp.float32).reshape(-1)
    if g.shape != (h,):
        raise ValueError(f"gamma must have one value per query head ({h}), got shape {g.shape}")
    scale = d**-0.5 if scale is None else float(scale)
    if _FN is None:
        _FN = _make_fn()
    return _FN(q, k, v, g, initial_state, scale, bool(reverse))
