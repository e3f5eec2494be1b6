"""Triton kernels of Gated Linear Attention (chunked, fused: the state never leaves the chip).

Recurrence per (sequence, query head), fp32 state ``S ∈ R^{D×E}``:
``S_t = diag(exp(g_t))·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``, g ≤ 0 per key channel.

Inside a chunk of BT tokens, with ``B`` the inclusive cumulative sum of g in processing order
(relative to the chunk start, so ``B ≤ 0`` and falling) and ``Bl`` the chunk's total:
  o_t    = scale·[(q_t⊙e^{B_t})ᵀ S_in + Σ_{s≤t} A_ts v_s],  A_ts = Σ_d q_td k_sd e^{B_td − B_sd}
  S_out  = diag(e^{Bl})·S_in + Σ_s (k_s⊙e^{Bl − B_s}) v_sᵀ
Every factor is e^{x} with x ≤ 0 at any gate: the carried-state factors by construction, and the
intra-chunk pairs through sub-chunks of BC rows. A pair in two sub-chunks factorises at the
boundary R between them, e^{B_t − B_s} = e^{B_t − R}·e^{R − B_s} (both ≤ 1, tensor-core products);
a pair in one sub-chunk takes its exponent whole, b_t − b_s with b the cumulative gate from the
sub-chunk start, one key row at a time, in launches of their own on [BC, BD] tiles. No exponent
is positive, so nothing overflows and no launch depends on the gate values.

Eight kernels, one launch each; the four parallel ones (no carried state, programs over chunks or
sub-chunks) compute everything gate-dependent inside a chunk, the four sweeps carry the state:
  gla_prep_kernel         forward: qd = q⊙e^B, kd = k⊙e^{Bl − B}, the totals Bl and the scores A
                          of the pairs across sub-chunks
  gla_diag_scores_kernel  forward: A's diagonal [BC, BC] blocks (pairs inside one sub-chunk)
  gla_fwd_kernel          o (and S_T); programs own an E-slice, state Sᵀ [BS, D]
  gla_bwd_diag_kernel     backward: dq, dk of the strict pairs inside one sub-chunk, fp32 partials
  gla_bwd_intra_kernel    backward: each chunk's own part of dq, dk (W = scale·do·vᵀ weighted), the
                          diagonal launch's partials added, and of dg (pairs inside the chunk)
  gla_bwd_q_kernel        dq and dg's pairs from the chunk's entry state, forward sweep over
                          D-slices rebuilding S [BS, E]; also the entry states (hc) for the next pass
  gla_bwd_k_kernel        dk, dg and dh0, backward sweep over D-slices, state dS [BS, E]
  gla_bwd_v_kernel        dv, backward sweep; programs own an E-slice, state dSᵀ [BS, D]

Tensors are contiguous ``[B, T, heads, dim]`` (q, g, do, o, dq, dg with H heads; k, v with HKV);
kernels take inputs, then scalars, then outputs (jax-triton appends outputs last), so the same
kernels launch from torch and from jax-triton. Absent optional tensors are any placeholder
pointer; constexpr flags keep them untouched.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .configs import (BWD_K_CONFIGS, BWD_Q_CONFIGS, BWD_V_CONFIGS, FWD_CONFIGS, INTERPRET, autotune_configs,
                      prune_configs)


@triton.jit
def _sequence(cu_ptr, i_nh, T, H, IS_VARLEN: tl.constexpr):
    """(sequence, query head, first row, length) of the program row i_nh = n·H + h."""
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int64)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    else:
        bos = i_n.to(tl.int64) * T
        eos = bos + T
    return i_n, i_h, bos, (eos - bos).to(tl.int32)


@triton.jit
def _offset(pos, BT: tl.constexpr, BACK: tl.constexpr):
    """Offset inside a chunk (ascending addresses) of processing position pos."""
    if BACK:
        return BT - 1 - pos
    else:
        return pos


@triton.jit
def _order(BT: tl.constexpr, BACK: tl.constexpr):
    """Row offsets of a chunk (ascending addresses) and each row's position p in processing order."""
    o_t = tl.arange(0, BT)
    return o_t, _offset(o_t, BT, BACK)


@triton.jit
def _chunk_start(seq_len, i_c, BT: tl.constexpr, BACK: tl.constexpr):
    """First row (lowest address) of the chunk at processing index i_c; walking backwards (BACK) a
    last, partial chunk starts below row 0."""
    if BACK:
        return seq_len - i_c * BT - BT
    else:
        return i_c * BT


@triton.jit
def _chunk_rows(seq_len, i_c, o_t, p, BT: tl.constexpr, BACK: tl.constexpr):
    """Rows (ascending addresses) of the chunk at processing index i_c, and which are valid."""
    return _chunk_start(seq_len, i_c, BT, BACK) + o_t, p < seq_len - i_c * BT


@triton.jit
def _load(base, rows, row_stride, lanes, valid, m_lanes):
    """A [rows, lanes] tile, zero outside the valid rows and lanes."""
    return tl.load(base + rows[:, None] * row_stride + lanes[None, :], mask=valid[:, None] & m_lanes[None, :],
                   other=0.0)


@triton.jit
def _store(base, rows, row_stride, lanes, valid, m_lanes, x):
    tl.store(base + rows[:, None] * row_stride + lanes[None, :], x.to(base.dtype.element_ty),
             mask=valid[:, None] & m_lanes[None, :])


@triton.jit
def _load_t(base, rows, row_stride, lanes, valid, m_lanes):
    """A [lanes, rows] tile (a chunk transposed), zero outside the valid rows and lanes."""
    return tl.load(base + rows[None, :] * row_stride + lanes[:, None], mask=valid[None, :] & m_lanes[:, None],
                   other=0.0)


@triton.jit
def _store_t(base, rows, row_stride, lanes, valid, m_lanes, x):
    tl.store(base + rows[None, :] * row_stride + lanes[:, None], x.to(base.dtype.element_ty),
             mask=valid[None, :] & m_lanes[:, None])


@triton.jit
def _state_tile(ptr, s_off, m_s, PRESENT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A program's fp32 state tile from ``ptr`` (an initial state or a final-state cotangent), or
    zeros when there is none."""
    if PRESENT:
        return tl.load(ptr + s_off, mask=m_s, other=0.0).to(tl.float32)
    else:
        return tl.zeros([ROWS, COLS], dtype=tl.float32)


@triton.jit
def _slot(bos, i_n, i_c, BT: tl.constexpr):
    """Slot of chunk i_c of sequence i_n (first row bos) in a per-chunk buffer: bos // BT + i_n + i_c.
    A sequence of L rows uses cdiv(L, BT) ≤ (bos + L) // BT + 1 − bos // BT slots, so the
    sequences' slots never overlap and all fit in (total rows) // BT + N."""
    return (bos // BT + i_n + i_c).to(tl.int64)


@triton.jit
def _entry_state(hc, bos, i_n, i_c, i_h, H, KD: tl.constexpr, VD: tl.constexpr, o_k, o_e, BT: tl.constexpr):
    """Pointers of a program's [BS, E] tile of the state entering chunk i_c in hc [slots, H, D, E]."""
    return hc + (_slot(bos, i_n, i_c, BT) * H + i_h) * (KD * VD) + o_k[:, None] * VD + o_e[None, :]


@triton.jit
def _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD: tl.constexpr, o_k, m_k, BT: tl.constexpr):
    """Bl [channels] of chunk i_c from bl [slots, H, D], the totals ``gla_prep_kernel`` wrote."""
    return tl.load(bl + (_slot(bos, i_n, i_c, BT) * H + i_h) * KD + o_k, mask=m_k, other=0.0)


@triton.jit
def _tri_product(x, tri, DOT_PREC: tl.constexpr, LEFT: tl.constexpr):
    """tri·x (LEFT) or x·tri for a 0/1 matrix tri and fp32 x, to fp32 accuracy: sums over a
    chunk's rows as tensor-core products. tri is exact in tf32; x splits into its tf32 head and
    the fp32 remainder, so only the fp32 accumulation rounds. IEEE dots (fp32 inputs) need no split."""
    if DOT_PREC == "ieee":
        if LEFT:
            return tl.dot(tri, x, input_precision="ieee")
        else:
            return tl.dot(x, tri, input_precision="ieee")
    else:
        hi = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
        if LEFT:
            return tl.dot(tri, x - hi, tl.dot(tri, hi, input_precision="tf32"), input_precision="tf32")
        else:
            return tl.dot(x - hi, tri, tl.dot(hi, tri, input_precision="tf32"), input_precision="tf32")


# --- the parallel launches: each chunk's own gate-dependent products, exact at any gate ---------


@triton.jit
def _boundary(g, p, i, BC: tl.constexpr, BACK: tl.constexpr):
    """(e^{B_t − R} on the rows t from sub-chunk i on, e^{R − B_s} on the rows s before it, 0
    elsewhere) for R the cumulative gate at the boundary before sub-chunk i. Each exponent is the
    sum of the gates it crosses (a prefix sum after the boundary, an exclusive suffix sum before
    it), never a difference of two cumulative gates: at strong gates those are large and their
    difference would lose fp32 digits. Every exponent kept is ≤ 0; the others are −inf before the
    exponential, so no large positive exponent is ever formed."""
    before = (p < i * BC)[:, None]
    after = tl.cumsum(tl.where(before, 0.0, g), 0, reverse=BACK)
    gb = tl.where(before, g, 0.0)
    upto = tl.cumsum(gb, 0, reverse=not BACK) - gb
    return tl.exp(tl.where(before, float("-inf"), after)), tl.exp(tl.where(before, upto, float("-inf")))


@triton.jit
def _to_end(g, BACK: tl.constexpr):
    """Bl − B, each row's gates to the chunk's end, as an exclusive suffix sum (see ``_boundary``)."""
    return tl.cumsum(g, 0, reverse=not BACK) - g


@triton.jit
def _cross_scores(bq, bk, g, p, DOT_PREC: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BACK: tl.constexpr):
    """A's pairs in two sub-chunks: for each sub-chunk i, (q⊙e^{B − R_i})_i·((k⊙e^{R_i − B})_{<i})ᵀ."""
    A = tl.zeros([BT, BT], dtype=tl.float32)
    for i in range(1, BT // BC):
        e_after, e_before = _boundary(g, p, i, BC, BACK)
        qa = tl.where((p // BC == i)[:, None], bq * e_after, 0.0)
        A = tl.dot(qa, tl.trans(bk * e_before), A, input_precision=DOT_PREC)
    return A


@triton.jit
def gla_prep_kernel(
    q, k, g, cu,
    T, H, HKV,
    qd, kd, bl, A,
    KD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr,
):
    """Everything of a chunk the forward and the dv pass need that carries nothing from chunk to
    chunk: qd = q⊙e^B, kd = k⊙e^{Bl − B} [B, T, H, D] (per query head), the totals Bl into
    bl [slots, H, D] (``_slot``) and the intra-chunk scores A [B, T, H, BT] (row t, column the
    offset of s in its chunk; zero unless s ≤ t) of the pairs across sub-chunks of BC rows, exact at
    any gate; A's diagonal [BC, BC] blocks are left to ``gla_diag_scores_kernel``. Grid (P, N·H):
    program (j, row) takes the row's chunks j, j + P, …, each over D in slices of BD."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t, p = _order(BT, REVERSE)
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    a_base = A + bos * (H * BT) + i_h * BT
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        start = _chunk_start(seq_len, i_c, BT, REVERSE)
        n_left = seq_len - i_c * BT
        rows, valid = start + o_t, p < n_left
        scores = tl.zeros([BT, BT], dtype=tl.float32)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bg = _load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)  # invalid rows: g = 0
            bq = _load(q_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
            bk = _load(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
            B = tl.cumsum(bg, 0, reverse=REVERSE)
            Bl = tl.sum(bg, 0)
            _store(qd_base, rows, H * KD, o_k, valid, m_k, bq * tl.exp(B))
            _store(kd_base, rows, H * KD, o_k, valid, m_k, bk * tl.exp(_to_end(bg, REVERSE)))
            tl.store(bl + (_slot(bos, i_n, i_c, BT) * H + i_h) * KD + o_k, Bl, mask=m_k)
            scores += _cross_scores(bq, bk, bg, p, DOT_PREC, BT, BC, REVERSE)
        # the diagonal blocks (pairs inside one sub-chunk) are gla_diag_scores_kernel's
        off_diag = (p[None, :] // BC) != (p[:, None] // BC)
        tl.store(a_base + rows[:, None] * (H * BT) + o_t[None, :], scores.to(A.dtype.element_ty),
                 mask=valid[:, None] & off_diag)


@triton.jit
def _sub_chunk(seq_len, i_g, BT: tl.constexpr, BC: tl.constexpr, BACK: tl.constexpr):
    """Sub-chunk i_g of a sequence (BT // BC per chunk, in processing order): its chunk's first row,
    the processing position of its first row in the chunk, the rows left from the chunk on, and its
    BC rows in processing order with which are valid."""
    i_c = i_g // (BT // BC)
    start = _chunk_start(seq_len, i_c, BT, BACK)
    first = (i_g % (BT // BC)) * BC
    pos = first + tl.arange(0, BC)
    n_left = seq_len - i_c * BT
    return start, first, n_left, start + _offset(pos, BT, BACK), pos < n_left


@triton.jit
def _row(base, row, stride, lanes, mask):
    """One row [lanes] in fp32, 0 where masked."""
    return tl.load(base + row * stride + lanes, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def gla_diag_scores_kernel(
    q, k, g, cu, A_in,
    T, H, HKV,
    A,
    KD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr,
):
    """The diagonal blocks of the scores A (pairs inside one sub-chunk of BC rows), after
    ``gla_prep_kernel`` wrote the rest: A[t, s] = Σ_d q_td k_sd e^{b_td − b_sd} for s at or before t
    in t's sub-chunk, b the cumulative gate from the sub-chunk start, into the columns of the
    sub-chunk's own rows. One key row and its gate row at a time ([BD] vectors) against the
    sub-chunk's [BC, BD] tiles; every exponent is ≤ 0, the others −inf. A_in is A itself (jax-triton
    aliases it to the output), never read. Grid (P, N·H): program (j, row) takes the row's
    sub-chunks j, j + P, …"""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    a_base = A + bos * (H * BT) + i_h * BT
    o_j = tl.arange(0, BC)
    for i_g in range(tl.program_id(0), tl.cdiv(seq_len, BC), tl.num_programs(0)):
        start, first, n_left, rows, valid = _sub_chunk(seq_len, i_g, BT, BC, REVERSE)
        scores = tl.zeros([BC, BC], dtype=tl.float32)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bq = _load(q_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
            b = tl.cumsum(_load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32), 0)  # rows in processing order
            bj = tl.zeros([BD], dtype=tl.float32)
            for j in range(0, BC):
                row_j = start + _offset(first + j, BT, REVERSE)
                m_j = o_k < tl.where(first + j < n_left, KD, 0)  # key channels of row j, none past the end
                bj += _row(g_base, row_j, H * KD, o_k, m_j)
                kj = _row(k_base, row_j, HKV * KD, o_k, m_j)
                e = tl.exp(tl.where((o_j >= j)[:, None], b - bj[None, :], float("-inf")))
                col = tl.sum(bq * kj[None, :] * e, 1)
                scores += tl.where(o_j[None, :] == j, col[:, None], 0.0)
        # column of key j: its offset in the chunk; keys past the end score 0 in every valid row
        cols = _offset(first + o_j, BT, REVERSE)
        tl.store(a_base + rows[:, None] * (H * BT) + cols[None, :], scores.to(A.dtype.element_ty), mask=valid[:, None])


@triton.jit
def _cross_grads(W, bq, bk, g, p, DOT_PREC: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                 BD: tl.constexpr, BACK: tl.constexpr):
    """(dq, dk) of the pairs in two sub-chunks, W [t, s] the pairs' weights (zero unless s ≤ t):
    dq_t = e^{B_t − R_i}⊙Σ_s W_ts k_s e^{R_i − B_s} for t in sub-chunk i and s before it; dk_s the
    same from the rows after the boundary that follows s's sub-chunk."""
    dq = tl.zeros([BT, BD], dtype=tl.float32)
    dk = tl.zeros([BT, BD], dtype=tl.float32)
    for i in range(1, BT // BC):
        e_after, e_before = _boundary(g, p, i, BC, BACK)
        sub = p // BC
        dq += tl.where((sub == i)[:, None], e_after, 0.0) * tl.dot(W, bk * e_before, input_precision=DOT_PREC)
        dk += tl.where((sub == i - 1)[:, None], e_before, 0.0) * tl.dot(tl.trans(W), bq * e_after,
                                                                      input_precision=DOT_PREC)
    return dq, dk


@triton.jit
def gla_bwd_diag_kernel(
    q, k, v, g, do, cu,
    T, H, HKV, scale,
    dqd, dkd,
    KD: tl.constexpr, VD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """The backward's strict pairs inside one sub-chunk (s before t, both in it), fp32 into dqd and
    dkd [B, T, H, D] (per query head): with W = scale·do·vᵀ,
      dqd_t = Σ_s W_ts k_s⊙e^{b_t − b_s},  dkd_s = Σ_t W_ts q_t⊙e^{b_t − b_s},
    b the cumulative gate from the sub-chunk start (every exponent ≤ 0). The diagonal pairs s = t
    are left to ``gla_bwd_intra_kernel``, which adds these partials to its pairs across sub-chunks
    before dg's in-chunk sum. Grid as ``gla_diag_scores_kernel``; W's diagonal block is one
    [BC, BC] product over E, then one key / query row at a time as in the forward."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    dqd_base = dqd + bos * (H * KD) + i_h * KD
    dkd_base = dkd + bos * (H * KD) + i_h * KD
    o_j = tl.arange(0, BC)
    for i_g in range(tl.program_id(0), tl.cdiv(seq_len, BC), tl.num_programs(0)):
        start, first, n_left, rows, valid = _sub_chunk(seq_len, i_g, BT, BC, REVERSE)
        W = tl.zeros([BC, BC], dtype=tl.float32)
        for i_v in range(0, tl.cdiv(VD, BV)):
            o_e = i_v * BV + tl.arange(0, BV)
            m_e = o_e < VD
            bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
            bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
            W = tl.dot(bdo, tl.trans(bv), W, input_precision=DOT_PREC)
        W = tl.where(o_j[None, :] < o_j[:, None], W * scale, 0.0)  # tile rows in processing order
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            b = tl.cumsum(_load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32), 0)
            bj = tl.zeros([BD], dtype=tl.float32)
            dq = tl.zeros([BC, BD], dtype=tl.float32)
            dk = tl.zeros([BC, BD], dtype=tl.float32)
            for j in range(0, BC):
                row_j = start + _offset(first + j, BT, REVERSE)
                m_j = o_k < tl.where(first + j < n_left, KD, 0)  # key channels of row j, none past the end
                bj += _row(g_base, row_j, H * KD, o_k, m_j)
                kj = _row(k_base, row_j, HKV * KD, o_k, m_j)
                qj = _row(q_base, row_j, H * KD, o_k, m_j)
                w_tj = tl.sum(tl.where(o_j[None, :] == j, W, 0.0), 1)  # W[t, j]
                w_js = tl.sum(tl.where(o_j[:, None] == j, W, 0.0), 0)  # W[j, s]
                dq += w_tj[:, None] * kj[None, :] * tl.exp(tl.where((o_j > j)[:, None], b - bj[None, :], float("-inf")))
                dk += w_js[:, None] * qj[None, :] * tl.exp(tl.where((o_j < j)[:, None], bj[None, :] - b, float("-inf")))
            _store(dqd_base, rows, H * KD, o_k, valid, m_k, dq)
            _store(dkd_base, rows, H * KD, o_k, valid, m_k, dk)


@triton.jit
def gla_bwd_intra_kernel(
    q, k, v, g, do, cu, dqd, dkd,
    T, H, HKV, scale,
    dqi, dki, dga,
    KD: tl.constexpr, VD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """The backward's pairs inside a chunk, every chunk at once (grid (P, N·H) as the prep launch),
    exact at any gate through sub-chunks of BC rows. With W = scale·do·vᵀ (s ≤ t):
    dqi_t = Σ_{s≤t} W_ts k_s⊙e^{B_t − B_s}, dki_s = Σ_{t≥s} W_ts q_t⊙e^{B_t − B_s} (per query head),
    and dg's in-chunk part dga_t = Σ_{t'≥t, s<t} W_t's q_t'⊙k_s⊙e^{B_t' − B_s}, summed in fp32 as
    the suffix sum of q⊙dqi − k⊙dki over the strict pairs s < t only: the diagonal pairs, the
    largest terms at strong gates, cancel exactly there and are added to dqi, dki afterwards.
    The strict pairs inside one sub-chunk come from ``gla_bwd_diag_kernel`` in fp32 (dqd, dkd);
    this launch adds the pairs across sub-chunks. dkd may be dga itself: each element is read
    before the suffix sum that includes it is stored."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t, p = _order(BT, REVERSE)
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    row_off = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        start = _chunk_start(seq_len, i_c, BT, REVERSE)
        n_left = seq_len - i_c * BT
        rows, valid = start + o_t, p < n_left
        W = tl.zeros([BT, BT], dtype=tl.float32)
        for i_v in range(0, tl.cdiv(VD, BV)):
            o_e = i_v * BV + tl.arange(0, BV)
            m_e = o_e < VD
            bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
            bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
            W = tl.dot(bdo, tl.trans(bv), W, input_precision=DOT_PREC)
        W = tl.where(p[None, :] <= p[:, None], W * scale, 0.0)
        w_diag = tl.sum(tl.where(o_t[:, None] == o_t[None, :], W, 0.0), 1)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bg = _load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
            bq = _load(q_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
            bk = _load(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
            dq, dk = _cross_grads(W, bq, bk, bg, p, DOT_PREC, BT, BC, BD, REVERSE)
            dq += _load(dqd + row_off, rows, H * KD, o_k, valid, m_k)
            dk += _load(dkd + row_off, rows, H * KD, o_k, valid, m_k)
            _store(dga + row_off, rows, H * KD, o_k, valid, m_k, tl.cumsum(bq * dq - bk * dk, 0, reverse=not REVERSE))
            _store(dqi + row_off, rows, H * KD, o_k, valid, m_k, dq + w_diag[:, None] * bk)
            _store(dki + row_off, rows, H * KD, o_k, valid, m_k, dk + w_diag[:, None] * bq)


# --- the sweeps: what carries from chunk to chunk, every factor ≤ 1 -----------------------------


@triton.jit
def _e_slice(cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr,
             BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of an E-sliced pass (grid (cdiv(E, BS), N·H)) works: its sequence, query and
    kv head, first row and length, the chunk rows' order, its BK key lanes and BS value columns
    with their masks, and the offset and mask of its [BK, BS] state tile."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    o_t, p = _order(BT, REVERSE)
    o_k = tl.arange(0, BK)
    o_v = tl.program_id(0) * BS + tl.arange(0, BS)
    m_k = o_k < KD
    m_v = o_v < VD
    s_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD) + o_k[:, None] * VD + o_v[None, :]
    return i_n, i_h, i_h // (H // HKV), bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, s_off, m_k[:, None] & m_v[None, :]


@triton.jit
def _d_slice(cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, BS: tl.constexpr,
             BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of a D-sliced pass (grid (cdiv(D, BS), N·H)) works: as ``_e_slice`` with
    BS key channels and BV value columns, state tile [BS, BV]."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    o_t, p = _order(BT, REVERSE)
    o_k = tl.program_id(0) * BS + tl.arange(0, BS)
    o_e = tl.arange(0, BV)
    m_k = o_k < KD
    m_e = o_e < VD
    s_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD) + o_k[:, None] * VD + o_e[None, :]
    return i_n, i_h, i_h // (H // HKV), bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off, m_k[:, None] & m_e[None, :]


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_fwd_kernel(
    qd, kd, bl, A, v, h0, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """o (and S_T into ht) from the prep launch's qd, kd, bl, A and v [B, T, HKV, E]; grid
    (cdiv(E, BS), N·H). BK is D padded to a power of two; SPLIT (= E) and SHAPE_BUCKET only steer
    autotuning. The state is held transposed, Sᵀ [BS, BK], and the output chunk as oᵀ [BS, BT],
    so the value slice (all of E at BS = 128) is the M dimension of the products and the two
    warpgroups split it: oᵀ = scale·(Sᵀ·qdᵀ + vᵀ·Aᵀ), Sᵀ ← Sᵀ·diag(e^{Bl}) + vᵀ·kd."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, s_off,
     m_s) = _e_slice(cu, T, H, HKV, KD, VD, BK, BS, BT, REVERSE, IS_VARLEN)
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    a_base = A + bos * (H * BT) + i_h * BT
    v_base = v + bos * (HKV * VD) + i_hk * VD
    o_base = o + bos * (H * VD) + i_h * VD
    dt = v.dtype.element_ty
    St = tl.trans(_state_tile(h0, s_off, m_s, HAS_H0, BK, BS))
    for i_c in range(0, tl.cdiv(seq_len, BT)):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bqd = _load(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = _load(kd_base, rows, H * KD, o_k, valid, m_k)
        bv = _load(v_base, rows, HKV * VD, o_v, valid, m_v)
        At = _load_t(a_base, rows, H * BT, o_t, valid, o_t < BT)  # [s, t]
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        acc = tl.dot(St.to(dt), tl.trans(bqd.to(dt)), input_precision=DOT_PREC)
        acc = tl.dot(tl.trans(bv), At.to(dt), acc, input_precision=DOT_PREC) * scale
        _store(o_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc))
        St = tl.dot(tl.trans(bv), bkd.to(dt), St * tl.exp(Bl)[None, :], input_precision=DOT_PREC)
    if STORE_HT:
        tl.store(ht + tl.trans(s_off), St, mask=tl.trans(m_s))


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_q_kernel(
    q, kd, bl, v, g, do, h0, cu, dqi, dga,
    T, H, HKV, scale, SHAPE_BUCKET,
    dq, dgq, hc,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """dq for one D-slice of BS key channels, a forward sweep rebuilding S [BS, E] on the prep
    launch's kd and bl (S ← diag(e^{Bl})·S + kdᵀ·v); grid (cdiv(D, BS), N·H). Transposed,
    [channels, rows]: dq = scale·e^{B}⊙(S_in·doᵀ) + dqi, S_in the state entering the chunk. Also
    writes S_in into hc [(total rows) // BT + N, H, D, E] (input dtype) for the dk / dg pass, and
    dgq = dga + Σ_{t'≥t} (q⊙dq_x)_t' (dq_x the carried-state part of dq): dg's pairs from S_in to
    a row at or after t."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    row_off = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    dt = v.dtype.element_ty
    S = _state_tile(h0, s_off, m_s, HAS_H0, BS, BV)
    for i_c in range(0, tl.cdiv(seq_len, BT)):
        tl.store(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), S.to(hc.dtype.element_ty), mask=m_s)
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        gt = _load_t(g + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
        Bt = _tri_product(gt, (p[:, None] <= p[None, :]).to(tl.float32), DOT_PREC, False)
        dq_x = tl.dot(S.to(dt), tl.trans(bdo), input_precision=DOT_PREC) * tl.exp(Bt) * scale
        dqit = _load_t(dqi + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        _store_t(dq + row_off, rows, H * KD, o_k, valid, m_k, dq_x + dqit)
        qt = _load_t(q + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        after = tl.cumsum(qt * dq_x, 1, reverse=not REVERSE)
        _store_t(dgq + row_off, rows, H * KD, o_k, valid, m_k, after + _load_t(dga + row_off, rows, H * KD, o_k, valid,
                                                                                m_k))
        kdt = _load_t(kd + row_off, rows, H * KD, o_k, valid, m_k)
        bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        S = tl.dot(kdt.to(dt), bv, S * tl.exp(Bl)[:, None], input_precision=DOT_PREC)


@triton.jit
def _before(xt, p, DOT_PREC: tl.constexpr, BACK: tl.constexpr):
    """Σ_{s<t} x_s over a transposed chunk xᵀ [channels, rows]. With fp32 inputs (IEEE dots) as a
    product with a strict triangle, exact but for fp32 accumulation; otherwise a prefix sum minus
    each row's own term, which rounds at the scale of that term (fp32: 6e-8 of it, under the
    16-bit dtypes' tolerance by far even where, at strong gates, the term is 1e3 times dg_t) and
    keeps the pass's registers: the split tf32 product spills there."""
    if DOT_PREC == "ieee":
        return tl.dot(xt, (p[:, None] < p[None, :]).to(tl.float32), input_precision="ieee")
    else:
        return tl.cumsum(xt, 1, reverse=BACK) - xt


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_k_kernel(
    qd, k, v, g, do, dht, cu, hc, dki, dgq,
    T, H, HKV, scale, SHAPE_BUCKET,
    dk, dg, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """dk (per query head), dg and dh0 for one D-slice of BS key channels, a backward sweep
    carrying X = dS [BS, E]; grid (cdiv(D, BS), N·H). Transposed, [channels, rows]: with X the
    gradient of the state leaving the chunk and S_in the state entering it (hc),
      dk = e^{Bl−B}⊙(X·vᵀ) + dki,
      dg_t = dgq_t + Σ_{s<t} (k⊙dk_x)_s + e^{Bl}·rowsum(X ⊙ S_in)
    (dk_x the carried-state part of dk). dg_t sums the pairs (source before row t, sink at or after
    it), each counted once: dgq holds those inside the chunk and those from S_in to a row, the
    sum here those from a row to X and from S_in to X. No term cancels another across chunks, so
    dg's error does not grow with T. It carries Y = X/scale, so that the state update accumulates
    doᵀ·qd on the prep launch's qd in place, with no rounding of scale·qd (as the dv pass)."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    row_off = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    dt = v.dtype.element_ty
    Y = _state_tile(dht, s_off, m_s, HAS_DHT, BS, BV) / scale
    n_chunks = tl.cdiv(seq_len, BT)
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        gt = _load_t(g + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
        Bl = tl.sum(gt, 1)
        # Bl − B as a suffix sum (``_to_end``)
        dk_x = tl.dot(Y.to(dt), tl.trans(bv), input_precision=DOT_PREC) * tl.exp(
            tl.cumsum(gt, 1, reverse=not REVERSE) - gt) * scale
        _store_t(dk + row_off, rows, H * KD, o_k, valid, m_k,
                 dk_x + _load_t(dki + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32))
        kt = _load_t(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
        before = _before(kt * dk_x, p, DOT_PREC, REVERSE)
        S_in = tl.load(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), mask=m_s, other=0.0)
        through = tl.exp(Bl) * tl.sum(Y * S_in.to(tl.float32), 1) * scale
        _store_t(dg + row_off, rows, H * KD, o_k, valid, m_k,
                 before + through[:, None] + _load_t(dgq + row_off, rows, H * KD, o_k, valid, m_k))
        qdt = _load_t(qd + row_off, rows, H * KD, o_k, valid, m_k)
        bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
        Y = tl.dot(qdt.to(dt), bdo, Y * tl.exp(Bl)[:, None], input_precision=DOT_PREC)
    if HAS_H0:
        tl.store(dh0 + s_off, Y * scale, mask=m_s)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_v_kernel(
    qd, kd, bl, A, do, dht, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    dv,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """dv (per query head) for one E-slice, backward sweep on the forward's qd, kd, bl and A; grid
    (cdiv(E, BS), N·H). dv_s = dS_sᵀ k_s = scale·Σ_{t≥s} A_ts do_t + (dS leaving the chunk)ᵀ kd_s:
    the forward's transposed pass run backwards. It carries Y = dSᵀ/scale [BS, BK], so that the
    state update accumulates doᵀ·qd in place with no rounding of scale·qd: dvᵀ = scale·(Y·kdᵀ + doᵀ·A)."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, s_off,
     m_s) = _e_slice(cu, T, H, HKV, KD, VD, BK, BS, BT, REVERSE, IS_VARLEN)
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    a_base = A + bos * (H * BT) + i_h * BT
    do_base = do + bos * (H * VD) + i_h * VD
    dv_base = dv + bos * (H * VD) + i_h * VD
    dt = do.dtype.element_ty
    Y = tl.trans(_state_tile(dht, s_off, m_s, HAS_DHT, BK, BS)) / scale
    n_chunks = tl.cdiv(seq_len, BT)
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bqd = _load(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = _load(kd_base, rows, H * KD, o_k, valid, m_k)
        bdo = _load(do_base, rows, H * VD, o_v, valid, m_v)
        M = _load(a_base, rows, H * BT, o_t, valid, o_t < BT)  # [t, s]
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        acc = tl.dot(Y.to(dt), tl.trans(bkd.to(dt)), input_precision=DOT_PREC)
        acc = tl.dot(tl.trans(bdo), M.to(dt), acc, input_precision=DOT_PREC)
        _store(dv_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc * scale))
        Y = tl.dot(tl.trans(bdo), bqd.to(dt), Y * tl.exp(Bl)[None, :], input_precision=DOT_PREC)


# Autotuned launchers of the sweeps on a GPU; under the interpreter autotune cannot run ("0 active
# drivers"), so the launchers run the plain kernels with configs.INTERP_CONFIG. The parallel
# launches take one fixed config each (configs.PREP_*).
_KEY = ["KD", "VD", "SHAPE_BUCKET"]
if INTERPRET:
    gla_fwd = gla_bwd_q = gla_bwd_k = gla_bwd_v = None
else:
    _prune = {"early_config_prune": prune_configs}
    gla_fwd = triton.autotune(configs=autotune_configs(FWD_CONFIGS), key=_KEY,
                              prune_configs_by=_prune)(gla_fwd_kernel)
    gla_bwd_q = triton.autotune(configs=autotune_configs(BWD_Q_CONFIGS), key=_KEY,
                                prune_configs_by=_prune)(gla_bwd_q_kernel)
    gla_bwd_k = triton.autotune(configs=autotune_configs(BWD_K_CONFIGS), key=_KEY,
                                prune_configs_by=_prune)(gla_bwd_k_kernel)
    gla_bwd_v = triton.autotune(configs=autotune_configs(BWD_V_CONFIGS), key=_KEY,
                                prune_configs_by=_prune)(gla_bwd_v_kernel)
