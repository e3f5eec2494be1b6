"""The Triton GLA kernels called from JAX through jax-triton (registry name ``gla/jax-triton``),
with a ``jax.custom_vjp``. GPU only; cu_seqlens is not supported here.

jax-triton is imported lazily and the Triton cache-dir knob its import clobbers is restored
(``lightning.jax_bridge._jax_triton``). jax-triton refuses autotuned kernels whose key lacks a
scalar argument, so the plain kernels launch with one fixed config per pass
(``configs.JAX_*_CONFIG``): the decayed operands (``gla_prep_kernel``), the forward, then the
backward's three launches, each sweep with PATH "both" (``kernels._run_rows``): jax-triton hands
every launch fresh output buffers, so the rows with a deep chunk take the exact path inside the same
launch rather than in a rerun. The forward and the dv pass sweep the decayed operands (PRE), as from
torch.
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


def _dtype_name(dtype) -> str:
    import jax.numpy as jnp

    return {jnp.dtype(jnp.bfloat16): "bf16", jnp.dtype(jnp.float16): "fp16"}.get(jnp.dtype(dtype), "fp32")


def _scalars(t: int, h: int, hkv: int, scale: float, rows: int) -> tuple:
    return (t, h, hkv, np.float32(scale), _cfg.shape_bucket(t, rows))


def prep_call(q, k, g, reverse):
    """(qd, kd, bl): the decayed operands of every chunk (``ops.gla_prep``), one launch."""
    import jax
    import jax.numpy as jnp

    b, t, h, d = q.shape
    bt = _cfg.PRE_CHUNK
    gdt = q.dtype if q.dtype == jnp.bfloat16 else jnp.float32
    grid, bd = _cfg.prep_grid(t, b * h, d, bt)
    outs = [jax.ShapeDtypeStruct((b, t, h, d), gdt), jax.ShapeDtypeStruct((b, t, h, d), gdt),
            jax.ShapeDtypeStruct((b * t // bt + b, h, d), jnp.float32)]
    return tuple(_jax_triton().triton_call(
        q, k, g, g, t, h, k.shape[2], kernel=_k.gla_prep_kernel, out_shape=outs,
        grid=grid, num_warps=_cfg.PREP_WARPS, num_stages=1, KD=d, REVERSE=bool(reverse), IS_VARLEN=False, BT=bt, BD=bd))


def fwd_call(q, k, v, g, h0, scale, reverse):
    """((o, S_T), (the rows' deep flags, the decayed operands)) from the forward's launches."""
    import jax
    import jax.numpy as jnp

    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    pre = prep_call(q, k, g, reverse)
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_FWD_CONFIG, d, e, _dtype_name(q.dtype))
    outs = [jax.ShapeDtypeStruct((b, t, h, e), q.dtype), jax.ShapeDtypeStruct((b, h, d, e), jnp.float32),
            jax.ShapeDtypeStruct((b * h,), jnp.int32)]
    o, ht, deep = _jax_triton().triton_call(
        q, k, v, g, *pre, h0 if h0 is not None else g, g, g, *_scalars(t, h, hkv, scale, b * h),
        kernel=_k.gla_fwd_kernel, out_shape=outs, grid=(_cfg.cdiv(e, bs), b * h), num_warps=w, num_stages=s,
        KD=d, VD=e, BK=_cfg.pow2(d), SPLIT=e, REVERSE=bool(reverse), HAS_H0=h0 is not None, STORE_HT=True,
        IS_VARLEN=False, PATH="both", PRE=True, BT=bt, BS=bs, **_flags(q.dtype))
    return (o, ht), (deep, pre)


def _bwd_launches(q, k, v, g, do, h0, dht, deep, pre, scale, reverse):
    """(dq, dk, dv per query head, dg, dh0) from the three backward launches."""
    import jax
    import jax.numpy as jnp

    jt = _jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    gdt = q.dtype if h == hkv else jnp.float32
    sc = _scalars(t, h, hkv, scale, b * h)
    name = _dtype_name(q.dtype)
    flags = dict(KD=d, VD=e, REVERSE=bool(reverse), HAS_DHT=True, IS_VARLEN=False, PATH="both", **_flags(q.dtype))
    qk = dict(flags, HAS_H0=h0 is not None, BV=_cfg.pow2(e), SPLIT=d)
    h0_arg = h0 if h0 is not None else g
    # the dq and dk passes share one BT: the entry states' slots follow it
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_Q_CONFIG, d, e, name)
    outs = [jax.ShapeDtypeStruct((b, t, h, d), q.dtype),
            jax.ShapeDtypeStruct((b * t // bt + b, h, d, e), q.dtype),  # chunk entry states (scratch)
            jax.ShapeDtypeStruct((b, h, d), jnp.float32)]                # dg after the last row
    dq, hc, gend = jt.triton_call(
        k, v, g, do, h0_arg, dht, g, deep, *sc, kernel=_k.gla_bwd_q_kernel, out_shape=outs,
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, **qk)
    _, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_K_CONFIG, d, e, name)
    outs = [jax.ShapeDtypeStruct((b, t, h, d), gdt), jax.ShapeDtypeStruct((b, t, h, d), jnp.float32),
            jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
    dk, dg, dh0 = jt.triton_call(
        q, k, v, g, do, dht, g, dq, hc, gend, deep, *sc, kernel=_k.gla_bwd_k_kernel, out_shape=outs,
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, **qk)
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_V_CONFIG, d, e, name)
    dv = jt.triton_call(
        q, k, g, *pre, do, dht, g, deep, *sc, kernel=_k.gla_bwd_v_kernel,
        out_shape=[jax.ShapeDtypeStruct((b, t, h, e), gdt)], grid=(_cfg.cdiv(e, bs), b * h), num_warps=w,
        num_stages=s, BK=_cfg.pow2(d), SPLIT=e, PRE=True, BT=bt, BS=bs, **flags)[0]
    return dq, dk, dv, dg, dh0


def bwd_call(q, k, v, g, do, h0, dht, deep, pre, scale, reverse):
    """(dq, dk, dv, dg, dh0) from the backward launches; GQA sums dk, dv per kv head."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    dq, dk, dv, dg, dh0 = _bwd_launches(q, k, v, g, do, h0, dht, deep, pre, scale, reverse)
    if h > hkv:
        dk = dk.reshape(b, t, hkv, h // hkv, d).sum(3).astype(q.dtype)
        dv = dv.reshape(b, t, hkv, h // hkv, e).sum(3).astype(q.dtype)
    return dq, dk, dv, dg, dh0


def _make_fn():
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
    def attn(q, k, v, g, h0, scale, reverse):
        return fwd_call(q, k, v, g, h0, scale, reverse)[0]

    def fwd(q, k, v, g, h0, scale, reverse):
        out, (deep, pre) = fwd_call(q, k, v, g, h0, scale, reverse)
        return out, (q, k, v, g, h0, deep, pre)

    def bwd(scale, reverse, resid, cts):
        q, k, v, g, h0, deep, pre = resid
        do, dht = cts
        dq, dk, dv, dg, dh0 = bwd_call(q, k, v, g, jnp.asarray(do, q.dtype), h0, jnp.asarray(dht, jnp.float32),
                                       deep, pre, scale, reverse)
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
