"""The Triton GLA kernels called from JAX through jax-triton (registry name ``gla/jax-triton``),
with a ``jax.custom_vjp``. GPU only; cu_seqlens is not supported here.

jax-triton is imported lazily and the Triton cache-dir knob its import clobbers is restored
(``common.jax_triton``). jax-triton refuses autotuned kernels whose key lacks a scalar argument,
so the plain kernels launch with one fixed config per sweep
(``configs.JAX_*_CONFIG``). The launches are the torch path's, one each: the prep launch and the
forward; then the backward's state pass, state-gradient pass, in-chunk launch, exit launch and dv
pass. No launch depends on the gate values. On an sm_90 GPU the prep launch is the torch path's Gluon
kernel, which jax-triton compiles through ``common.jax_gluon`` (``gluon.host.jax_prep_reason``;
GLA_JAX_GLUON_PREP=0 takes the Triton one); so is the in-chunk backward launch where the torch
path's switch (GLA_GLUON_INTRA=1) takes it (``gluon.host.jax_intra_reason``), and with the torch
path's GLA_GLUON_INTRA_EXIT=1 that launch takes the exit launch's terms too, which then does not run.
"""
from __future__ import annotations

import functools

import numpy as np

from ...common.jax_triton import check_qkv, dot_precision, jax_triton
from ..gluon import host as _gluon_host
from . import configs as _cfg
from . import kernels as _k


def _dtype_name(dtype) -> str:
    import jax.numpy as jnp

    return {jnp.dtype(jnp.bfloat16): "bf16", jnp.dtype(jnp.float16): "fp16"}.get(jnp.dtype(dtype), "fp32")


def _scalars(t: int, h: int, hkv: int, scale: float, rows: int) -> tuple:
    return (t, h, hkv, np.float32(scale), _cfg.shape_bucket(t, rows))


def prep_call(q, k, g, reverse):
    """(qd, kd, bl, A): the decayed operands, chunk totals and intra-chunk scores of every chunk
    (``ops.gla_prep``), from the prep launch."""
    import jax
    import jax.numpy as jnp

    b, t, h, d = q.shape
    bt = _cfg.CHUNK
    gdt = q.dtype if q.dtype == jnp.bfloat16 else jnp.float32
    outs = [jax.ShapeDtypeStruct((b, t, h, d), gdt), jax.ShapeDtypeStruct((b, t, h, d), gdt),
            jax.ShapeDtypeStruct((_cfg.chunk_slots(b, t, b, bt), h, d), jnp.float32),
            jax.ShapeDtypeStruct((b, t, h, bt), q.dtype)]
    kernel, meta = _k.gla_prep_kernel, _cfg.prep_meta(d, bt, dot_precision(q.dtype))
    grid = _cfg.prep_grid(t, b * h)
    if _gluon_host.jax_prep_reason(jnp.dtype(q.dtype).name, d, bt, jax.devices()[0]) is None:
        from ...common.jax_gluon import install

        install(jax_triton().triton_lib)
        kernel = _gluon_host.prep_kernel(d)
        meta = _gluon_host.prep_meta(d, bt)
        grid = _gluon_host.prep_grid(grid)
    return tuple(jax_triton().triton_call(
        q, k, g, g, t, h, k.shape[2], kernel=kernel, out_shape=outs, grid=grid,
        KD=d, REVERSE=bool(reverse), IS_VARLEN=False, **meta))


def fwd_call(q, k, v, g, h0, scale, reverse):
    """((o, S_T), the prep launch's operands) from the forward's launches."""
    import jax
    import jax.numpy as jnp

    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    pre = prep_call(q, k, g, reverse)
    bt, bs, w, s = _cfg.jax_config(_cfg.JAX_FWD_CONFIG, d, e, _dtype_name(q.dtype))
    outs = [jax.ShapeDtypeStruct((b, t, h, e), q.dtype), jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)]
    o, ht = jax_triton().triton_call(
        *pre, v, h0 if h0 is not None else g, g, *_scalars(t, h, hkv, scale, b * h),
        kernel=_k.gla_fwd_kernel, out_shape=outs, grid=(_cfg.cdiv(e, bs), b * h), num_warps=w, num_stages=s,
        KD=d, VD=e, BK=_cfg.pow2(d), SPLIT=e, REVERSE=bool(reverse), HAS_H0=h0 is not None, STORE_HT=True,
        IS_VARLEN=False, DOT_PREC=dot_precision(q.dtype), BT=bt, BS=bs)
    return (o, ht), pre


def _bwd_launches(q, k, v, g, do, h0, dht, pre, scale, reverse):
    """(dq, dk, dv per query head, dg, dh0) from the backward launches: five, or four where the Gluon
    in-chunk launch takes the exit launch's terms (``_chunk_launches``)."""
    import jax
    import jax.numpy as jnp

    jt = jax_triton()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    qd, kd, bl, scores = pre
    gdt = q.dtype if h == hkv else jnp.float32
    t_, h_, hkv_, sc, bucket = _scalars(t, h, hkv, scale, b * h)
    name = _dtype_name(q.dtype)
    prec = dot_precision(q.dtype)
    flags = dict(KD=d, VD=e, REVERSE=bool(reverse), IS_VARLEN=False, DOT_PREC=prec)
    qk = dict(flags, HAS_H0=h0 is not None, BV=_cfg.pow2(e), SPLIT=d)
    h0_arg = h0 if h0 is not None else g
    bt = _cfg.CHUNK
    slots = _cfg.chunk_slots(b, t, b, bt)
    states = jax.ShapeDtypeStruct((slots, h, d, e), q.dtype)  # per-chunk states (scratch)
    _, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_H_CONFIG, d, e, name)
    hc = jt.triton_call(
        kd, bl, v, h0_arg, g, t_, h_, hkv_, bucket, kernel=_k.gla_bwd_h_kernel, out_shape=[states],
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, **qk)[0]
    _, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_DH_CONFIG, d, e, name)
    dhc, thr, dh0 = jt.triton_call(
        qd, bl, do, dht, g, hc, t_, h_, hkv_, sc, bucket, kernel=_k.gla_bwd_dh_kernel,
        out_shape=[states, jax.ShapeDtypeStruct((slots, h, d), jnp.float32),
                   jax.ShapeDtypeStruct((b, h, d, e), jnp.float32)],
        grid=(_cfg.cdiv(d, bs), b * h), num_warps=w, num_stages=s, BT=bt, BS=bs, HAS_DHT=True, **qk)
    dq, dk, dg = _chunk_launches(jt, q, k, v, g, do, hc, dhc, thr, (t_, h_, hkv_, sc), flags, reverse)
    _, bs, w, s = _cfg.jax_config(_cfg.JAX_BWD_V_CONFIG, d, e, name)
    dv = jt.triton_call(
        qd, kd, bl, scores, do, dht, g, t_, h_, hkv_, sc, bucket, kernel=_k.gla_bwd_v_kernel,
        out_shape=[jax.ShapeDtypeStruct((b, t, h, e), gdt)], grid=(_cfg.cdiv(e, bs), b * h), num_warps=w,
        num_stages=s, BK=_cfg.pow2(d), SPLIT=e, HAS_DHT=True, BT=bt, BS=bs, **flags)[0]
    return dq, dk, dv, dg, dh0


def _chunk_launches(jt, q, k, v, g, do, hc, dhc, thr, scalars, flags, reverse):
    """(dq, dk per query head, dg) from the parallel launches over chunks: the in-chunk launch, then
    the exit launch adding the exit state's terms; or, where the Gluon in-chunk launch runs with
    those terms too (``gluon.host.intra_exit``, as on the torch path), that launch alone, dk and dg
    leaving it final."""
    import jax
    import jax.numpy as jnp

    b, t, h, d = q.shape
    e = v.shape[3]
    bt = _cfg.CHUNK
    grid = _cfg.prep_grid(t, b * h)
    per_head = lambda dtype: jax.ShapeDtypeStruct((b, t, h, d), dtype)  # noqa: E731
    gdt = q.dtype if h == k.shape[2] else jnp.float32
    intra, intra_meta = _k.gla_bwd_intra_kernel, dict(flags, **_cfg.intra_meta(d, e, bt))
    scratch = _cfg.intra_scratch(grid, d, bt)  # the launch's in-block pairs, sized by the launch taken
    fused = False
    if _gluon_host.jax_intra_reason(jnp.dtype(q.dtype).name, d, e, bt, jax.devices()[0]) is None:
        from ..gluon import intra as _gluon_intra
        from ...common.jax_gluon import install

        install(jt.triton_lib)
        fused = _gluon_host.intra_exit()
        intra = _gluon_intra.gla_bwd_intra_exit_gluon_kernel if fused else _gluon_intra.gla_bwd_intra_gluon_kernel
        intra_meta = _gluon_host.intra_meta(d, e, reverse, False)
        scratch = _gluon_host.intra_scratch(grid)
    scratch = jax.ShapeDtypeStruct((scratch,), jnp.float32)
    if fused:
        dq, dk, dg, _ = jt.triton_call(
            q, k, v, g, do, hc, dhc, thr, g, *scalars, kernel=intra,
            out_shape=[per_head(q.dtype), per_head(gdt), per_head(g.dtype), scratch], grid=grid, **intra_meta)
        return dq, dk, dg
    dq, dki, dgq, _ = jt.triton_call(
        q, k, v, g, do, hc, g, *scalars, kernel=intra,
        out_shape=[per_head(q.dtype), per_head(gdt), per_head(jnp.float32), scratch], grid=grid, **intra_meta)
    dk, dg = jt.triton_call(
        k, v, g, dhc, thr, g, dki, dgq, *scalars, kernel=_k.gla_bwd_exit_kernel,
        out_shape=[per_head(gdt), per_head(g.dtype)], grid=grid, **flags, **_cfg.exit_meta(d, e, bt))
    return dq, dk, dg


def bwd_call(q, k, v, g, do, h0, dht, pre, scale, reverse):
    """(dq, dk, dv, dg, dh0) from the backward launches; GQA sums dk, dv per kv head."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    dq, dk, dv, dg, dh0 = _bwd_launches(q, k, v, g, do, h0, dht, pre, scale, reverse)
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
        out, pre = fwd_call(q, k, v, g, h0, scale, reverse)
        return out, (q, k, v, g, h0, pre)

    def bwd(scale, reverse, resid, cts):
        q, k, v, g, h0, pre = resid
        do, dht = cts
        dq, dk, dv, dg, dh0 = bwd_call(q, k, v, g, jnp.asarray(do, q.dtype), h0, jnp.asarray(dht, jnp.float32),
                                       pre, scale, reverse)
        return dq, dk, dv, dg, (None if h0 is None else dh0.astype(h0.dtype))

    attn.defvjp(fwd, bwd)
    return attn


_FN = None


def check_call(q, k, v, g, initial_state, cu_seqlens):
    """The host-side checks of ``gla_jax_triton`` (no GPU needed); raises ValueError /
    NotImplementedError. Returns (q, k, v, g as given, initial_state fp32 or None): the kernels
    cumulate g in fp32 whatever its dtype."""
    import jax.numpy as jnp

    q, k, v, initial_state = check_qkv(q, k, v, initial_state, cu_seqlens)
    g = jnp.asarray(g)
    if g.shape != q.shape:
        raise ValueError(f"g must be [B, T, H, D] = {q.shape} (per query head), got {g.shape}")
    if not jnp.issubdtype(g.dtype, jnp.floating) or g.dtype == jnp.float64:
        g = g.astype(jnp.float32)
    return q, k, v, g, initial_state


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
