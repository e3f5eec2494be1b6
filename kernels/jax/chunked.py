"""Block-parallel (Lightning Attention-2) chunked form in pure JAX: GLA here, Lightning in
``lightning_chunked``; ``chunked_attention`` is the entry point of both.

GLA (data-dependent ``g [B,T,H,D] ≤ 0``), two passes, all big work in batched einsums:

1. per chunk ``n`` (size C): the state contribution ``U_n = Σ_s decay(s→end) k_s v_sᵀ`` and the
   chunk decay ``λ_n``, one batched einsum over all chunks; then the chunk recurrence
   ``S_{n+1} = λ_n ⊙ S_n + U_n`` (a sequential ``lax.scan`` of elementwise work, an associative
   scan, or groups of chunks in one einsum) giving the state entering every chunk;
2. outputs for all chunks at once: ``o = scale·[(q ⊙ decay(start→t)) S_n + ((Q Kᵀ) ⊙ M) V]``.

Every exponent stays ≤ 0: cumulative sums are relative to the chunk start; inside a chunk, blocks
of ``sub`` tokens use the key block's last position as reference (both factors
``exp(G_t − G_ref)`` and ``exp(G_ref − G_s)`` are ≤ 1), and the diagonal blocks are computed
exactly, elementwise (fla's scheme). Every exponent is also right to ~ε·|itself|, not ~ε·|G|
(fp32 cumulative sums reach hundreds at fla's strong test gates): cumulative sums carry their
rounding error beside them (``_cumsum_split``), and the diagonal blocks' gate gradient is summed
from the pairs each gate is inside (``_pair_sums``), so dg stays near fp32's rounding at any gate.

Gradients by autodiff (``_pair_sums`` and ``_after_sums`` have their own VJPs); residuals are
the chunk states (T/C · D·E per head) and per-chunk intermediates (O(T·C)), so memory is O(T).
bf16/fp16 inputs: einsums on that dtype with fp32 accumulation; fp32 inputs: ``Precision.HIGHEST``
(the GPU default would be TF32).
Packed varlen: sequences are laid out chunk-aligned (each starts a new chunk, padding tokens
are identities), states restart per sequence. ``cu_seqlens`` must be concrete.

Lightning (``g`` None: one log decay γ_h per head, or none) is ``lightning_chunked``: the same
form with the exact decay mask, the entering states from one matmul and a hand-written backward.
"""
from __future__ import annotations

from functools import partial

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from ..common.jax_helpers import (HIGHEST, check_inputs, concrete_cu, default_scale, expand_kv, flip_cu,
                      gamma_array, varlen_layout)
from .lightning_chunked import CHUNK as LIGHTNING_CHUNK, decay_bound, lightning_chunked

F32 = jnp.float32
SCANS = ("sequential", "associative", "blocked")


def _cpu() -> bool:
    return jax.default_backend() == "cpu"


def _mm(spec, a, b, cdt):
    """einsum with fp32 accumulation: low-precision operands in cdt, or fp32 at HIGHEST."""
    if cdt == F32 or _cpu():
        # XLA:CPU has no bf16 x bf16 -> f32 dot: round the operands to cdt, multiply in fp32
        # (bf16/fp16 products are exact in fp32, so this is the same arithmetic)
        a, b = a.astype(cdt).astype(F32), b.astype(cdt).astype(F32)
        return jnp.einsum(spec, a, b, precision=HIGHEST)
    return jnp.einsum(spec, a.astype(cdt), b.astype(cdt), preferred_element_type=F32)


def _shift(x, axis):
    """``x`` one step along ``axis``: 0 first, then x[0..n-2]."""
    first = jnp.zeros_like(lax.slice_in_dim(x, 0, 1, axis=axis))
    return jnp.concatenate([first, lax.slice_in_dim(x, 0, x.shape[axis] - 1, axis=axis)], axis=axis)


def _cumsum_split(x, axis):
    """The inclusive cumulative sum of ``x`` along ``axis`` as (hi, lo), hi + lo to about twice fp32's
    precision: hi = cumsum(x), lo the running sum of each step's rounding error (TwoSum against
    the step before). ``lo`` carries no gradient: d(hi + lo) = d hi exactly.

    At strong gates a chunk's cumulative gate reaches hundreds, and fp32 rounds it by ~ε·|G|; a
    factor exp(G_t − G_s) formed from two such sums then misses by that much relative, in every
    output and most in dg. With lo beside hi the difference is right to ~ε·|G_t − G_s|."""
    hi = jnp.cumsum(x, axis=axis)
    prev = _shift(hi, axis)
    step = prev + x
    back = step - prev
    err = (prev - (step - back)) + (x - back)    # prev + x = step + err, exactly
    # step and hi are the same sum added in another order: their difference is exact
    lo = jnp.cumsum((step - hi) + err, axis=axis)
    return hi, lax.stop_gradient(lo)


def _chunks(x, c):
    """[B, Tp, ...] -> [B, NC, C, ...]."""
    return x.reshape((x.shape[0], x.shape[1] // c, c) + x.shape[2:])


# ----------------------------------------------------------------------------------------------
# chunk-state recurrence
# ----------------------------------------------------------------------------------------------

def _state_scan(ll, u, h0, resets, scan, out_dtype, group=16):
    """States entering each chunk, from log chunk decays ``ll`` [B, NC, H, D, 1] and chunk
    contributions ``u`` [B, NC, H, D, E]; h0 [N, H, D, E].

    Dense (resets None): S_0 = h0 (N = B); scan = "sequential" (lax.scan over chunks),
    "associative" (lax.associative_scan) or "blocked" (groups of ``group`` chunks in one
    batched einsum with the exact decay matrix, a short lax.scan across groups).
    Varlen (B = 1): resets = (first-chunk flag [NC], sequence [NC], last-chunk flag [NC]),
    always sequential. Returns (S_in [B, NC, H, D, E] in out_dtype, final state fp32).
    """
    b, nc = u.shape[:2]
    lam = jnp.exp(ll)
    if resets is not None:
        flag, seq, is_last = (jnp.asarray(x) for x in resets)
        lam_t = jnp.moveaxis(jnp.broadcast_to(lam, (lam.shape[0], nc) + lam.shape[2:]), 1, 0)

        def step(carry, x):
            s, fin = carry
            lam_n, u_n, f_n, q_n, l_n = x
            s = jnp.where(f_n, h0[q_n][None], s)
            s_out = lam_n * s + u_n
            fin = fin.at[q_n].set(jnp.where(l_n, s_out[0], fin[q_n]))
            return (s_out, fin), s.astype(out_dtype)

        (_, final), s_in = lax.scan(step, (jnp.zeros((b,) + u.shape[2:], F32), h0),
                                    (lam_t, jnp.moveaxis(u, 1, 0), flag, seq, is_last))
        return jnp.moveaxis(s_in, 0, 1), final
    if scan == "associative":
        lam_b = jnp.broadcast_to(lam, (b, nc) + lam.shape[2:])

        def comb(x, y):
            return x[0] * y[0], y[0] * x[1] + y[1]

        cum_lam, cum_u = lax.associative_scan(comb, (lam_b, u), axis=1)
        s_out = cum_lam * h0[:, None] + cum_u
        s_in = jnp.concatenate([h0[:, None], s_out[:, :-1]], axis=1)
        return s_in.astype(out_dtype), s_out[:, -1]
    if scan == "blocked":
        el = min(group, nc)
        ng = -(-nc // el)
        pad = ng * el - nc
        llb = jnp.broadcast_to(ll, (ll.shape[0], nc) + ll.shape[2:])[..., 0]   # [Bx, NC, H, Dl]
        ub = u
        if pad:
            llb = jnp.pad(llb, [(0, 0), (0, pad), (0, 0), (0, 0)])
            ub = jnp.pad(u, [(0, 0), (0, pad)] + [(0, 0)] * 3)
        llb = llb.reshape((llb.shape[0], ng, el) + llb.shape[2:])             # [Bx, G, L, H, Dl]
        ub = ub.reshape((b, ng, el) + u.shape[2:])                            # [B, G, L, H, D, E]
        cl = jnp.cumsum(llb, axis=2)
        cl_ex = _shift(cl, 2)
        lower = jnp.tril(jnp.ones((el, el), bool), -1)[:, :, None, None]
        # Σ_{j<m<i} ll_m summed from the chunks it spans, not as a difference of cumulative sums
        # (``_gla_intra``'s diagonal blocks say why)
        i_, j_, m_ = np.ogrid[:el, :el, :el]
        span = jnp.asarray((j_ < m_) & (m_ < i_), F32)                     # [i, j, m]
        diff = jnp.einsum("ijm,bgmhd->bgijhd", span, llb, precision=HIGHEST)  # [Bx, G, L(i), L(j), H, Dl]
        w = jnp.where(lower, jnp.exp(jnp.where(lower, diff, 0.0)), 0.0)
        w = jnp.broadcast_to(w, (b,) + w.shape[1:])
        local = jnp.einsum("bgijhd,bgjhde->bgihde", w, ub, precision=HIGHEST)
        p_ex = jnp.exp(cl_ex)[..., None]                                      # [Bx, G, L, H, Dl, 1]
        g_lam = jnp.exp(cl[:, :, -1])[..., None]                              # [Bx, G, H, Dl, 1]
        g_u = jnp.exp(llb[:, :, -1])[..., None] * local[:, :, -1] + ub[:, :, -1]  # group's own sum

        def gstep(s, x):
            lam_g, u_g = x
            return lam_g * s + u_g, s

        g_lam_t = jnp.moveaxis(jnp.broadcast_to(g_lam, (g_lam.shape[0], ng) + g_lam.shape[2:]), 1, 0)
        final, s_g = lax.scan(gstep, h0, (g_lam_t, jnp.moveaxis(g_u, 1, 0)))
        s_in = local + p_ex * jnp.moveaxis(s_g, 0, 1)[:, :, None]
        s_in = s_in.reshape((b, ng * el) + u.shape[2:])[:, :nc]
        return s_in.astype(out_dtype), final
    lam_t = jnp.moveaxis(jnp.broadcast_to(lam, (lam.shape[0], nc) + lam.shape[2:]), 1, 0)

    def step(s, x):
        lam_n, u_n = x
        return lam_n * s + u_n, s.astype(out_dtype)

    final, s_in = lax.scan(step, h0, (lam_t, jnp.moveaxis(u, 1, 0)))
    return jnp.moveaxis(s_in, 0, 1), final


# ----------------------------------------------------------------------------------------------
# GLA: per-(token, key-channel) log decay g ≤ 0
# ----------------------------------------------------------------------------------------------

@jax.custom_vjp
def _pair_sums(g, hi, lo):
    """Σ_{s<u≤t} g_u [P, ns, t, s, H, D] (for s ≤ t; other entries unspecified) of each sub-block's
    log gates ``g`` [P, ns, sub, H, D], from their split cumulative sums ``hi``, ``lo``
    (``_cumsum_split``, along the same axis, from any start).

    The gradient goes to ``g`` alone, summed from the pairs that span each u (s < u ≤ t). Autodiff of
    the difference would give dg_u as the rest of two sums over every pair after u, whose rounding
    at strong gates is 10x fp32's."""
    return (hi[:, :, :, None] - hi[:, :, None, :]) + (lo[:, :, :, None] - lo[:, :, None, :])


def _pair_sums_fwd(g, hi, lo):
    return _pair_sums(g, hi, lo), hi.shape  # no arrays kept: the VJP needs the shape alone


def _pair_sums_bwd(shape, cot):
    zero = jnp.zeros(shape, F32)
    n = shape[2]
    before = _shift(jnp.cumsum(cot, axis=3), 3)            # [P, ns, t, u, H, D]: Σ_{s<u} cot[t, s]
    upper = (np.arange(n)[:, None] >= np.arange(n)[None, :])[:, :, None, None]   # [t, u]: t ≥ u
    return jnp.sum(jnp.where(upper, before, 0.0), axis=2), zero, zero


_pair_sums.defvjp(_pair_sums_fwd, _pair_sums_bwd)


@jax.custom_vjp
def _after_sums(g, hi, lo):
    """Σ_{u>t} g_u [B, NC, C, H, D] of the log gates ``g``, from their split cumulative sums from the
    chunk start: hi + lo at the chunk's end less at t.

    The gradient goes to ``g`` alone, as dg_u = Σ_{t<u} of the cotangent: summed directly, not
    the small rest of two sums over the chunk that autodiff of the difference would give."""
    return (hi[:, :, -1:] - hi) + (lo[:, :, -1:] - lo)


def _after_sums_fwd(g, hi, lo):
    return _after_sums(g, hi, lo), hi.shape


def _after_sums_bwd(shape, cot):
    zero = jnp.zeros(shape, F32)
    return _shift(jnp.cumsum(cot, axis=2), 2), zero, zero


_after_sums.defvjp(_after_sums_fwd, _after_sums_bwd)


def _gla_intra(qc, kc, gc, gc_lo, lgc, sub, cdt):
    """Intra-chunk scores A[b, n, h, t, s] = Σ_d q_t k_s exp(G_t − G_s) (s ≤ t), all exponents ≤ 0;
    G = gc + gc_lo (``_cumsum_split``) of the log gates ``lgc``.

    Batch and chunk axes are merged into one (rank ≤ 6 everywhere): XLA:CPU's YNNPACK fusion
    (jax 0.10.2) segfaults in a transpose of the rank-7 / batch-1 form of the same gradient.
    """
    b, nc, c, h, d = qc.shape
    ns = c // sub
    p = b * nc
    qs = qc.reshape(p, ns, sub, h, d).astype(F32)
    ks = kc.reshape(p, ns, sub, h, d).astype(F32)
    gs = gc.reshape(p, ns, sub, h, d)
    gl = gc_lo.reshape(p, ns, sub, h, d)
    # off-diagonal blocks (query block i > key block j): reference = last position of block j,
    # so both factors exp(G_t − ref) and exp(ref − G_s) are ≤ 1; one einsum per key block j.
    rows = []
    for j in range(ns - 1):
        ref, ref_lo = gs[:, j, -1], gl[:, j, -1]                      # [P, H, D]
        up = (gs[:, j + 1:] - ref[:, None, None]) + (gl[:, j + 1:] - ref_lo[:, None, None])
        down = (ref[:, None] - gs[:, j]) + (ref_lo[:, None] - gl[:, j])
        q_j = qs[:, j + 1:] * jnp.exp(up)                             # ≤ |q|
        k_j = ks[:, j] * jnp.exp(down)                                # ≤ |k|
        a = _mm("pithd,pshd->phits", q_j, k_j, cdt)                   # [P, H, i > j, sub, sub]
        rows.append(jnp.pad(a, [(0, 0), (0, 0), (j + 1, 0), (0, 0), (0, 0)]))
    rows.append(jnp.zeros((p, h, ns, sub, sub), F32))
    off = jnp.stack(rows, axis=4)                                       # [P, H, i, t, j, s]
    # diagonal blocks, exactly (exponents G_t − G_s ≤ 0 for s ≤ t)
    causal = jnp.tril(jnp.ones((sub, sub), bool))[:, :, None, None]
    gd = _pair_sums(lgc.reshape(p, ns, sub, h, d), gs, gl)             # [P, ns, t, s, H, D]
    w = jnp.where(causal, jnp.exp(jnp.where(causal, gd, 0.0)), 0.0)
    diag = jnp.einsum("pithd,pishd,pitshd->phits", qs, ks, w, precision=HIGHEST)
    eye = jnp.eye(ns, dtype=F32)
    full = off + eye[:, None, :, None] * diag[:, :, :, :, None, :]
    return full.reshape(b, nc, h, c, c)


def _gla_chunks(q, k, v, lg, h0, scale, c, sub, resets, scan, group=16):
    b, tp, h, d = q.shape
    cdt = q.dtype if q.dtype in (jnp.bfloat16, jnp.float16) else F32
    qc, kc, vc = _chunks(q, c), _chunks(k, c), _chunks(v, c)
    lgc = _chunks(lg.astype(F32), c)                       # [B, NC, C, H, D], ≤ 0
    g, g_lo = _cumsum_split(lgc, 2)                        # G_t from the chunk start, falling
    u = _mm("bnchd,bnche->bnhde", kc * jnp.exp(_after_sums(lgc, g, g_lo)), vc, cdt)
    ll = (g[:, :, -1] + g_lo[:, :, -1])[..., None]         # [B, NC, H, D, 1]
    s_in, final = _state_scan(ll, u, h0, resets, scan, cdt, group)
    o = _mm("bnchd,bnhde->bnche", qc * jnp.exp(g + g_lo), s_in, cdt)
    scores = jax.checkpoint(partial(_gla_intra, sub=sub, cdt=cdt))(qc, kc, g, g_lo, lgc)
    o = o + _mm("bnhts,bnshe->bnthe", scores, vc, cdt)
    o = (scale * o).reshape(b, tp, h, v.shape[-1])
    return o, final


# ----------------------------------------------------------------------------------------------
# the entry point: Lightning to lightning_chunked; GLA: padding, reverse, varlen layout
# ----------------------------------------------------------------------------------------------

#: GLA's defaults: chunk length, sub-block length, state scan and its group size ("blocked")
GLA_CHUNK, GLA_SUB, GLA_SCAN, GLA_GROUP = 64, 16, "sequential", 16


def chunked_attention(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, reverse=False,
                      cu_seqlens=None, chunk: int | None = None, sub: int | None = None, scan: str | None = None,
                      group: int | None = None):
    """Chunked linear attention: Lightning when ``g`` is None (decay ``g_gamma`` [H] or none), GLA
    when ``g [B,T,H,D]`` is given (``g_gamma`` adds to it). Returns (o in q's dtype, final state fp32).

    chunk: block length C (Lightning 128, GLA 64). GLA only: sub, the sub-block length (16); scan and
    group, how the chunk states are propagated (``_state_scan``: "sequential" by default,
    "associative" or "blocked" in groups of ``group``; varlen always scans sequentially).
    """
    if g is None:
        given = [name for name, val in (("sub", sub), ("scan", scan), ("group", group)) if val is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: GLA's options (g given); Lightning takes chunk only")
        return _lightning(q, k, v, g_gamma, scale, initial_state, reverse, cu_seqlens,
                          LIGHTNING_CHUNK if chunk is None else chunk)
    chunk = GLA_CHUNK if chunk is None else chunk
    sub = GLA_SUB if sub is None else sub
    scan = GLA_SCAN if scan is None else scan
    group = GLA_GROUP if group is None else group
    b, t, h, d = q.shape
    e = v.shape[3]
    n = check_inputs(q, k, v, initial_state, cu_seqlens, gates=(("g", g, d),))
    if scan not in SCANS:
        raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
    scale = float(default_scale(scale, d))
    k, v = expand_kv(k, h), expand_kv(v, h)
    gamma = gamma_array(g_gamma, h)
    c = max(1, min(chunk, t))
    sub = max(1, min(sub, c))
    c = -(-c // sub) * sub                                  # a whole number of sub-blocks
    h0 = jnp.zeros((n, h, d, e), F32) if initial_state is None else initial_state.astype(F32)
    cdt = q.dtype
    lg = g.astype(F32) if gamma is None else g.astype(F32) + gamma[None, None, :, None]

    toks = [q, k, v, lg]
    if reverse:
        toks = [jnp.flip(x, axis=1) for x in toks]
    varlen = cu_seqlens is not None
    if varlen:
        cu = concrete_cu(cu_seqlens, "impl='chunked'")
        if reverse:
            cu = flip_cu(cu, t)
            h0 = jnp.flip(h0, axis=0)
        src, dst, flag, seq, last = varlen_layout(cu, t, c)
        take = lambda x: jnp.concatenate(  # noqa: E731
            [x, jnp.zeros((1, 1) + x.shape[2:], x.dtype)], axis=1)[:, src]
        toks = [take(x) for x in toks]
        is_last = np.zeros(len(flag), bool)
        is_last[last[last >= 0]] = True
        resets = (flag, seq, is_last)
    else:
        pad = -t % c
        if pad:
            toks = [jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) for x in toks]
        resets = None
    o, final = _gla_chunks(*toks, h0, scale, c, sub, resets, scan, group)
    if varlen:
        o = o[:, dst]
        if reverse:
            final = jnp.flip(final, axis=0)
    else:
        o = o[:, :t]
    if reverse:
        o = jnp.flip(o, axis=1)
    return o.astype(cdt), final.astype(F32)


def _lightning(q, k, v, g_gamma, scale, initial_state, reverse, cu_seqlens, chunk):
    b, t, h, d = q.shape
    e = v.shape[3]
    n = check_inputs(q, k, v, initial_state, cu_seqlens)
    scale = float(default_scale(scale, d))
    k, v = expand_kv(k, h), expand_kv(v, h)
    gamma = gamma_array(g_gamma, h)
    h0 = jnp.zeros((n, h, d, e), F32) if initial_state is None else initial_state.astype(F32)
    cu = None if cu_seqlens is None else concrete_cu(cu_seqlens, "impl='chunked'")
    o, final = lightning_chunked(q, k, v, gamma, h0, scale, chunk=chunk, reverse=reverse, cu=cu,
                                 has_h0=initial_state is not None, gamma_max=decay_bound(g_gamma))
    return o.astype(q.dtype), final.astype(F32)
