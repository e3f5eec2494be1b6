"""Triton kernels of the gated delta rule (GDN), chunked in the WY / UT-transform form: the forward
(the backward's: ``backward.py``).

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
                    (I + A)⁻¹ by blockwise forward substitution, u [B, T, H, E] (fp32) and
                    w [B, T, H, D] (the input dtype)
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

from ...common.tiles import chunk_slot, load_tile, sequence_of, store_tile
from .configs import FWD_CONFIGS, INTERPRET, autotune_configs, prune_configs


@triton.jit
def _program_row(cu, T, H, HKV, IS_VARLEN: tl.constexpr):
    """(sequence, query head, kv head, first row, length) of a program of row program_id(1) = n·H + h."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    return i_n, i_h, i_h // (H // HKV), bos, seq_len


@triton.jit
def _kv_bases(k, v, bos, i_hk, HKV, KD: tl.constexpr, VD: tl.constexpr):
    """Pointers of a sequence's first k and v rows of kv head i_hk."""
    return k + bos * (HKV * KD) + i_hk * KD, v + bos * (HKV * VD) + i_hk * VD


@triton.jit
def _value_slice(cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                 IS_VARLEN: tl.constexpr):
    """Where a program of a sweep over value slices (grid (cdiv(E, BV), N·H)) works: its row
    (``_program_row``), its BK key lanes and BV value columns with their masks, its [BK, BV] slice's
    offset in one [H, D, E] state (head_off) and in an [N, H, D, E] one (s_off), and that slice's mask."""
    i_n, i_h, i_hk, bos, seq_len = _program_row(cu, T, H, HKV, IS_VARLEN)
    o_k = tl.arange(0, BK)
    o_v = tl.program_id(0) * BV + tl.arange(0, BV)
    m_k = o_k < KD
    m_v = o_v < VD
    head_off = i_h * (KD * VD) + o_k[:, None] * VD + o_v[None, :]
    s_off = i_n.to(tl.int64) * (H * KD * VD) + head_off
    return i_n, i_h, i_hk, bos, seq_len, o_k, o_v, m_k, m_v, head_off, s_off, m_k[:, None] & m_v[None, :]


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
def _block_gates(g_base, rows, H, valid, DOT_PREC: tl.constexpr):
    """One row block's gates [BC] (zero past the end), fp64 for fp32 inputs (as ``_gates``)."""
    g = tl.load(g_base + rows * H, mask=valid, other=0.0).to(tl.float32)
    if DOT_PREC == "ieee":
        g = g.to(tl.float64)
    return g


@triton.jit
def _gram(a_base, a_stride, rows_a, valid_a, b_base, b_stride, rows_b, valid_b, KD: tl.constexpr, BD: tl.constexpr,
          M: tl.constexpr, N: tl.constexpr, DOT_PREC: tl.constexpr):
    """[M, N] fp32: the rows of one [.., D] tensor times those of another, Σ over D in slices of BD."""
    acc = tl.zeros([M, N], dtype=tl.float32)
    for i_d in range(0, tl.cdiv(KD, BD)):
        o_k = i_d * BD + tl.arange(0, BD)
        m_k = o_k < KD
        acc = tl.dot(load_tile(a_base, rows_a, a_stride, o_k, valid_a, m_k),
                     tl.trans(load_tile(b_base, rows_b, b_stride, o_k, valid_b, m_k)), acc, input_precision=DOT_PREC)
    return acc


@triton.jit
def _block_a(k_base, rows_i, valid_i, rows_j, valid_j, b_i, G_i, G_j, HKV, KD: tl.constexpr, BD: tl.constexpr,
             BC: tl.constexpr, DIAG: tl.constexpr, DOT_PREC: tl.constexpr):
    """A's block [BC, BC] of row blocks I ≥ J: β_i (k_i·k_j) e^{G_i − G_j} for j before i, k_I k_Jᵀ
    summed over D in slices of BD. Off the diagonal every row of J is before every row of I
    (G_i ≤ G_j); on it the exponent is −inf on and above the diagonal before the exponential."""
    kk = _gram(k_base, HKV * KD, rows_i, valid_i, k_base, HKV * KD, rows_j, valid_j, KD, BD, BC, BC, DOT_PREC)
    x = G_i[:, None] - G_j[None, :]
    if DIAG:
        o = tl.arange(0, BC)
        x = tl.where(o[:, None] > o[None, :], x, -float("inf"))
    return b_i[:, None] * kk * tl.exp(x.to(tl.float32))


@triton.jit
def _unit_lower_inverse(A, BC: tl.constexpr):
    """(I + A)⁻¹ of a strictly lower block A [BC, BC], forward substitution row by row in fp32:
    T_i = e_i − Σ_{j<i} A_ij T_j (rows of T from i on are still zero, so the sum may run over all j)."""
    o = tl.arange(0, BC)
    T = tl.zeros([BC, BC], dtype=tl.float32)
    for i in range(0, BC):
        a_i = tl.sum(tl.where(o[:, None] == i, A, 0.0), 0)
        t_i = tl.where(o == i, 1.0, 0.0) - tl.sum(a_i[:, None] * T, 0)
        T = tl.where(o[:, None] == i, t_i[None, :], T)
    return T


@triton.jit
def _mm(a, b):
    """A product of two blocks of A or of the inverse, in full fp32: their rounding would reach
    every row of u and w."""
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _rhs(base, stride, rows, valid, lanes, m, s):
    """A right-hand-side block s ⊙ X [BC, lanes] in fp32."""
    return load_tile(base, rows, stride, lanes, valid, m).to(tl.float32) * s[:, None]


@triton.jit
def _apply_inverse(T00, T10, T11, T20, T21, T22, T30, T31, T32, T33, src, src_stride, s0, s1, s2, s3,
                   out, out_stride, r0, r1, r2, r3, v0, v1, v2, v3, DIM: tl.constexpr, BS: tl.constexpr,
                   DOT_PREC: tl.constexpr):
    """(I + A)⁻¹·(s ⊙ X) by block rows, Σ_{J≤I} T_IJ (s_J ⊙ X_J), X [rows, DIM] read from ``src``
    and the result written to ``out``, in column slices of BS."""
    for i_s in range(0, tl.cdiv(DIM, BS)):
        lanes = i_s * BS + tl.arange(0, BS)
        m = lanes < DIM
        x0 = _rhs(src, src_stride, r0, v0, lanes, m, s0)
        x1 = _rhs(src, src_stride, r1, v1, lanes, m, s1)
        x2 = _rhs(src, src_stride, r2, v2, lanes, m, s2)
        x3 = _rhs(src, src_stride, r3, v3, lanes, m, s3)
        store_tile(out, r0, out_stride, lanes, v0, m, tl.dot(T00, x0, input_precision=DOT_PREC))
        y = tl.dot(T10, x0, input_precision=DOT_PREC)
        store_tile(out, r1, out_stride, lanes, v1, m, tl.dot(T11, x1, y, input_precision=DOT_PREC))
        y = tl.dot(T21, x1, tl.dot(T20, x0, input_precision=DOT_PREC), input_precision=DOT_PREC)
        store_tile(out, r2, out_stride, lanes, v2, m, tl.dot(T22, x2, y, input_precision=DOT_PREC))
        y = tl.dot(T31, x1, tl.dot(T30, x0, input_precision=DOT_PREC), input_precision=DOT_PREC)
        y = tl.dot(T32, x2, y, input_precision=DOT_PREC)
        store_tile(out, r3, out_stride, lanes, v3, m, tl.dot(T33, x3, y, input_precision=DOT_PREC))


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
    (P, N·H): program (j, row) takes the row's chunks j, j + P, …

    The chunk splits into four row blocks of BC = BT / 4. The inverse is blockwise forward
    substitution: each diagonal block's inverse T_II row by row in fp32 registers (BC dependent
    steps, not BT), then T_IJ = −T_II Σ_{J≤K<I} A_IK T_KJ by fp32 block products. Rows past the end
    have β = 0 (A's rows and columns zero there), so they solve to identity rows and write nothing."""
    BC: tl.constexpr = BT // 4
    i_n, i_h, i_hk, bos, seq_len = _program_row(cu, T, H, HKV, IS_VARLEN)
    o_c = tl.arange(0, BC)
    k_base, v_base = _kv_bases(k, v, bos, i_hk, HKV, KD, VD)
    g_base = g + bos * H + i_h
    b_base = beta + bos * H + i_h
    u_base = u + bos * (H * VD) + i_h * VD
    w_base = w + bos * (H * KD) + i_h * KD
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        r0 = i_c * BT + o_c
        r1 = r0 + BC
        r2 = r1 + BC
        r3 = r2 + BC
        v0, v1, v2, v3 = r0 < seq_len, r1 < seq_len, r2 < seq_len, r3 < seq_len
        g0 = _block_gates(g_base, r0, H, v0, DOT_PREC)
        g1 = _block_gates(g_base, r1, H, v1, DOT_PREC)
        g2 = _block_gates(g_base, r2, H, v2, DOT_PREC)
        g3 = _block_gates(g_base, r3, H, v3, DOT_PREC)
        G0 = tl.cumsum(g0, 0)
        G1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
        G2 = tl.cumsum(g2, 0) + (tl.sum(g0, 0) + tl.sum(g1, 0))
        G3 = tl.cumsum(g3, 0) + (tl.sum(g0, 0) + tl.sum(g1, 0) + tl.sum(g2, 0))
        b0 = tl.load(b_base + r0 * H, mask=v0, other=0.0).to(tl.float32)
        b1 = tl.load(b_base + r1 * H, mask=v1, other=0.0).to(tl.float32)
        b2 = tl.load(b_base + r2 * H, mask=v2, other=0.0).to(tl.float32)
        b3 = tl.load(b_base + r3 * H, mask=v3, other=0.0).to(tl.float32)
        T00 = _unit_lower_inverse(_block_a(k_base, r0, v0, r0, v0, b0, G0, G0, HKV, KD, BD, BC, True, DOT_PREC), BC)
        T11 = _unit_lower_inverse(_block_a(k_base, r1, v1, r1, v1, b1, G1, G1, HKV, KD, BD, BC, True, DOT_PREC), BC)
        T22 = _unit_lower_inverse(_block_a(k_base, r2, v2, r2, v2, b2, G2, G2, HKV, KD, BD, BC, True, DOT_PREC), BC)
        T33 = _unit_lower_inverse(_block_a(k_base, r3, v3, r3, v3, b3, G3, G3, HKV, KD, BD, BC, True, DOT_PREC), BC)
        A10 = _block_a(k_base, r1, v1, r0, v0, b1, G1, G0, HKV, KD, BD, BC, False, DOT_PREC)
        A21 = _block_a(k_base, r2, v2, r1, v1, b2, G2, G1, HKV, KD, BD, BC, False, DOT_PREC)
        A32 = _block_a(k_base, r3, v3, r2, v2, b3, G3, G2, HKV, KD, BD, BC, False, DOT_PREC)
        T10 = -_mm(T11, _mm(A10, T00))
        T21 = -_mm(T22, _mm(A21, T11))
        T32 = -_mm(T33, _mm(A32, T22))
        A20 = _block_a(k_base, r2, v2, r0, v0, b2, G2, G0, HKV, KD, BD, BC, False, DOT_PREC)
        T20 = -_mm(T22, _mm(A20, T00) + _mm(A21, T10))
        A31 = _block_a(k_base, r3, v3, r1, v1, b3, G3, G1, HKV, KD, BD, BC, False, DOT_PREC)
        T31 = -_mm(T33, _mm(A31, T11) + _mm(A32, T21))
        A30 = _block_a(k_base, r3, v3, r0, v0, b3, G3, G0, HKV, KD, BD, BC, False, DOT_PREC)
        T30 = -_mm(T33, _mm(A30, T00) + _mm(A31, T10) + _mm(A32, T20))
        _apply_inverse(T00, T10, T11, T20, T21, T22, T30, T31, T32, T33, v_base, HKV * VD, b0, b1, b2, b3,
                       u_base, H * VD, r0, r1, r2, r3, v0, v1, v2, v3, VD, BV, DOT_PREC)
        _apply_inverse(T00, T10, T11, T20, T21, T22, T30, T31, T32, T33, k_base, HKV * KD,
                       b0 * tl.exp(G0.to(tl.float32)), b1 * tl.exp(G1.to(tl.float32)),
                       b2 * tl.exp(G2.to(tl.float32)), b3 * tl.exp(G3.to(tl.float32)),
                       w_base, H * KD, r0, r1, r2, r3, v0, v1, v2, v3, KD, BD, DOT_PREC)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gdn_fwd_kernel(
    q, k, g, u, w, h0, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht, hc,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, STORE_HC: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
):
    """o (and S_T into ht) from q, k, g and the prep launch's u, w; grid (cdiv(E, BV), N·H). BK is D
    padded to a power of two; SHAPE_BUCKET only steers autotuning. Per chunk, with S [BK, BV] the
    state slice entering it: ν = u − w S, o = scale·[(e^G ⊙ q) S + ((q kᵀ) ⊙ M) ν],
    S ← e^{G_last} S + (e^{G_last − G} ⊙ k)ᵀ ν. Rows past the end load zeros (g = 0, so G stays
    at G_last), which add nothing to ν's products or to S. With STORE_HC the state entering each
    chunk goes to hc [slots, H, D, E] (fp32, ``chunk_slot``), for the backward."""
    i_n, i_h, i_hk, bos, seq_len, o_k, o_v, m_k, m_v, head_off, s_off, m_s = _value_slice(
        cu, T, H, HKV, KD, VD, BK, BV, IS_VARLEN)
    o_t = tl.arange(0, BT)
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
        if STORE_HC:
            tl.store(hc + chunk_slot(bos, i_n, i_c, BT) * (H * KD * VD) + head_off, S, mask=m_s)
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
