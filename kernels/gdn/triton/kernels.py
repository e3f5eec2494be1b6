"""Triton kernels of the gated delta rule (GDN), chunked in the WY / UT-transform form; forward only.

Recurrence per (sequence, query head), fp32 state ``S ∈ R^{D×E}``:
``S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, ``α_t = e^{g_t}``, ``o_t = scale·S_tᵀ q_t``,
g ≤ 0 and β one scalar per token and query head. Inside a chunk of BT tokens entered with state S,
with G the inclusive cumulative gate from the chunk start (``kernels/gdn/jax/gdn_chunked.py``
derives it):

    (I + A) [u | w] = [β ⊙ V | β e^G ⊙ K],     A[i, j] = β_i (k_i·k_j) e^{G_i − G_j}  (j < i)
    ν  = u − w S
    O  = scale·[(e^G ⊙ Q) S + ((Q Kᵀ) ⊙ M) ν],  M[i, j] = e^{G_i − G_j}  (j ≤ i)
    S' = e^{G_last} S + (e^{G_last − G} ⊙ K)ᵀ ν

Two launches:
  gdn_prep_kernel   parallel over chunks (no state): G, A, the unit lower-triangular inverse
                    (I + A)⁻¹ by forward substitution, u [B, T, H, E] (fp32) and w [B, T, H, D]
                    (the input dtype)
  gdn_fwd_kernel    a sweep per (value-column slice, sequence·head) carrying S [BK, BV] in fp32
                    registers: ν, o, and S_T

The sweep's products take operands in the input dtype (fp32 inputs: IEEE dots), the state and
every accumulation fp32, as the GLA sweeps do. Every exponent is ≤ 0: the [BT, BT] decays are
masked to −inf off their triangle before the exponential, and the carried-state factors are
e^{G}, e^{G_last} and e^{G_last − G}. With fp32 inputs (IEEE dots) the cumulative gates are fp64,
so that a difference of two of them keeps the few nats between neighbours when the chunk's sum
reaches −10³ (fp32's spacing there is 6e-5).

Tensors are contiguous ``[B, T, heads, dim]`` (q, g, beta, o, u, w with H heads; k, v with HKV);
kernels take inputs, then scalars, then outputs. Absent optional tensors are any placeholder
pointer; constexpr flags keep them untouched.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ...common.tiles import load_tile, sequence_of, store_tile
from .configs import FWD_CONFIGS, INTERPRET, autotune_configs, prune_configs


@triton.jit
def _gates(g_base, rows, H, valid, DOT_PREC: tl.constexpr):
    """(G [BT], G_last): a chunk's inclusive cumulative gate and its total, from g [B, T, H]
    (zero past the end, so G_last is G at the last valid row). fp64 for fp32 inputs: the
    differences of two of them are the decays' exponents."""
    g = tl.load(g_base + rows * H, mask=valid, other=0.0).to(tl.float32)
    if DOT_PREC == "ieee":
        g = g.to(tl.float64)
    return tl.cumsum(g, 0), tl.sum(g, 0)


@triton.jit
def _pair_decay(G, o_t, STRICT: tl.constexpr):
    """[BT, BT] e^{G_i − G_j} for j < i (STRICT) or j ≤ i, else 0: the exponent is set to −inf off
    the triangle before the exponential, so no exponent is ever positive."""
    if STRICT:
        keep = o_t[:, None] > o_t[None, :]
    else:
        keep = o_t[:, None] >= o_t[None, :]
    x = tl.where(keep, G[:, None] - G[None, :], -float("inf"))
    return tl.exp(x.to(tl.float32))


@triton.jit
def gdn_prep_kernel(
    k, v, g, beta, cu,
    T, H, HKV,
    u, w,
    KD: tl.constexpr, VD: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """u = (I + A)⁻¹(β ⊙ V) [B, T, H, E] and w = (I + A)⁻¹(β e^G ⊙ K) [B, T, H, D] of every chunk
    (per query head: β and g are), computed in fp32 and stored in u's and w's dtypes. Grid
    (P, N·H): program (j, row) takes the row's chunks j, j + P, …; A's K Kᵀ sums D in slices of
    BD, the products w and u take D and E in slices.

    The inverse is forward substitution row by row, T_i = e_i − Σ_{j<i} A_ij T_j, in fp32 registers:
    rows past the end have β = 0 (A's row and column zero there), so they solve to identity rows
    and write nothing."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t = tl.arange(0, BT)
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    g_base = g + bos * H + i_h
    b_base = beta + bos * H + i_h
    u_base = u + bos * (H * VD) + i_h * VD
    w_base = w + bos * (H * KD) + i_h * KD
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows = i_c * BT + o_t
        valid = rows < seq_len
        G, _ = _gates(g_base, rows, H, valid, DOT_PREC)
        bb = tl.load(b_base + rows * H, mask=valid, other=0.0).to(tl.float32)
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, o_k < KD)
            kk = tl.dot(bk, tl.trans(bk), kk, input_precision=DOT_PREC)
        A = bb[:, None] * kk * _pair_decay(G, o_t, True)
        Ti = tl.zeros([BT, BT], dtype=tl.float32)
        for i in range(0, BT):
            # rows of Ti from i on are still zero, so the sum over all j is the sum over j < i
            a_i = tl.sum(tl.where(o_t[:, None] == i, A, 0.0), 0)
            t_i = tl.where(o_t == i, 1.0, 0.0) - tl.sum(a_i[:, None] * Ti, 0)
            Ti = tl.where(o_t[:, None] == i, t_i[None, :], Ti)
        # the right-hand sides' row factors, folded into the inverse's columns
        Tu = Ti * bb[None, :]
        Tw = Tu * tl.exp(G.to(tl.float32))[None, :]
        for i_v in range(0, tl.cdiv(VD, BV)):
            o_e = i_v * BV + tl.arange(0, BV)
            m_e = o_e < VD
            bv = load_tile(v_base, rows, HKV * VD, o_e, valid, m_e).to(tl.float32)
            store_tile(u_base, rows, H * VD, o_e, valid, m_e, tl.dot(Tu, bv, input_precision=DOT_PREC))
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
            store_tile(w_base, rows, H * KD, o_k, valid, m_k, tl.dot(Tw, bk, input_precision=DOT_PREC))


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gdn_fwd_kernel(
    q, k, g, u, w, h0, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BV: tl.constexpr,
):
    """o (and S_T into ht) from q, k, g and the prep launch's u, w; grid (cdiv(E, BV), N·H). BK is D
    padded to a power of two; SHAPE_BUCKET only steers autotuning. Per chunk, with S [BK, BV] the
    state slice entering it: ν = u − w S, o = scale·[(e^G ⊙ q) S + ((q kᵀ) ⊙ M) ν],
    S ← e^{G_last} S + (e^{G_last − G} ⊙ k)ᵀ ν. Rows past the end load zeros (g = 0, so G stays
    at G_last), which add nothing to ν's products or to S."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    o_v = tl.program_id(0) * BV + tl.arange(0, BV)
    m_k = o_k < KD
    m_v = o_v < VD
    s_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD) + o_k[:, None] * VD + o_v[None, :]
    m_s = m_k[:, None] & m_v[None, :]
    q_base = q + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    g_base = g + bos * H + i_h
    u_base = u + bos * (H * VD) + i_h * VD
    w_base = w + bos * (H * KD) + i_h * KD
    o_base = o + bos * (H * VD) + i_h * VD
    dt = q.dtype.element_ty  # the products' operand dtype: the inputs' (fp32 inputs: IEEE dots)
    if HAS_H0:
        S = tl.load(h0 + s_off, mask=m_s, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    for i_c in range(0, tl.cdiv(seq_len, BT)):
        rows = i_c * BT + o_t
        valid = rows < seq_len
        G, G_last = _gates(g_base, rows, H, valid, DOT_PREC)
        bq = load_tile(q_base, rows, H * KD, o_k, valid, m_k)
        bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k)
        bw = load_tile(w_base, rows, H * KD, o_k, valid, m_k)
        bu = load_tile(u_base, rows, H * VD, o_v, valid, m_v)
        Sd = S.to(dt)
        nu = bu - tl.dot(bw.to(dt), Sd, input_precision=DOT_PREC)
        scores = tl.dot(bq, tl.trans(bk), input_precision=DOT_PREC) * _pair_decay(G, o_t, False)
        # e^G scales the rows of q S, not q: a 16-bit q ⊙ e^G would underflow at strong gates
        acc = tl.dot(bq, Sd, input_precision=DOT_PREC) * tl.exp(G.to(tl.float32))[:, None]
        acc = tl.dot(scores.to(dt), nu.to(dt), acc, input_precision=DOT_PREC)
        store_tile(o_base, rows, H * VD, o_v, valid, m_v, acc * scale)
        # (e^{G_last − G} ⊙ k)ᵀ ν as kᵀ (e^{G_last − G} ⊙ ν): the decay on the narrow operand
        nud = nu * tl.exp((G_last - G).to(tl.float32))[:, None]
        S = tl.dot(tl.trans(bk), nud.to(dt), S * tl.exp(G_last.to(tl.float32)), input_precision=DOT_PREC)
    if STORE_HT:
        tl.store(ht + s_off, S, mask=m_s)


# The autotuned sweep on a GPU; under the interpreter autotune cannot run ("0 active drivers"), so
# the launcher runs the plain kernel with the interpreter's fixed config. The parallel launch takes
# one fixed config (configs.prep_meta).
_KEY = ["KD", "VD", "SHAPE_BUCKET"]
if INTERPRET:
    gdn_fwd = None
else:
    gdn_fwd = triton.autotune(configs=autotune_configs(FWD_CONFIGS), key=_KEY,
                              prune_configs_by={"early_config_prune": prune_configs})(gdn_fwd_kernel)
