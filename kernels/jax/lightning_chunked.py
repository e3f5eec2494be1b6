"""Lightning (scalar per-head decay) chunked form with a hand-written backward, pure JAX/XLA.

The Lightning Attention-2 form behind ``chunked_attention`` (``lightning/jax-chunked``):

- one layout change at entry (``[B, T, H, D] → [B, H, NC, C, D]``, batch axes leading so the
  batched matmuls need no further transposes) and one at exit;
- per chunk n (C tokens, ``L_n`` of them real): ``U_n = Σ_s λ^{L_n−1−s} k_s v_sᵀ``, then the
  states entering every chunk with no sequential scan: the recurrence ``S_{n+1} = λ^C S_n + U_n``
  is linear with a per-head scalar decay, so ``S_in = M U + λ^{Cn}·h0`` with
  ``M[n, j] = λ^{C(n−1−j)}`` (j < n). Dense inputs of several chunks: one [NC, NC] matmul in the
  compute dtype writing S_in once, h0 a broadcast term (``_states_direct``). Packed varlen and a
  single chunk: the fp32 form ``_state_pass`` (for varlen the decay matrix is zero across
  sequences). Every exponent is ≤ 0 (λ^{C·k} underflows to 0, harmlessly);
- outputs ``o = scale·[λ^{i+1}·(q S_n) + ((Q Kᵀ) ⊙ M_C) V]`` in batched einsums. An
  undifferentiated call folds the intra-chunk decay into k and a row factor where the decay
  allows (``_forward_fold``); otherwise the decay is a mask;
- a ``jax.custom_vjp``: residuals are q, k, v (already in the chunked layout) and the entering
  states in the compute dtype; the backward recomputes the intra-chunk scores, gets dS_in per
  chunk from one einsum, dU and dh0 from the transpose of the (linear) state pass, written out
  (``_state_pass_t``; no ``jax.linear_transpose``, whose cotangent types ``shard_map`` refuses),
  and dq, dk, dv from per-chunk einsums. Nothing of size [·, C, C] is stored between the passes.

Packed varlen: each sequence starts a new chunk (padding at the end of a sequence's last chunk,
zero rows); states restart per sequence. T not a multiple of C: zero padding at the end; the last
chunk's contribution and final state use its real length.

Compute dtypes: bf16 / fp16 inputs run the matmuls on that dtype with fp32 accumulation; bf16
inputs also write the Q Kᵀ scores and the inter- and intra-chunk partial products of o, dq, dk,
dv in bf16 before they are summed (half the traffic, one more rounding). fp32 inputs use
``Precision.HIGHEST`` everywhere (no TF32). The fp32 state pass runs at HIGHEST for fp32 inputs
and at the default precision (TF32 on a GPU) for bf16 / fp16, whose S_in is rounded to that dtype
anyway.
"""
from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from ..common.jax_helpers import HIGHEST, varlen_layout

F32 = jnp.float32
#: the block length C
CHUNK = 128
#: the folded forward scales k by λ^{C/2−1−s} and rows by λ^{i−C/2+1}: every factor stays within
#: e^{±FOLD_MAX_EXP} (bf16 / fp32 range e^{±88}, margin for |q·k| up to ~e^{20})
FOLD_MAX_EXP = 60.0


def _cpu() -> bool:
    return jax.default_backend() == "cpu"


def _dot(spec, a, b, cdt, out=F32):
    """einsum with fp32 accumulation: operands rounded to cdt; result in ``out``."""
    if cdt == F32 or _cpu():
        # XLA:CPU has no bf16 x bf16 -> f32 dot: round the operands to cdt, multiply in fp32
        # (products of bf16/fp16 numbers are exact in fp32: the same arithmetic)
        a, b = a.astype(cdt).astype(F32), b.astype(cdt).astype(F32)
        return jnp.einsum(spec, a, b, precision=HIGHEST).astype(out)
    return jnp.einsum(spec, a.astype(cdt), b.astype(cdt), preferred_element_type=out)


@dataclasses.dataclass(frozen=True)
class Config:
    """Static description of one call (hashable: it is a custom_vjp non-diff argument)."""
    c: int                     # chunk length
    nc: int                    # number of chunks
    lens: tuple                # real tokens per chunk (L_n), C for every full chunk
    scale: float
    highest: bool              # the fp32 state pass (_state_pass) at Precision.HIGHEST, else DEFAULT
    # varlen (None when dense): per chunk the sequence id and the first chunk of its sequence;
    # per sequence the index of its last chunk (-1 when the sequence is empty)
    seq: tuple | None = None
    first: tuple | None = None
    last: tuple | None = None
    has_h0: bool = True        # False: the initial state is zero (the direct state pass skips its terms)
    fold: bool = False         # forward: decay folded into k and a row factor (_forward_fold)

    @property
    def full(self) -> bool:
        return all(x == self.c for x in self.lens)


def _prec(cfg):
    return HIGHEST if cfg.highest else lax.Precision.DEFAULT


def _tok(w):
    """A per-token weight [H, 1|NC, C] broadcast against a per-token tensor [B, H, NC, C, F]."""
    return w[None, :, :, :, None]


# ----------------------------------------------------------------------------------------------
# decay factors (fp32, all exponents ≤ 0)
# ----------------------------------------------------------------------------------------------

def _weights(gamma, cfg):
    """wq [H, 1, C] (chunk start → t, λ^{i+1}), wk [H, 1|NC, C] (s → last real token of the
    chunk, 0 on padding), mask [H, C, C] (λ^{i−j} for j ≤ i, else 0)."""
    c = cfg.c
    i = jnp.arange(c, dtype=F32)
    g = gamma[:, None]
    wq = jnp.exp(g * (i + 1.0))[:, None, :]
    if cfg.full:
        wk = jnp.exp(g * (c - 1.0 - i))[:, None, :]
    else:
        lens = np.asarray(cfg.lens, np.float32)
        expo = lens[:, None] - 1.0 - np.arange(c, dtype=np.float32)[None, :]   # [NC, C]
        real = expo >= 0
        wk = jnp.where(real[None], jnp.exp(gamma[:, None, None] * np.maximum(expo, 0.0)[None]), 0.0)
    dist = i[:, None] - i[None, :]
    causal = dist >= 0
    mask = jnp.where(causal[None], jnp.exp(gamma[:, None, None] * jnp.where(causal, dist, 0.0)[None]), 0.0)
    return wq, wk, mask


# ----------------------------------------------------------------------------------------------
# the chunk-state pass: linear in (U, h0)
# ----------------------------------------------------------------------------------------------

def _tri_decay(gamma, step, rows, cols, shift):
    """[H, rows, cols]: λ^{step·(i − 1 − j + shift)} where i − 1 − j + shift ≥ 0, else 0."""
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    e = (i - 1 - j + shift).astype(np.float32)
    ok = e >= 0
    return jnp.where(ok[None], jnp.exp(gamma[:, None, None] * (step * np.where(ok, e, 0.0))[None]), 0.0)


def _varlen_mats(gamma, cfg):
    """Packed varlen (B = 1): M [H, NC, NC] (λ^{C(n−1−j)} within a sequence, j < n; 0 across
    sequences), M0 [H, NC, N] (λ^{C(n − first chunk)} for the chunk's own sequence), and per
    sequence the index of its last chunk (0 when empty), whether it has one, and the decay
    λ^{L_last} over that chunk [N, H, 1]."""
    c, nc = cfg.c, cfg.nc
    seq, first = np.asarray(cfg.seq), np.asarray(cfg.first)
    n = np.arange(nc)
    e = (n[:, None] - 1 - n[None, :]).astype(np.float32)
    ok = (e >= 0) & (seq[:, None] == seq[None, :])
    m = jnp.where(ok[None], jnp.exp(gamma[:, None, None] * (c * np.where(ok, e, 0.0))[None]), 0.0)
    last = np.asarray(cfg.last)
    nseq = len(last)
    ok0 = seq[:, None] == np.arange(nseq)[None, :]                       # [NC, N]
    e0 = (c * (n - first)).astype(np.float32)
    m0 = jnp.where(ok0[None], jnp.exp(gamma[:, None] * e0[None])[:, :, None], 0.0)   # [H, NC, N]
    has = last >= 0
    li = np.where(has, last, 0)
    lens = np.asarray(cfg.lens, np.float32)[li]                          # real length of each last chunk
    lam = jnp.exp(gamma[None, :] * lens[:, None])[..., None]             # [N, H, 1]
    return m, m0, li, has, lam


def _state_pass(u, h0, gamma, cfg):
    """States entering each chunk and the final states, fp32, for packed varlen and for a single
    dense chunk (several dense chunks take ``_states_direct``).

    u [B, H, NC, X] (X = D·E), h0 [N, H, X]. Returns (S_in [B, H, NC, X], final [N, H, X]).
    """
    if cfg.seq is None:                                                   # one chunk: S_in = h0
        lam = jnp.exp(gamma * float(cfg.lens[-1]))[None, :, None]
        return h0[:, :, None], lam * h0 + u[:, :, 0]
    prec = _prec(cfg)
    m, m0, li, has, lam = _varlen_mats(gamma, cfg)
    s_in = (jnp.einsum("hnj,hjx->hnx", m, u[0], precision=prec)
            + jnp.einsum("hni,ihx->hnx", m0, h0, precision=prec))[None]
    fin = lam * jnp.moveaxis(s_in[0][:, li], 1, 0) + jnp.moveaxis(u[0][:, li], 1, 0)
    final = jnp.where(has[:, None, None], fin, h0)                       # an empty sequence keeps h0
    return s_in, final


def _state_pass_t(ds_in, dfinal, gamma, cfg):
    """The transpose of ``_state_pass``: (dS_in [B, H, NC, X], dfinal [N, H, X]) → (dU, dh0)."""
    if cfg.seq is None:
        lam = jnp.exp(gamma * float(cfg.lens[-1]))[None, :, None]
        return dfinal[:, :, None], ds_in[:, :, 0] + lam * dfinal
    prec = _prec(cfg)
    m, m0, li, has, lam = _varlen_mats(gamma, cfg)
    dfin = jnp.where(has[:, None, None], dfinal, 0.0)                    # [N, H, X]
    # the final state reads S_in and U at each sequence's last chunk (distinct chunks)
    at_last = jnp.zeros(ds_in.shape[1:], F32).at[:, li].add(jnp.moveaxis(dfin, 0, 1))      # [H, NC, X]
    ds = ds_in[0] + jnp.zeros_like(at_last).at[:, li].add(jnp.moveaxis(lam * dfin, 0, 1))
    du = jnp.einsum("hnj,hnx->hjx", m, ds, precision=prec) + at_last
    dh0 = (jnp.einsum("hni,hnx->ihx", m0, ds, precision=prec)
           + jnp.where(has[:, None, None], 0.0, dfinal))
    return du[None], dh0


def _cdt(x):
    return x.dtype if x.dtype in (jnp.bfloat16, jnp.float16) else F32


def _low_dt(cdt):
    """Where the Q Kᵀ scores and the partial products are written: bf16 for bf16 inputs, else fp32."""
    return jnp.bfloat16 if cdt == jnp.bfloat16 else F32


def _direct(cfg):
    """The direct state pass (``_states_direct``): dense inputs of several chunks."""
    return cfg.seq is None and cfg.nc > 1


def _direct_mats(gamma, cfg):
    """The direct state pass: M [H, NC, NC] (λ^{C(n−1−j)}, j < n), the final-state row m_fin [H, NC]
    (final = m_fin · Ũ, Ũ = U with λ^C h0 added to chunk 0), λ^C [H], λ^{L_last} [H]."""
    c, nc = cfg.c, cfg.nc
    m = _tri_decay(gamma, c, nc, nc, 0)
    lam_c = jnp.exp(gamma * float(c))
    lam_l = jnp.exp(gamma * float(cfg.lens[-1]))
    e = (float(cfg.lens[-1]) + c * (nc - 2 - np.arange(nc))).astype(np.float32)   # j ≤ NC − 2
    m_fin = jnp.where(np.arange(nc)[None] < nc - 1, jnp.exp(gamma[:, None] * np.maximum(e, 0.0)[None]), 1.0)
    return m, m_fin, lam_c, lam_l


def _set_chunk(x, row, i):
    """x [B, H, NC, X] with chunk i replaced by row [B, H, X] (a dynamic-update-slice: in place)."""
    return lax.dynamic_update_slice_in_dim(x, row.astype(x.dtype)[:, :, None], i % x.shape[2], axis=2)


def _states_direct(kw, v, h0, gamma, cfg, u_scale=None):
    """S_in written once in the compute dtype by one [NC, NC] matmul (cdt operands, fp32 accumulation):
    S_in[n] = Σ_{j<n} λ^{C(n−1−j)} U_j (+ λ^{Cn} h0), final = Σ_j m_fin[j] U_j (+ λ^{L+C(NC−1)} h0) as
    an fp32 reduction reading U once. No dynamic-update-slice of U or S_in: folding h0 into chunk
    0 that way makes XLA:GPU copy U and S_in (a full-size copy and update pass each). Without an
    initial state (cfg.has_h0 False) the h0 terms are skipped: S_in[0] = 0 comes out of the matmul.

    kw: k already weighted per token, so that Σ_s kw_s v_sᵀ = U_n / u_scale; u_scale = ([H] for the
    full chunks, [H] for the last one), None for 1 (k weighted by λ^{L_n−1−s} itself)."""
    b, h, nc, c, d = kw.shape
    e = v.shape[-1]
    cdt = _cdt(v)           # kw is fp32 after its weighting; v is still in the compute dtype
    n = h0.shape[0]
    m, m_fin, _, _ = _direct_mats(gamma, cfg)
    if u_scale is not None:
        full, last = (x[:, None] for x in u_scale)
        m = m * full[:, :, None]                        # S_in only sums full chunks (j < n ≤ NC − 1)
        m_fin = jnp.concatenate([m_fin[:, :-1] * full, last], axis=1)
    u = _dot("bhncd,bhnce->bhnde", kw, v, cdt, out=cdt).reshape(b, h, nc, d * e)
    mb = jnp.broadcast_to(m[None], (b, h, nc, nc))
    # fp32 weighted sum over the chunks (one reduction reading U once; not a matmul with an fp32 copy)
    final = jnp.sum(m_fin[None, :, :, None] * u.astype(F32), axis=2)
    if cfg.has_h0:
        h0r = h0.reshape(n, h, d * e)
        m0 = jnp.exp(gamma[:, None] * (c * np.arange(nc, dtype=np.float32))[None])          # [H, NC]: λ^{Cn}
        s_in = (_dot("bhnj,bhjx->bhnx", mb, u, cdt) + m0[None, :, :, None] * h0r[:, :, None]).astype(cdt)
        final = final + jnp.exp(gamma * float(cfg.lens[-1] + c * (nc - 1)))[None, :, None] * h0r
    else:
        s_in = _dot("bhnj,bhjx->bhnx", mb, u, cdt, out=cdt)
    return s_in.reshape(b, h, nc, d, e), final.reshape(n, h, d, e)


def _states(k, v, h0, gamma, wk, cfg):
    """U and the state pass; returns (S_in [B,H,NC,D,E], final [N,H,D,E] fp32): S_in in the compute
    dtype from the direct pass, fp32 from ``_state_pass``."""
    if _direct(cfg):
        return _states_direct(k * _tok(wk), v, h0, gamma, cfg)
    b, h, nc, c, d = k.shape
    e = v.shape[-1]
    cdt = _cdt(k)
    u = _dot("bhncd,bhnce->bhnde", k * _tok(wk), v, cdt)
    s_in, final = _state_pass(u.reshape(b, h, nc, d * e), h0.reshape(h0.shape[0], h, d * e), gamma, cfg)
    return s_in.reshape(b, h, nc, d, e), final.reshape(h0.shape[0], h, d, e)


# ----------------------------------------------------------------------------------------------
# the core: chunked layout in, custom VJP
# ----------------------------------------------------------------------------------------------

def _forward_fold(q, k, v, h0, gamma, cfg):
    """The forward with the intra-chunk decay folded into the operands (cfg.fold; dense, several
    chunks): with h = C/2, λ^{i−j} = λ^{i−h+1}·λ^{h−1−j}, so
    k̃_s = λ^{h−1−s} k_s serves both products — scores q·k̃ᵀ (then only a causal select, the row
    factor λ^{i−h+1} applied in the final combine) and U'_n = Σ_s k̃_s v_sᵀ = λ^{−h}·U_n for full
    chunks (λ^{h} goes into the [NC, NC] state matrix; the last chunk, L_n real tokens, enters the
    final state with λ^{L_n−h}). Why: k is then read by ONE layout-change fusion that writes k̃,
    instead of a plain transpose for the scores plus a scaled copy for U. Exact up to rounding;
    the factors span e^{±|γ|·h}, so it is used only when max|γ|·h ≤ FOLD_MAX_EXP and the dtype has
    bf16 / fp32 range (``_fold_blocker``). Only the primal (undifferentiated) call uses it; see
    _core_fwd."""
    cdt = _cdt(q)
    c = cfg.c
    half = c // 2
    i = jnp.arange(c, dtype=F32)
    g = gamma[:, None]
    kf = k * jnp.exp(g * (half - 1.0 - i))[None, :, None, :, None]        # λ^{h−1−s} k_s
    row = jnp.exp(g * (i - half + 1.0))[None, :, None, :, None]            # λ^{i−h+1}
    wq = jnp.exp(g * (i + 1.0))[None, :, None, :, None]                    # λ^{i+1}
    u_scale = (jnp.exp(gamma * float(half)), jnp.exp(gamma * float(cfg.lens[-1] - half)))  # U = scale · U'
    s_c, final = _states_direct(kf, v, h0, gamma, cfg, u_scale)
    sp = _dot("bhnid,bhnjd->bhnij", q, kf, cdt, out=_low_dt(cdt))
    p = jnp.where(np.tril(np.ones((c, c), bool)), sp, 0).astype(cdt)
    pdt = _low_dt(cdt)
    o_intra = _dot("bhnij,bhnje->bhnie", p, v, cdt, out=pdt)
    o_inter = _dot("bhncd,bhnde->bhnce", q, s_c, cdt, out=pdt)
    o = (cfg.scale * (row * o_intra.astype(F32) + wq * o_inter)).astype(cdt)
    return o, final, s_c


def _forward(q, k, v, h0, gamma, cfg):
    if cfg.fold:
        return _forward_fold(q, k, v, h0, gamma, cfg)
    cdt = _cdt(q)
    wq, wk, mask = _weights(gamma, cfg)
    s_in, final = _states(k, v, h0, gamma, wk, cfg)
    s_c = s_in.astype(cdt)
    s = _dot("bhnid,bhnjd->bhnij", q, k, cdt, out=_low_dt(cdt))
    pdt = _low_dt(cdt)
    o_inter = _dot("bhncd,bhnde->bhnce", q, s_c, cdt, out=pdt) * _tok(wq)
    p = (s * mask[None, :, None]).astype(cdt)
    o_intra = _dot("bhnij,bhnje->bhnie", p, v, cdt, out=pdt)
    o = (cfg.scale * (o_inter.astype(F32) + o_intra)).astype(cdt)
    return o, final, s_c


@partial(jax.custom_vjp, nondiff_argnums=(5,))
def lightning_core(q, k, v, h0, gamma, cfg):
    """q, k [B, H, NC, C, D], v [B, H, NC, C, E] (cdt), h0 [N, H, D, E] fp32, gamma [H] fp32 (≤ 0).
    Returns (o [B, H, NC, C, E] in q's dtype, final state [N, H, D, E] fp32)."""
    o, final, _ = _forward(q, k, v, h0, gamma, cfg)
    return o, final


def _core_fwd(q, k, v, h0, gamma, cfg):
    # the folded forward only pays off without residuals: the backward needs the plain chunked k
    # too, and writing both k and the folded k makes fwd+grad slower than the mask form, so the
    # differentiated forward keeps the mask form
    o, final, s_c = _forward(q, k, v, h0, gamma, dataclasses.replace(cfg, fold=False))
    return (o, final), (q, k, v, gamma, s_c)


def _core_bwd(cfg, res, cts):
    q, k, v, gamma, s_c = res
    do, dfinal = cts
    b, h, nc, c, d = q.shape
    e = v.shape[-1]
    n = dfinal.shape[0]
    cdt = _cdt(q)
    sc = cfg.scale
    wq, wk, mask = _weights(gamma, cfg)
    do = do.astype(cdt)
    mask_b = mask[None, :, None]
    pdt = _low_dt(cdt)
    # intra-chunk, recomputed scores
    s = _dot("bhnid,bhnjd->bhnij", q, k, cdt, out=pdt)
    dps = _dot("bhnie,bhnje->bhnij", do, v, cdt, out=pdt)
    wq_b = _tok(wq)
    p = (s * mask_b).astype(cdt)
    dp = (dps * mask_b).astype(cdt)
    # dq: intra + through the entering state
    dq = sc * (_dot("bhnij,bhnjd->bhnid", dp, k, cdt, out=pdt).astype(F32)
               + wq_b * _dot("bhnie,bhnde->bhnid", do, s_c, cdt, out=pdt))
    # dS_in per chunk, then dU and dh0 through the transpose of the linear state pass
    if _direct(cfg):
        # the transpose of _states_direct, in the compute dtype: dŨ = Mᵀ dS_in with dfinal entering
        # through S_in[NC−1] (× λ^L) and Ũ[NC−1]; dh0 = dS_in[0] + λ^C dŨ_0
        m, _, lam_c, lam_l = _direct_mats(gamma, cfg)
        dfr = dfinal.astype(F32).reshape(n, h, d * e)
        ds_in = _dot("bhnid,bhnie->bhnde", q, do * (sc * wq_b), cdt, out=cdt).reshape(b, h, nc, d * e)
        ds_in = _set_chunk(ds_in, ds_in[:, :, -1].astype(F32) + lam_l[None, :, None] * dfr, -1)
        du = _dot("bhnj,bhnx->bhjx", jnp.broadcast_to(m[None], (b, h, nc, nc)), ds_in, cdt, out=cdt)
        du = _set_chunk(du, du[:, :, -1].astype(F32) + dfr, -1)
        dh0 = ds_in[:, :, 0].astype(F32) + lam_c[None, :, None] * du[:, :, 0].astype(F32)
        du = du.reshape(b, h, nc, d, e)
    else:
        ds_in = sc * _dot("bhnid,bhnie->bhnde", q, do * wq_b, cdt)
        du, dh0 = _state_pass_t(ds_in.reshape(b, h, nc, d * e), dfinal.astype(F32).reshape(n, h, d * e), gamma, cfg)
        du = du.reshape(b, h, nc, d, e).astype(cdt)
    wk_b = _tok(wk)
    dk = (sc * _dot("bhnij,bhnid->bhnjd", dp, q, cdt, out=pdt).astype(F32)
          + wk_b * _dot("bhnje,bhnde->bhnjd", v, du, cdt, out=pdt))
    dv = (sc * _dot("bhnij,bhnie->bhnje", p, do, cdt, out=pdt).astype(F32)
          + wk_b * _dot("bhnjd,bhnde->bhnje", k, du, cdt, out=pdt))
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dh0.reshape(n, h, d, e),
            jnp.zeros_like(gamma))


lightning_core.defvjp(_core_fwd, _core_bwd)


# ----------------------------------------------------------------------------------------------
# layout: [B, T, H, D] in and out, padding, reverse, varlen
# ----------------------------------------------------------------------------------------------

def decay_bound(gamma) -> float | None:
    """max|γ| when the decay is known at trace time (None: no decay → 0), else None (traced).
    Call it on the caller's own value, before any jnp conversion inside a jit stages it."""
    if gamma is None:
        return 0.0
    try:
        g = np.asarray(gamma, np.float64)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError, TypeError):
        return None
    return float(np.max(np.abs(g))) if g.size else 0.0


def _fold_blocker(gmax, c, nc, cdt, cu) -> str:
    """Why the folded forward cannot run here ('' when it can): it needs dense inputs of at least
    two chunks (the direct state pass), a dtype with fp32's exponent range, and a decay known at
    trace time (``gmax`` = decay_bound(γ), not None: lightning_attn and the harness pass concrete
    decays) with max|γ|·C/2 ≤ FOLD_MAX_EXP."""
    if cu is not None or nc < 2:
        return "it needs dense inputs of at least two chunks"
    if cdt == jnp.float16:
        return "fp16 has too small an exponent range for the folded factors"
    if gmax is None:
        return "the decay is traced (not known at trace time)"
    if gmax * (c // 2) > FOLD_MAX_EXP:
        return f"max|γ|·C/2 = {gmax * (c // 2):.1f} exceeds {FOLD_MAX_EXP}"
    return ""


def lightning_chunked(q, k, v, gamma, h0, scale, chunk=CHUNK, reverse=False, cu=None, has_h0=True,
                      gamma_max=None):
    """q [B, T, H, D], k [B, T, H, D], v [B, T, H, E] (kv already expanded to H heads), gamma [H]
    fp32 or None, h0 [N, H, D, E] fp32 (has_h0=False: the caller vouches h0 is zero, which lets the
    direct state pass skip it), cu: concrete numpy cu_seqlens or None, gamma_max: decay_bound() of
    the caller's decay (None: unknown, no folded forward). Returns
    (o [B, T, H, E] in q's dtype, final state fp32). Inputs are checked by the caller."""
    b, t, h, d = q.shape
    e = v.shape[3]
    cdt = _cdt(q)
    c = max(1, min(chunk, t))
    gamma = jnp.zeros((h,), F32) if gamma is None else jnp.asarray(gamma, F32)

    def to_chunks(x):                                                 # [B, T, H, *] -> [B, H, T, *]
        return jnp.transpose(x, (0, 2, 1, 3))

    if reverse:
        q, k, v = (jnp.flip(x, axis=1) for x in (q, k, v))
    seq = first = last = None
    if cu is not None:
        cu = np.asarray(cu, np.int64)
        if reverse:
            cu = t - cu[::-1]
            h0 = jnp.flip(h0, axis=0)
        src, dst, flag, seqc, lastc = varlen_layout(cu, t, c)
        nc = len(src) // c
        real = np.zeros(len(src), np.int64)
        real[dst] = 1
        lens = tuple(int(x) for x in real.reshape(nc, c).sum(axis=1))
        firsts = np.zeros(nc, np.int64)
        for i in range(nc):
            firsts[i] = i if flag[i] else firsts[i - 1]
        seq, first, last = tuple(int(x) for x in seqc), tuple(int(x) for x in firsts), tuple(int(x) for x in lastc)

        def lay(x):
            xp = jnp.concatenate([x, jnp.zeros((1, 1) + x.shape[2:], x.dtype)], axis=1)[:, src]
            return to_chunks(xp)
    else:
        nc = -(-t // c)
        pad = nc * c - t
        lens = tuple([c] * (nc - 1) + [t - (nc - 1) * c])

        def lay(x):
            x = to_chunks(x)
            return jnp.pad(x, [(0, 0), (0, 0), (0, pad), (0, 0)]) if pad else x

    def chunks(x):
        return lay(x.astype(cdt)).reshape((b, h, nc, c, x.shape[3]))

    qc, kc, vc = (chunks(x) for x in (q, k, v))
    cfg = Config(c=c, nc=nc, lens=lens, scale=float(scale), highest=cdt == F32, seq=seq, first=first,
                 last=last, has_h0=bool(has_h0), fold=not _fold_blocker(gamma_max, c, nc, cdt, cu))
    o, final = lightning_core(qc, kc, vc, h0.astype(F32), gamma, cfg)
    o = o.reshape(b, h, nc * c, e)
    o = o[:, :, dst] if cu is not None else o[:, :, :t]
    o = jnp.transpose(o, (0, 2, 1, 3))
    if reverse:
        o = jnp.flip(o, axis=1)
        if cu is not None:
            final = jnp.flip(final, axis=0)
    return o, final
