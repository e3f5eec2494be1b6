"""Gated delta rule (GDN), token by token in pure JAX: a second kernel beside the chunked one.

    S ← α_t S;   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ;   o_t = scale · Sᵀ q_t      (α_t = exp(g_t))

Forward: a ``lax.scan`` over chunks of ``chunk`` tokens, an inner scan over the chunk's tokens.
The outer body is under ``jax.checkpoint``, so autodiff keeps the state entering each chunk
(T/chunk · D·E per head) and recomputes the chunk's states in the backward, instead of keeping
a state per token. Same inputs, layout, conventions and varlen handling as ``gdn_chunked``
(``lattnbench.kernels.gdn.jax.gdn_chunked``): sequences laid out chunk-aligned, identity padding.
"""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from ...common.jax_helpers import HIGHEST
from .gdn_chunked import Layout, run_in_layout

Array = jax.Array


def _ein(spec: str, *ops: Array) -> Array:
    return jnp.einsum(spec, *ops, precision=HIGHEST)


def _token(s: Array, x: tuple[Array, ...], scale: float) -> tuple[Array, Array]:
    """One token: s [B, H, D, E]; q_t, k_t [B, H, D], v_t [B, H, E], g_t, beta_t [B, H]."""
    q_t, k_t, v_t, g_t, b_t = x
    s = jnp.exp(g_t)[..., None, None] * s
    delta = b_t[..., None] * (v_t - _ein("bhde,bhd->bhe", s, k_t))
    s = s + k_t[..., :, None] * delta[..., None, :]
    return s, scale * _ein("bhd,bhde->bhe", q_t, s)


def _scan(q: Array, k: Array, v: Array, g: Array, beta: Array, h0: Array, scale: float,
          lay: Layout) -> tuple[Array, Array]:
    """Padded tokens [B, Tp, H, ...] -> (o [B, Tp, H, E], final states [N, H, D, E])."""
    b, tp, h = q.shape[:3]
    c = lay.c
    nc = tp // c
    # chunk-major [NC, C, B, H, ...]
    xs = tuple(jnp.moveaxis(x.reshape((b, nc, c) + x.shape[2:]), 0, 2) for x in (q, k, v, g, beta))
    varlen = lay.dst is not None

    @jax.checkpoint
    def chunk(s, x):
        if varlen:
            s = jnp.where(x[-2], h0[x[-1]][None], s)                        # a sequence starts
        s, o = lax.scan(lambda s_, y: _token(s_, y, scale), s, x[:5])
        return s, (o, s) if varlen else o

    if varlen:
        xs = xs + (jnp.asarray(lay.flag), jnp.asarray(lay.seq))
    s0 = jnp.zeros((1,) + h0.shape[1:], h0.dtype) if varlen else h0
    s_end, ys = lax.scan(chunk, s0, xs)
    if varlen:
        o, s_out = ys
        # each sequence's final state is the state leaving its last chunk (no tokens: h0)
        final = jnp.where(jnp.asarray(lay.last >= 0)[:, None, None, None],
                          s_out[np.maximum(lay.last, 0), 0], h0)
    else:
        o, final = ys, s_end
    o = jnp.moveaxis(o, 2, 0).reshape((b, tp, h, v.shape[-1]))
    return o, final


def gdn_recurrent(q: Array, k: Array, v: Array, g: Array, beta: Array, scale: float | None = None,
                  initial_state: Array | None = None, output_final_state: bool = True, cu_seqlens=None,
                  chunk: int = 64) -> tuple[Array, Array | None]:
    """Gated delta rule, token recurrence; the signature and returns of ``gdn_chunked``."""
    return run_in_layout(_scan, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, chunk)
