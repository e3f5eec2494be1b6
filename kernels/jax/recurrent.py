"""Token-by-token recurrence with a chunk-checkpointed custom VJP (pure JAX/XLA).

    S_t = (exp(g_t + gk_t + γ) ⊗ exp(gv_t)) ⊙ S_{t−1} + k_t v_tᵀ,     o_t = scale · S_tᵀ q_t

Forward: ``lax.scan`` over chunks of ``chunk`` tokens, an inner scan over the tokens of a chunk.
The VJP keeps only the state entering each chunk (``T/chunk`` states, not ``T``); the backward
walks the chunks in reverse, recomputes the chunk's states from its checkpoint and runs the
reverse token recurrence for dS. Packed varlen (``cu_seqlens``) works forward and backward:
states restart per sequence at the first token, final states are taken at the last token.
The state and all arithmetic are fp32; outputs come back in the input dtype.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from ..common.jax_helpers import (HIGHEST, check_inputs, default_scale, expand_kv, flip_cu, gamma_array,
                      is_concrete, varlen_maps)

F32 = jnp.float32


def _ein(spec, *ops):
    return jnp.einsum(spec, *ops, precision=HIGHEST)


#: the decay's exponentials; tests swap in ones that are off by some ulps, as a GPU's may be
_exp = jnp.exp
_expm1 = jnp.expm1

#: λ above which 1 + expm1(γ) holds λ more precisely than fp32(exp(γ)); below it λ's terms die out
#: within a few dozen tokens, so λ's own rounding cannot build up
_NEAR_ONE_LOG = -0.6931471805599453  # log(1/2)


def _decay(lk_t, lv_t, gamma, val_t):
    """(a, a_lo): the per-token decay factor, broadcastable to [B, H, D, E] (shape follows the
    gates present; None: no decay), and for a per-head decay alone a second term with
    λ = a + a_lo to well past fp32's precision (else None); the state is decayed as a·s + a_lo·s.

    Why: the per-head λ = exp(γ) is the same rounded fp32 number at every token, so its rounding
    error does not average out: after t tokens the state's oldest terms are off by t times it
    (λ^1000 by up to 7e-5 at the ALiBi slopes, more than the fp32 tolerance of 1e-5). Data-dependent
    gates round differently at every token and need no second term. For λ ≥ 1/2 the pair is
    (1, expm1(γ)): expm1 keeps γ's relative precision. A residue a·(γ − log a) would not do: XLA
    rewrites log(exp(x)) to x, so under jit it is zero."""
    if lk_t is None and lv_t is None and gamma is not None:
        logk = (gamma * val_t)[None, :, None, None]
        near_one = logk > _NEAR_ONE_LOG
        return jnp.where(near_one, 1.0, _exp(logk)), jnp.where(near_one, _expm1(logk), 0.0)
    return _gate_factor(lk_t, lv_t, gamma, val_t), None


def _gate_factor(lk_t, lv_t, gamma, val_t):
    if lk_t is None:
        logk = (gamma * val_t)[None, :, None] if gamma is not None else None
    else:
        logk = lk_t if gamma is None else lk_t + (gamma * val_t)[None, :, None]
    a = None if logk is None else jnp.exp(logk)[..., None]
    if lv_t is not None:
        b = jnp.exp(lv_t)[..., None, :]
        a = b if a is None else a * b
    return a


def _decayed(a, a_lo, s, add):
    """a·s + add (a None: no decay; add None: nothing added), plus a_lo·s if any."""
    if a is None:
        return s if add is None else s + add
    if a_lo is not None:
        add = a_lo * s if add is None else a_lo * s + add
    return a * s if add is None else a * s + add


def _tok(x, i):
    return None if x is None else x[i]


def _f32(x):
    return None if x is None else x.astype(F32)


def _fwd_chunk(s, finals, xs, h0, gamma, scale, varlen, keep_states):
    """Inner scan over one chunk's tokens. Returns (s, finals), outputs and (optionally) S_{t-1}."""

    def step(carry, x):
        s, finals = carry
        q_t, k_t, v_t, lk_t, lv_t, val_t, seq_t, st_t, en_t = x
        if varlen:
            s = jnp.where(st_t, h0[seq_t][None], s)
        s_prev = s
        a, a_lo = _decay(_f32(lk_t), _f32(lv_t), gamma, val_t)
        kv = k_t.astype(F32)[..., :, None] * v_t.astype(F32)[..., None, :]
        s = _decayed(a, a_lo, s_prev, kv)
        o_t = scale * _ein("bhd,bhde->bhe", q_t.astype(F32), s)
        if varlen:
            finals = finals.at[seq_t].set(jnp.where(en_t, s[0], finals[seq_t]))
        return (s, finals), ((o_t, s_prev) if keep_states else o_t)

    (s, finals), ys = lax.scan(step, (s, finals), xs)
    return s, finals, ys


@partial(jax.custom_vjp, nondiff_argnums=(8, 9))
def _core(q, k, v, lk, lv, gamma, h0, meta, scale, varlen):
    o, final, _ = _core_fwd_impl(q, k, v, lk, lv, gamma, h0, meta, scale, varlen, False)
    return o, final


def _core_fwd_impl(q, k, v, lk, lv, gamma, h0, meta, scale, varlen, keep):
    """Arrays are chunk-major: q [NC, C, B, H, D]; meta = (valid, seq, start, end) as [NC, C]."""
    nc, c, b, h, d = q.shape
    e = v.shape[-1]
    h0 = h0.astype(F32)
    s0 = jnp.zeros((b, h, d, e), F32) if varlen else h0
    finals0 = h0 if varlen else jnp.zeros((0, h, d, e), F32)

    def outer(carry, x):
        s, finals = carry
        s_new, finals, o_c = _fwd_chunk(s, finals, x, h0, gamma, scale, varlen, False)
        return (s_new, finals), ((o_c, s) if keep else o_c)

    xs = (q, k, v, lk, lv) + tuple(meta)
    (s, finals), ys = lax.scan(outer, (s0, finals0), xs)
    o, checkpoints = ys if keep else (ys, None)
    return o, (finals if varlen else s), checkpoints


def _core_fwd(q, k, v, lk, lv, gamma, h0, meta, scale, varlen):
    o, final, chk = _core_fwd_impl(q, k, v, lk, lv, gamma, h0, meta, scale, varlen, True)
    return (o, final), (q, k, v, lk, lv, gamma, h0, meta, chk)


def _core_bwd(scale, varlen, res, cts):
    q, k, v, lk, lv, gamma, h0, meta, chk = res
    do, dfinal = cts
    nc, c, b, h, d = q.shape
    e = v.shape[-1]
    h0f = h0.astype(F32)
    dfinal = dfinal.astype(F32)
    do = do.astype(F32)

    def outer(carry, x):
        ds, dh0, dgam = carry
        s_chk, xc, do_c = x
        _, _, (_, s_prev) = _fwd_chunk(s_chk, jnp.zeros((0, h, d, e), F32) if not varlen else h0f,
                                       xc, h0f, gamma, scale, varlen, True)

        def bstep(carry, y):
            ds, dh0, dgam = carry
            (q_t, k_t, v_t, lk_t, lv_t, val_t, seq_t, st_t, en_t), do_t, sp_t = y
            if varlen:
                ds = jnp.where(en_t, dfinal[seq_t][None], ds)
            q_t, k_t, v_t = q_t.astype(F32), k_t.astype(F32), v_t.astype(F32)
            a, a_lo = _decay(_f32(lk_t), _f32(lv_t), gamma, val_t)
            kv = k_t[..., :, None] * v_t[..., None, :]
            s_t = _decayed(a, a_lo, sp_t, kv)
            ds = ds + scale * q_t[..., :, None] * do_t[..., None, :]
            dq = scale * _ein("bhde,bhe->bhd", s_t, do_t)
            dk = _ein("bhde,bhe->bhd", ds, v_t)
            dv = _ein("bhde,bhd->bhe", ds, k_t)
            if a is None:
                dlk = dlv = None
                ds_prev = ds
            else:
                da = ds * (a if a_lo is None else a + a_lo) * sp_t  # dλ/dlog λ = λ
                dlk = da.sum(-1) if (lk_t is not None or gamma is not None) else None
                dlv = da.sum(-2) if lv_t is not None else None
                if gamma is not None:
                    dgam = dgam + dlk.sum(axis=(0, 2)) * val_t
                ds_prev = _decayed(a, a_lo, ds, None)
            if varlen:
                dh0 = dh0.at[seq_t].add(jnp.where(st_t, ds_prev[0], 0.0))
                ds_prev = jnp.where(st_t, 0.0, ds_prev)
            outs = (dq, dk, dv, dlk if lk_t is not None else None, dlv)
            return (ds_prev, dh0, dgam), outs

        (ds, dh0, dgam), grads = lax.scan(bstep, (ds, dh0, dgam), (xc, do_c, s_prev), reverse=True)
        return (ds, dh0, dgam), grads

    ds0 = jnp.zeros((b, h, d, e), F32) if varlen else dfinal
    dh00 = jnp.zeros_like(h0f)
    dgam0 = jnp.zeros((h,), F32)
    xs = (q, k, v, lk, lv) + tuple(meta)
    (ds, dh0, dgam), (dq, dk, dv, dlk, dlv) = lax.scan(outer, (ds0, dh00, dgam0), (chk, xs, do), reverse=True)
    if varlen:
        valid, seq, start, end = meta
        # sequences without tokens pass their final-state cotangent straight to their h0
        n = h0.shape[0]
        has_tok = jnp.zeros((n,), bool).at[seq.reshape(-1)].max(start.reshape(-1))
        dh0 = dh0 + jnp.where(has_tok[:, None, None, None], 0.0, dfinal)
    else:
        dh0 = ds
    cast = lambda g, like: None if g is None else g.astype(like.dtype)  # noqa: E731
    return (cast(dq, q), cast(dk, k), cast(dv, v), cast(dlk, lk), cast(dlv, lv),
            None if gamma is None else dgam, dh0.astype(h0.dtype), None)


_core.defvjp(_core_fwd, _core_bwd)


def _chunk_major(x, nc, c):
    """[B, Tp, ...] -> [NC, C, B, ...]."""
    if x is None:
        return None
    b = x.shape[0]
    return jnp.moveaxis(x.reshape((b, nc, c) + x.shape[2:]), 0, 2)


def recurrent_attention(q, k, v, g=None, g_gamma=None, gk=None, gv=None, scale=None,
                        initial_state=None, reverse=False, cu_seqlens=None, chunk: int = 64):
    """General recurrence, memory-frugal gradient. Returns (o in q's dtype, final state fp32)."""
    b, t, h, d = q.shape
    e = v.shape[3]
    n = check_inputs(q, k, v, initial_state, cu_seqlens, gates=(("g", g, d), ("gk", gk, d), ("gv", gv, e)))
    scale = float(default_scale(scale, d))
    k, v = expand_kv(k, h), expand_kv(v, h)
    lk = None
    for x in (g, gk):
        if x is not None:
            lk = x.astype(F32) if lk is None else lk + x.astype(F32)
    lv = None if gv is None else gv.astype(F32)
    gamma = gamma_array(g_gamma, h)
    varlen = cu_seqlens is not None
    h0 = jnp.zeros((n, h, d, e), F32) if initial_state is None else initial_state

    tokens = [q, k, v, lk, lv]
    if reverse:
        tokens = [None if x is None else jnp.flip(x, axis=1) for x in tokens]
        if varlen:
            h0 = jnp.flip(h0, axis=0)
    if varlen:
        cu = cu_seqlens if not is_concrete(cu_seqlens) else jnp.asarray(cu_seqlens)
        cu = cu.astype(jnp.int32)
        if reverse:
            cu = flip_cu(cu, t)
        seq, start, end = varlen_maps(cu, t)
        seq = jnp.minimum(seq, n - 1).astype(jnp.int32)
    else:
        seq = jnp.zeros((t,), jnp.int32)
        start = end = jnp.zeros((t,), bool)
    c = max(1, min(chunk, t))
    nc = -(-t // c)
    pad = nc * c - t
    valid = jnp.ones((t,), F32)
    if pad:
        tokens = [None if x is None else jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) for x in tokens]
        valid = jnp.pad(valid, (0, pad))
        seq = jnp.pad(seq, (0, pad), constant_values=n - 1)
        start = jnp.pad(start, (0, pad))
        end = jnp.pad(end, (0, pad))
    meta = tuple(x.reshape(nc, c) for x in (valid, seq, start, end))
    tq, tk, tv, tlk, tlv = (_chunk_major(x, nc, c) for x in tokens)
    o, final = _core(tq, tk, tv, tlk, tlv, gamma, h0, meta, scale, varlen)
    o = jnp.moveaxis(o, 2, 0).reshape(b, nc * c, h, e)[:, :t]
    if reverse:
        o = jnp.flip(o, axis=1)
        if varlen:
            final = jnp.flip(final, axis=0)
    return o.astype(q.dtype), final.astype(F32)


def residual_bytes(q, k, v, chunk: int = 64, **kw) -> int:
    """Bytes of the VJP residuals of ``recurrent_attention`` (for the O(T/chunk) memory test)."""
    _, vjp_fn = jax.vjp(lambda q_, k_, v_: recurrent_attention(q_, k_, v_, chunk=chunk, **kw), q, k, v)
    leaves = jax.tree_util.tree_leaves(vjp_fn)
    return int(sum(x.size * x.dtype.itemsize for x in leaves if hasattr(x, "dtype")))
