"""The Triton GLA kernels called from JAX through jax-triton (registry name ``gla/jax-triton``),
with a ``jax.custom_vjp``. GPU only; cu_seqlens is not supported here.

jax-triton is imported lazily and the Triton cache-dir knob its import clobbers is restored
(``lightning.jax_bridge._jax_triton``). jax-triton refuses autotuned kernels whose key lacks a
scalar argument, so the plain kernels launch with one fixed config per pass
(``configs.JAX_*_CONFIG``): the forward, then the backward's three launches.
"""
from __future__ import annotations

import functools

import numpy as np

from ..lightning.jax_bridge import _jax_triton, check_qkv
from . import configs as _cfg
from . import kernels as _k


def _flags(dtype) -> dict:
    import jax.numpy as jnp

    return dict(DOT_PREC="ieee" if dtype == jnp.float32 else "tf32", GATE_BF16=dtype == jnp.bfloat16,
                SAFE_DEPTH=_cfg.SAFE_DEPTH)


def _scalars(t: int, h: int, hkv: int, scale: float, rows: int) -> tuple:
    return (t, h, hkv, np.float32(scale), _cfg.shape_bucket(t, rows))


def fwd_call(q, k, v, g, h0, scale, reverse):
    """(o, S_T) from one forward launch."""
    import jax
    import jax.numpy as jnp

    jt = _jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_FWD_CONFIG, d, e, q.dtype == jnp.bfloat16)
    outs = [jax.ShapeDtypeStruct((b, t, h, e), q.dtype), jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
    o, ht = jt.triton_call(
        q, k, v, g, h0 if h0 is not None else g, g, *_scalars(t, h, hkv, scale, b * h),
        kernel=_k.gla_fwd_kernel, out_shape=outs, grid=(_cfg.cdiv(e, bs), b * h), num_warps=w, num_stages=s,
        KD=d, VD=e, BK=_cfg.pow2(d), SPLIT=e, REVERSE=bool(reverse), HAS_H0=h0 is not None, STORE_HT=True,
        IS_VARLEN=False, BT=bt, BS=bs, **_flags(q.dtype))
    return o, ht  # a tuple, as the torch entry point returns (triton_call gives a list)


def bwd_call(q, k, v, g, do, h0, dht, scale, reverse):
    """(dq, dk, dv, dg, dh0) from the three backward launches; GQA sums dk, dv per kv head."""
    import jax
    import jax.numpy as jnp

    jt = _jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    gdt = q.dtype if grp == 1 else jnp.float32
    sc = _scalars(t, h, hkv, scale, b * h)
    bf16 = q.dtype == jnp.bfloat16
    flags = dict(KD=d, VD=e, REVERSE=bool(reverse), HAS_DHT=True, IS_VARLEN=False, HAS_H0=h0 is not None,
                 BV=_cfg.pow2(e), SPLIT=d, **_flags(q.dtype))
    h0_arg = h0 if h0 is not None else g
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_Q_CONFIG, d, e, bf16)
    outs = [jax.ShapeDtypeStruct((b, t, h, d), q.dtype),
            jax.ShapeDtypeStruct((b * t // bt + b, h, d, e), q.dtype),  # chunk entry states (scratch)
            jax.ShapeDtypeStruct((b, h, d), jnp.float32)]                # dg after the last row
    dq, hc, gend = jt.triton_call(
        k, v, g, do, h0_arg, dht, g, *sc, kernel=_k.gla_bwd_q_kernel, out_shape=outs,
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, **flags)
    _, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_K_CONFIG, d, e, bf16)  # the dq pass's BT: hc's slots follow it
    outs = [jax.ShapeDtypeStruct((b, t, h, d), gdt), jax.ShapeDtypeStruct((b, t, h, d), jnp.float32),
            jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
    dk, dg, dh0 = jt.triton_call(
        q, k, v, g, do, dht, g, dq, hc, gend, *sc, kernel=_k.gla_bwd_k_kernel, out_shape=outs,
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, **flags)
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_V_CONFIG, d, e, bf16)
    dv = jt.triton_call(
        q, k, g, do, dht, g, *sc, kernel=_k.gla_bwd_v_kernel, out_shape=[jax.ShapeDtypeStruct((b, t, h, e), gdt)],
        grid=(_cfg.cdiv(e, bs), b * h), num_warps=w, num_stages=s, BK=_cfg.pow2(d), SPLIT=e, BT=bt, BS=bs,
        KD=d, VD=e, REVERSE=bool(reverse), HAS_DHT=True, IS_VARLEN=False, **_flags(q.dtype))[0]
    if grp > 1:
        dk = dk.reshape(b, t, hkv, grp, d).sum(3).astype(q.dtype)
        dv = dv.reshape(b, t, hkv, grp, e).sum(3).astype(q.dtype)
    return dq, dk, dv, dg, dh0


def _make_fn():
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
    def attn(q, k, v, g, h0, scale, reverse):
        return fwd_call(q, k, v, g, h0, scale, reverse)

    def fwd(q, k, v, g, h0, scale, reverse):
        return fwd_call(q, k, v, g, h0, scale, reverse), (q, k, v, g, h0)

    def bwd(scale, reverse, resid, cts):
        q, k, v, g, h0 = resid
        do, dht = cts
        dq, dk, dv, dg, dh0 = bwd_call(q, k, v, g, jnp.asarray(do, q.dtype), h0, jnp.asarray(dht, jnp.float32),
                                       scale, reverse)
        return dq, dk, dv, dg.astype(g.dtype), (None if h0 is None else dh0.astype(h0.dtype))

    attn.defvjp(fwd, bwd)
    return attn


_FN = None


def check_call(q, k, v, g, initial_state, cu_seqlens):
    """The host-side checks of ``gla_jax_triton`` (no GPU needed); raises ValueError /
    NotImplementedError. Returns (q, k, v, g fp32, initial_state fp32 or None)."""
    import jax.numpy as jnp

    q, k, v, initial_state = check_qkv(q, k, v, initial_state, cu_seqlens)
    g = jnp.asarray(g)
    if g.shape != q.shape:
        raise ValueError(f"g must be [B, T, H, D] = {q.shape} (per query head), got {g.shape}")
    return q, k, v, g.astype(jnp.float32), initial_state


def gla_jax_triton(q, k, v, g, scale=None, initial_state=None, reverse=False, cu_seqlens=None):
    """GLA from JAX on the bundled Triton kernels; returns (o, final_state fp32).

    Layout [B, T, H, D], g [B, T, H, D] per query head; the options of ``gla_triton`` except
    cu_seqlens (NotImplementedError). Differentiable in q, k, v, g, initial_state and through S_T.
    """
    global _FN
    q, k, v, g, initial_state = check_call(q, k, v, g, initial_state, cu_seqlens)
    scale = q.shape[3] ** -0.5 if scale is None else float(scale)
    if _FN is None:
        _FN = _make_fn()
    return _FN(q, k, v, g, initial_state, scale, bool(reverse))
