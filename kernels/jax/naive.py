"""JAX references for the kernel contract that every bundled kernel honours.

Mirrors ``lattnbench.kernels.naive.torch_ref``: the quadratic form of Lightning Attention and a
token-by-token loop of the general recurrence, both computing in the dtype they are given
(fp64 when x64 is enabled: ``with jax.enable_x64(True): ...``). Slow and memory-hungry by
design: they are the references the fast kernels are checked against, not kernels.

Layout ``[B, T, H, D]``; k and v may have fewer heads than q (GQA). Both return
``(o, final_state)``, ``final_state`` of shape ``[N, H, D, E]``. ``cu_seqlens`` must be concrete.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..common.jax_helpers import HIGHEST, check_inputs, concrete_cu, default_scale, expand_kv


def _einsum(spec, *ops):
    return jnp.einsum(spec, *ops, precision=HIGHEST)


def _per_sequence(fn, q, k, v, gates, initial_state, cu_seqlens, **kw):
    cu = concrete_cu(cu_seqlens, "the naive references")
    outs, states = [], []
    for i in range(len(cu) - 1):
        sl = slice(int(cu[i]), int(cu[i + 1]))
        h0 = None if initial_state is None else initial_state[i : i + 1]
        g_i = {name: (None if g is None else g[:, sl]) for name, g in gates.items()}
        o, s = fn(q[:, sl], k[:, sl], v[:, sl], initial_state=h0, **g_i, **kw)
        outs.append(o)
        states.append(s)
    return jnp.concatenate(outs, axis=1), jnp.concatenate(states, axis=0)


def _gamma(gamma, h, dtype):
    if gamma is None:
        return jnp.zeros((h,), dtype)
    g = jnp.asarray(gamma).astype(dtype).reshape(-1)
    if g.shape[0] != h:
        raise ValueError(f"gamma must have one value per query head ({h}), got {g.shape[0]}")
    return g


def lightning_naive(q, k, v, gamma=None, scale=None, initial_state=None, reverse=False, cu_seqlens=None):
    """Quadratic form: o = scale·((Q Kᵀ) ⊙ M) V + decayed S_0 term, M[t,s] = exp(γ(t−s)), s ≤ t."""
    check_inputs(q, k, v, initial_state, cu_seqlens)
    if cu_seqlens is not None:
        return _per_sequence(lightning_naive, q, k, v, {}, initial_state, cu_seqlens,
                             gamma=gamma, scale=scale, reverse=reverse)
    b, t, h, d = q.shape
    e = v.shape[3]
    dt = q.dtype
    scale = default_scale(scale, d)
    k, v = expand_kv(k, h).astype(dt), expand_kv(v, h).astype(dt)
    g = _gamma(gamma, h, dt)
    pos = jnp.arange(t, dtype=dt)
    dist = (pos[None, :] - pos[:, None]) if reverse else (pos[:, None] - pos[None, :])  # [t, s]
    logm = jnp.where(dist >= 0, g[:, None, None] * dist, -jnp.inf)
    mask = jnp.exp(logm).astype(dt)  # [h, t, s]
    scores = _einsum("bthd,bshd->bhts", q, k) * mask
    o = scale * _einsum("bhts,bshe->bthe", scores, v)
    to_end = pos if reverse else (t - 1 - pos)
    w = jnp.exp(g[:, None] * to_end[None, :])  # [h, s]
    final = _einsum("hs,bshd,bshe->bhde", w, k, v)
    if initial_state is not None:
        s0 = initial_state.astype(dt)
        steps = (t - pos) if reverse else (pos + 1)
        w0 = jnp.exp(g[:, None] * steps[None, :])  # [h, t]
        o = o + scale * _einsum("ht,bthd,bhde->bthe", w0, q, s0)
        final = final + jnp.exp(g * t)[None, :, None, None] * s0
    del e
    return o.astype(dt), final


def recurrent_naive(q, k, v, g=None, g_gamma=None, gk=None, gv=None, scale=None,
                    initial_state=None, reverse=False, cu_seqlens=None):
    """Token-by-token general recurrence S_t = (exp(g+gk+γ) ⊗ exp(gv)) ⊙ S_{t−1} + k_t v_tᵀ."""
    b, t, h, d = q.shape
    e = v.shape[3]
    check_inputs(q, k, v, initial_state, cu_seqlens, gates=(("g", g, d), ("gk", gk, d), ("gv", gv, e)))
    if cu_seqlens is not None:
        return _per_sequence(recurrent_naive, q, k, v, {"g": g, "gk": gk, "gv": gv}, initial_state, cu_seqlens,
                             g_gamma=g_gamma, scale=scale, reverse=reverse)
    dt = q.dtype
    scale = default_scale(scale, d)
    k, v = expand_kv(k, h).astype(dt), expand_kv(v, h).astype(dt)
    gam = _gamma(g_gamma, h, dt)
    log_k = jnp.broadcast_to(gam[None, None, :, None], (b, t, h, d))
    if g is not None:
        log_k = log_k + g.astype(dt)
    if gk is not None:
        log_k = log_k + gk.astype(dt)
    log_v = jnp.zeros((b, t, h, e), dt) if gv is None else gv.astype(dt)
    state = jnp.zeros((b, h, d, e), dt)
    if initial_state is not None:
        state = state + initial_state.astype(dt)

    def step(s, xs):
        q_i, k_i, v_i, lk_i, lv_i = xs
        decay = jnp.exp(lk_i)[..., None] * jnp.exp(lv_i)[..., None, :]
        s = decay * s + k_i[..., :, None] * v_i[..., None, :]
        return s, scale * _einsum("bhd,bhde->bhe", q_i, s)

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, log_k, log_v))
    state, out = lax.scan(step, state, xs, reverse=reverse)
    return jnp.moveaxis(out, 0, 1).astype(dt), state
