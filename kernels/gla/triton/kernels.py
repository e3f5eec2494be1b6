"""Triton kernels of Gated Linear Attention (chunked, fused: the state never leaves the chip).

Recurrence per (sequence, query head), fp32 state ``S ∈ R^{D×E}``:
``S_t = diag(exp(g_t))·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``, g ≤ 0 per key channel.

Inside a chunk of BT tokens, with ``B`` the inclusive cumulative sum of g in processing order
(relative to the chunk start, so ``B ≤ 0`` and falling) and ``Bl`` the chunk's total:
  o_t    = scale·[(q_t⊙e^{B_t})ᵀ S_in + Σ_{s≤t} A_ts v_s],  A_ts = Σ_d q_td k_sd e^{B_td − B_sd}
  S_out  = diag(e^{Bl})·S_in + Σ_s (k_s⊙e^{Bl − B_s}) v_sᵀ
Every factor is e^{x} with x ≤ 0 at any gate: the carried-state factors by construction, and the
intra-chunk pairs through a binary tree over the chunk's positions. A pair s < t belongs to the
one level whose group holds t in its later half and s in its earlier one, and factorises at that
group's boundary R, e^{B_t − B_s} = e^{B_t − R}·e^{R − B_s} (both ≤ 1): one exponential per element
and one tensor-core product per level. No exponent is positive, so nothing overflows and no launch
depends on the gate values.

Seven kernels, one launch each; the three parallel ones (no carried state, programs over chunks)
compute everything gate-dependent inside a chunk, the four sweeps carry the state (the backward's
first two only store it per chunk, for the parallel launches):
  gla_prep_kernel         forward: qd = q⊙e^B, kd = k⊙e^{Bl − B}, the totals Bl and the scores A
  gla_fwd_kernel          o (and S_T); programs own an E-slice, state Sᵀ [BS, D]
  gla_bwd_h_kernel        backward: the state entering each chunk (hc), forward sweep over D-slices
                          rebuilding S [BS, E] on the prep launch's kd and bl
  gla_bwd_dh_kernel       the state gradient leaving each chunk (dhc), dg's entry-to-exit pairs and
                          dh0, backward sweep over D-slices, state dS [BS, E]
  gla_bwd_intra_kernel    dq whole, each chunk's own part of dk (W = scale·do·vᵀ weighted) and dg's
                          pairs ending in the chunk's rows (from inside it and from its entry state)
  gla_bwd_exit_kernel     what the state leaving each chunk adds to dk and dg (the Gluon in-chunk
                          launch takes these terms itself under GLA_GLUON_INTRA_EXIT=1)
  gla_bwd_v_kernel        dv, backward sweep; programs own an E-slice, state dSᵀ [BS, D]

Tensors are contiguous ``[B, T, heads, dim]`` (q, g, do, o, dq, dg with H heads; k, v with HKV);
kernels take inputs, then scalars, then outputs (jax-triton appends outputs last), so the same
kernels launch from torch and from jax-triton. Absent optional tensors are any placeholder
pointer; constexpr flags keep them untouched.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ...common.tiles import chunk_slot, load_tile, load_tile_t, sequence_of, store_tile, store_tile_t
from .configs import (BWD_DH_CONFIGS, BWD_H_CONFIGS, BWD_V_CONFIGS, FWD_CONFIGS, INTERPRET, autotune_configs,
                      prune_configs)


@triton.jit
def _exp(x):
    """e^x as 2^(x·log2 e): ``tl.exp2`` is one MUFU.EX2 that flushes a result below fp32's normal
    range (x < −87.3) to 0, where ``tl.exp`` is the non-flushing form, which ptxas wraps in a compare
    and two multiplies. Every factor taken here is ≤ 1 and scales a value, so a flushed one is
    below 1e-38 of the value it scales."""
    return tl.exp2(x * 1.4426950408889634)


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
def _state_tile(ptr, s_off, m_s, PRESENT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A program's fp32 state tile from ``ptr`` (an initial state or a final-state cotangent), or
    zeros when there is none."""
    if PRESENT:
        return tl.load(ptr + s_off, mask=m_s, other=0.0).to(tl.float32)
    else:
        return tl.zeros([ROWS, COLS], dtype=tl.float32)


@triton.jit
def _entry_state(hc, bos, i_n, i_c, i_h, H, KD: tl.constexpr, VD: tl.constexpr, o_k, o_e, BT: tl.constexpr):
    """Pointers of a program's [BS, E] tile of chunk i_c's slot in hc [slots, H, D, E]: the state
    entering the chunk, or (dhc) the state gradient leaving it."""
    return hc + (chunk_slot(bos, i_n, i_c, BT) * H + i_h) * (KD * VD) + o_k[:, None] * VD + o_e[None, :]


@triton.jit
def _chunk_vector(ptr, bos, i_n, i_c, i_h, H, KD: tl.constexpr, o_k, BT: tl.constexpr):
    """Pointers of chunk i_c's channels o_k in a per-chunk tensor [slots, H, D]: the totals Bl, or
    dg's entry-to-exit pairs (thr)."""
    return ptr + (chunk_slot(bos, i_n, i_c, BT) * H + i_h) * KD + o_k


@triton.jit
def _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD: tl.constexpr, o_k, m_k, BT: tl.constexpr):
    """Chunk i_c's [channels] from a per-chunk tensor [slots, H, D] (``_chunk_vector``)."""
    return tl.load(_chunk_vector(bl, bos, i_n, i_c, i_h, H, KD, o_k, BT), mask=m_k, other=0.0)


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
def _chunk_program(cu, T, H, HKV, BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of a parallel launch (grid (P, N·H)) works: its sequence, query and kv head,
    first row and length, and the chunk rows' order."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    o_t, p = _order(BT, REVERSE)
    return i_n, i_h, i_h // (H // HKV), bos, seq_len, o_t, p


@triton.jit
def _qgk_bases(q, g, k, bos, i_h, i_hk, H, HKV, KD: tl.constexpr):
    """A parallel program's q, g and k pointers at its sequence's first row and its heads."""
    return q + bos * (H * KD) + i_h * KD, g + bos * (H * KD) + i_h * KD, k + bos * (HKV * KD) + i_hk * KD


@triton.jit
def _gqk_tiles(g_base, q_base, k_base, rows, valid, o_k, m_k, H, HKV, KD: tl.constexpr):
    """A chunk's g, q, k tiles [BT, BD] in fp32, zero past the end (g = 0 there: no decay)."""
    bg = load_tile(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
    bq = load_tile(q_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
    bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
    return bg, bq, bk


@triton.jit
def _chunk_gates(g, DOT_PREC: tl.constexpr, BACK: tl.constexpr):
    """(B, Bl): a chunk's cumulative gate [BT, BD] (inclusive, processing order) and its total [BD]
    from its gates g (fp32, zero past the end). The levels' exponents and kd's are differences of
    these, so for fp32 inputs they are fp64 (at gates near −80 per token B reaches −5000, whose fp32
    spacing is 5e-4); for 16-bit inputs fp32's 3e-5 relative at the strongest gates is far under
    their tolerance."""
    if DOT_PREC == "ieee":
        g = g.to(tl.float64)
    return tl.cumsum(g, 0, reverse=BACK), tl.sum(g, 0)


@triton.jit
def _level(B, p, lv, BT: tl.constexpr, BACK: tl.constexpr):
    """Level lv of the binary tree over a chunk's rows in processing order: groups of BT >> lv
    positions, each split into halves. A pair (t, s) of one group with t in its later half and s in
    its earlier one factorises at the group's boundary R (B at the earlier half's last row):
    e^{B_t − B_s} = e^{B_t − R}·e^{R − B_s}. Every pair s < t is in exactly one level. Returns
    (later [BT], the rows of later halves; E [BT, BD] fp32, e^{B_t − R} on those rows and
    e^{R − B_t} on the others): every exponent is ≤ 0, so nothing overflows at any gate."""
    span = BT >> lv
    ref = p // span * span + span // 2 - 1  # processing position of the group's boundary row
    if BACK:
        ref = BT - 1 - ref
    X = B - tl.gather(B, tl.broadcast_to(ref[:, None], B.shape), 0)
    later = (p // (span // 2)) % 2 == 1
    return later, _exp(tl.where(later[:, None], X, -X).to(tl.float32))


@triton.jit
def _dot_operand(x, DOT_PREC: tl.constexpr):
    """x as a tensor-core product reads it: tf32 keeps 10 of fp32's 23 mantissa bits (the product
    ignores the rest), IEEE all of them. dg's in-chunk sum takes each pair twice, once from each
    side, and the copies cancel exactly only if both are products of the same rounded operands."""
    if DOT_PREC == "ieee":
        return x
    else:
        return (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _same_group(p, span):
    """[BT, BT]: rows t and s in one group of ``span`` processing positions."""
    return (p[:, None] // span) == (p[None, :] // span)


@triton.jit
def gla_prep_kernel(
    q, k, g, cu,
    T, H, HKV,
    qd, kd, bl, A,
    KD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, LEVELS: tl.constexpr,
):
    """Everything of a chunk the forward and the dv pass need that carries nothing from chunk to
    chunk: qd = q⊙e^B, kd = k⊙e^{Bl − B} [B, T, H, D] (per query head), the totals Bl into
    bl [slots, H, D] (``chunk_slot``) and the intra-chunk scores A [B, T, H, BT] (row t, column the
    offset of s in its chunk; zero unless s ≤ t), exact at any gate: the pairs s < t one
    tensor-core product per level of ``_level`` (LEVELS = log2 BT), the pairs s = t a row sum.
    Grid (P, N·H): program (j, row) takes the row's chunks j, j + P, …, each over D in slices of BD."""
    i_n, i_h, i_hk, bos, seq_len, o_t, p = _chunk_program(cu, T, H, HKV, BT, REVERSE, IS_VARLEN)
    q_base, g_base, k_base = _qgk_bases(q, g, k, bos, i_h, i_hk, H, HKV, KD)
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    a_base = A + bos * (H * BT) + i_h * BT
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        scores = tl.zeros([BT, BT], dtype=tl.float32)
        own = tl.zeros([BT], dtype=tl.float32)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bg, bq, bk = _gqk_tiles(g_base, q_base, k_base, rows, valid, o_k, m_k, H, HKV, KD)
            B, Bl = _chunk_gates(bg, DOT_PREC, REVERSE)
            store_tile(qd_base, rows, H * KD, o_k, valid, m_k, bq * _exp(B.to(tl.float32)))
            store_tile(kd_base, rows, H * KD, o_k, valid, m_k, bk * _exp((Bl[None, :] - B).to(tl.float32)))
            tl.store(_chunk_vector(bl, bos, i_n, i_c, i_h, H, KD, o_k, BT), Bl.to(tl.float32), mask=m_k)
            own += tl.sum(bq * bk, 1)
            for lv in range(0, LEVELS):
                later, E = _level(B, p, lv, BT, REVERSE)
                qL = tl.where(later[:, None], bq * E, 0.0)
                kL = tl.where(later[:, None], 0.0, bk * E)
                s = tl.dot(qL, tl.trans(kL), input_precision=DOT_PREC)
                scores += tl.where(_same_group(p, BT >> lv), s, 0.0)
        scores += tl.where(o_t[:, None] == o_t[None, :], own[:, None], 0.0)
        # every column for the valid rows: keys past the end score 0
        tl.store(a_base + rows[:, None] * (H * BT) + o_t[None, :], scores.to(A.dtype.element_ty), mask=valid[:, None])


@triton.jit
def _state_product(st, x_base, x_stride, bos, i_n, i_c, i_h, H, KD: tl.constexpr, VD: tl.constexpr, rows, valid,
                   o_k, m_k, DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """x·Zᵀ [BT, BD] fp32 for a chunk's rows x [BT, E] (do or v) and the [BD, E] slice of its state Z
    in ``st`` [slots, H, D, E] (the entry state S_in from ``gla_bwd_h_kernel``, or dS_out/scale
    from ``gla_bwd_dh_kernel``), over E in slices of BV."""
    acc = tl.zeros([BT, o_k.shape[0]], dtype=tl.float32)
    for i_v in range(0, tl.cdiv(VD, BV)):
        o_e = i_v * BV + tl.arange(0, BV)
        m_e = o_e < VD
        bx = load_tile(x_base, rows, x_stride, o_e, valid, m_e)
        z = tl.load(_entry_state(st, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT),
                    mask=m_k[:, None] & m_e[None, :], other=0.0)
        acc = tl.dot(bx, tl.trans(z), acc, input_precision=DOT_PREC)
    return acc


@triton.jit
def _before_rows(x, p, DOT_PREC: tl.constexpr, BACK: tl.constexpr):
    """Σ_{s<t} x_s (processing order) over a chunk's rows x [BT, channels]. With fp32 inputs (IEEE
    dots) as a product with a strict triangle, exact but for fp32 accumulation; otherwise a prefix
    sum minus each row's own term, which rounds at the scale of that term (fp32: 6e-8 of it, under
    the 16-bit dtypes' tolerance by far even where, at strong gates, the term is 1e3 times dg_t)."""
    if DOT_PREC == "ieee":
        return tl.dot((p[None, :] < p[:, None]).to(tl.float32), x, input_precision="ieee")
    else:
        return tl.cumsum(x, 0, reverse=BACK) - x


@triton.jit
def _block_rows(base, stride, c0, lim, o_k, m_k, C: tl.constexpr, BT: tl.constexpr, BACK: tl.constexpr,
                EXP: tl.constexpr = False):
    """A chunk's rows of one tensor as C [BT / C, BD] fp32 tensors (their exponentials if EXP),
    block i's row of processing offset x at index x (blocks by address): loaded row by row, so each
    is a register of the thread that holds its channel in its block. c0: the chunk's first row
    (lowest address); lim: its valid rows; rows past them read 0."""
    i = tl.arange(0, BT // C)
    rows = ()
    for r in tl.static_range(C):
        o = i * C + r
        p = BT - 1 - o if BACK else o
        x = tl.load(base + (c0 + o)[:, None] * stride + o_k[None, :], mask=(p < lim)[:, None] & m_k[None, :],
                    other=0.0)
        x = x.to(tl.float32)
        rows = rows + ((_exp(x) if EXP else x),)
    if BACK:  # processing order inside a block runs against the addresses
        rows = rows[::-1]
    return rows


@triton.jit
def _block_pairs(q_base, k_base, g_base, q_stride, k_stride, c0, lim, o_k, m_k, w_blk, out,
                 C: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BACK: tl.constexpr):
    """The pairs s < t inside each block of C rows of a chunk (processing order), in fp32 registers:
    dq_t = Σ_s W_ts k_s e^{B_t − B_s} and dk_s = Σ_t W_ts q_t e^{B_t − B_s} per channel. Walking s
    down from t, e^{B_t − B_s} is a running product of the rows' gate factors a = e^{g} (those after
    s up to t), so no exponent is positive and no difference of cumulative gates is formed; each
    pair's weight W_ts·e^{B_t − B_s} feeds dq_t and dk_s at once. A thread holds one channel's C rows
    of one block; W_ts, the same for every channel, is read per pair from the block's copy in
    ``w_blk`` ([NB, C, C] fp32, row t, column s by processing offset). Writes dq and dk of these
    pairs into ``out`` ([2, BT, BD] fp32, rows by address offset)."""
    NB: tl.constexpr = BT // C
    q = _block_rows(q_base, q_stride, c0, lim, o_k, m_k, C, BT, BACK)
    k = _block_rows(k_base, k_stride, c0, lim, o_k, m_k, C, BT, BACK)
    a = _block_rows(g_base, q_stride, c0, lim, o_k, m_k, C, BT, BACK, True)
    i = tl.arange(0, NB)
    w_row = w_blk + i[:, None] * (C * C)
    zero = tl.zeros([NB, BD], dtype=tl.float32)
    dq = (zero,)  # no pair ends at the first row
    dk = (zero,) * C
    for t in tl.static_range(1, C):
        f = a[t]
        w = tl.load(w_row + t * C + (t - 1)) * f
        acc = w * k[t - 1]
        dk = dk[:t - 1] + (dk[t - 1] + w * q[t],) + dk[t:]
        for j in tl.static_range(2, t + 1):
            f = f * a[t - j + 1]
            w = tl.load(w_row + t * C + (t - j)) * f
            acc = acc + w * k[t - j]
            dk = dk[:t - j] + (dk[t - j] + w * q[t],) + dk[t - j + 1:]
        dq = dq + (acc,)
    o_l = tl.arange(0, BD)
    for x in tl.static_range(C):
        slot = out + (i * C + (C - 1 - x if BACK else x))[:, None] * BD + o_l[None, :]
        tl.store(slot, dq[x])
        tl.store(slot + BT * BD, dk[x])


@triton.jit
def gla_bwd_intra_kernel(
    q, k, v, g, do, hc, cu,
    T, H, HKV, scale,
    dq, dki, dgq, wsc,
    KD: tl.constexpr, VD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr, LEVELS: tl.constexpr, PAIRS: tl.constexpr = 0,
):
    """The backward's per-chunk parts, every chunk at once (grid (P, N·H) as the prep launch),
    exact at any gate through the prep launch's levels. With W = scale·do·vᵀ (s ≤ t) and S_in the
    state entering the chunk (hc):
    dq_t = scale·e^{B_t}⊙(S_in·do_t) + Σ_{s≤t} W_ts k_s⊙e^{B_t − B_s} (whole: nothing else adds to it),
    dki_s = Σ_{t≥s} W_ts q_t⊙e^{B_t − B_s} (per query head; the exit launch adds the carried part),
    and dg's pairs that end in the chunk's rows, dgq_t = Σ_{t'≥t} [q⊙dq_x]_t' (from S_in, dq_x the
    first term of dq) + Σ_{t'≥t, s<t} W_t's q_t'⊙k_s⊙e^{B_t' − B_s} (inside the chunk), summed in fp32
    as one suffix sum of q⊙dq_x + q⊙dq_in − k⊙dk_in over the strict in-chunk pairs only: the diagonal
    pairs, the largest terms at strong gates, cancel exactly there and are added to dq, dki
    afterwards. Two tensor-core products per level, one each for dq and dk, on operands whose
    rounding both copies of a pair share (``_dot_operand``). With PAIRS > 0 the tree runs its upper
    LEVELS levels only and the pairs inside blocks of PAIRS rows come from registers
    (``_block_pairs``, fp32 throughout, through the program's slot of the scratch ``wsc``)."""
    i_n, i_h, i_hk, bos, seq_len, o_t, p = _chunk_program(cu, T, H, HKV, BT, REVERSE, IS_VARLEN)
    q_base, g_base, k_base = _qgk_bases(q, g, k, bos, i_h, i_hk, H, HKV, KD)
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    row_off = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    # the program's scratch: its chunk's in-block pairs of W [NB, C, C], then the in-block pairs'
    # dq and dk of its current key slice [2, BT, BD] (fp32)
    w_blk = wsc + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)).to(tl.int64) * (BT * (PAIRS + 2 * BD))
    pairs_out = w_blk + BT * PAIRS
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        W = tl.zeros([BT, BT], dtype=tl.float32)
        for i_v in range(0, tl.cdiv(VD, BV)):
            o_e = i_v * BV + tl.arange(0, BV)
            m_e = o_e < VD
            bdo = load_tile(do_base, rows, H * VD, o_e, valid, m_e)
            bv = load_tile(v_base, rows, HKV * VD, o_e, valid, m_e)
            W = tl.dot(bdo, tl.trans(bv), W, input_precision=DOT_PREC)
        W = tl.where(p[None, :] <= p[:, None], W * scale, 0.0)
        w_diag = tl.sum(tl.where(o_t[:, None] == o_t[None, :], W, 0.0), 1)
        if PAIRS > 0:
            # each block's strict pairs for _block_pairs to read back per pair, in the program's slot
            # [NB, C, C] (blocks by address, rows and columns by processing offset); the barriers keep
            # the last chunk's readers ahead of this chunk's writes
            tl.debug_barrier()
            blk = (p[:, None] // PAIRS == p[None, :] // PAIRS) & (p[None, :] < p[:, None])
            tl.store(w_blk + (o_t[:, None] // PAIRS) * (PAIRS * PAIRS) + (p[:, None] % PAIRS) * PAIRS
                     + (p[None, :] % PAIRS), W, mask=blk)
            tl.debug_barrier()
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            if PAIRS > 0:
                tl.debug_barrier()  # the last slice's tile part has read the scratch
                _block_pairs(q_base, k_base, g_base, H * KD, HKV * KD, _chunk_start(seq_len, i_c, BT, REVERSE),
                             seq_len - i_c * BT, o_k, m_k, w_blk, pairs_out, PAIRS, BT, BD, REVERSE)
                tl.debug_barrier()
            bg, bq, bk = _gqk_tiles(g_base, q_base, k_base, rows, valid, o_k, m_k, H, HKV, KD)
            B, _ = _chunk_gates(bg, DOT_PREC, REVERSE)
            # tl.exp, not _exp: once a slice, and with the flushing form ptxas spills more across the levels
            dq_acc = _state_product(hc, do_base, H * VD, bos, i_n, i_c, i_h, H, KD, VD, rows, valid, o_k, m_k,
                                    DOT_PREC, BT, BV) * tl.exp(B).to(tl.float32) * scale
            terms = bq * dq_acc  # dg's terms: q⊙dq_x, then q⊙dq − k⊙dk of the strict pairs
            dk_acc = tl.zeros([BT, BD], dtype=tl.float32)
            if PAIRS > 0:  # the pairs inside blocks, from _block_pairs, start the accumulators
                o_l = o_t[:, None] * BD + tl.arange(0, BD)[None, :]
                dq_in = tl.load(pairs_out + o_l)
                dk_acc = tl.load(pairs_out + BT * BD + o_l)
                dq_acc += dq_in
                terms += bq * dq_in - bk * dk_acc
            for lv in range(0, LEVELS):
                later, E = _level(B, p, lv, BT, REVERSE)
                ql = _dot_operand(tl.where(later[:, None], bq * E, 0.0), DOT_PREC)
                kl = _dot_operand(tl.where(later[:, None], 0.0, bk * E), DOT_PREC)
                WL = tl.where(_same_group(p, BT >> lv), W, 0.0)
                P = tl.dot(WL, kl, input_precision=DOT_PREC)
                Q = tl.dot(tl.trans(WL), ql, input_precision=DOT_PREC)
                dq_acc += tl.where(later[:, None], E, 0.0) * P
                dk_acc += tl.where(later[:, None], 0.0, E) * Q
                # each pair's two copies from the same rounded operands, so that they cancel
                terms += ql * P - kl * Q
            store_tile(dgq + row_off, rows, H * KD, o_k, valid, m_k, tl.cumsum(terms, 0, reverse=not REVERSE))
            store_tile(dq + row_off, rows, H * KD, o_k, valid, m_k, dq_acc + w_diag[:, None] * bk)
            store_tile(dki + row_off, rows, H * KD, o_k, valid, m_k, dk_acc + w_diag[:, None] * bq)


@triton.jit
def gla_bwd_exit_kernel(
    k, v, g, dhc, thr, cu, dki, dgq,
    T, H, HKV, scale,
    dk, dg,
    KD: tl.constexpr, VD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """What the state leaving each chunk adds to dk and dg, every chunk at once (grid (P, N·H) as
    the prep launch), from the exit state gradient over scale Y = dS_out/scale (dhc) and dg's
    entry-to-exit pairs (thr) that ``gla_bwd_dh_kernel`` stored:
      dk_s = dki_s + scale·e^{Bl − B_s}⊙(Y·v_s),
      dg_t = dgq_t + Σ_{s<t} [k⊙dk_x]_s + thr
    (dk_x the first term's addend: dg's pairs from a row before t to the exit state). A launch of
    its own, not an epilogue of the in-chunk one, which holds its level accumulators near the
    register limit. dk and dg may alias dki and dgq (each element is read, then written, by one
    thread)."""
    i_n, i_h, i_hk, bos, seq_len, o_t, p = _chunk_program(cu, T, H, HKV, BT, REVERSE, IS_VARLEN)
    row_off = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor, g included
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bg = load_tile(g + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32)
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
            # Bl − B as an exclusive suffix sum: the sum of the gates it crosses, no difference of
            # two large cumulative gates
            dk_x = _state_product(dhc, v_base, HKV * VD, bos, i_n, i_c, i_h, H, KD, VD, rows, valid, o_k, m_k,
                                  DOT_PREC, BT, BV) * _exp(tl.cumsum(bg, 0, reverse=not REVERSE) - bg) * scale
            exits = _before_rows(bk * dk_x, p, DOT_PREC, REVERSE) + _chunk_totals(
                thr, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)[None, :]
            store_tile(dk + row_off, rows, H * KD, o_k, valid, m_k,
                       dk_x + load_tile(dki + row_off, rows, H * KD, o_k, valid, m_k).to(tl.float32))
            store_tile(dg + row_off, rows, H * KD, o_k, valid, m_k,
                       exits + load_tile(dgq + row_off, rows, H * KD, o_k, valid, m_k))


# --- the sweeps: what carries from chunk to chunk, every factor ≤ 1 -----------------------------


@triton.jit
def _e_slice(cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr,
             BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of an E-sliced pass (grid (cdiv(E, BS), N·H)) works: its sequence, query and
    kv head, first row and length, the chunk rows' order, its BK key lanes and BS value columns
    with their masks, and the offset and mask of its [BK, BS] state tile."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
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
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
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
        bqd = load_tile(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = load_tile(kd_base, rows, H * KD, o_k, valid, m_k)
        bv = load_tile(v_base, rows, HKV * VD, o_v, valid, m_v)
        At = load_tile_t(a_base, rows, H * BT, o_t, valid, o_t < BT)  # [s, t]
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        acc = tl.dot(St.to(dt), tl.trans(bqd.to(dt)), input_precision=DOT_PREC)
        acc = tl.dot(tl.trans(bv), At.to(dt), acc, input_precision=DOT_PREC) * scale
        store_tile(o_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc))
        St = tl.dot(tl.trans(bv), bkd.to(dt), St * tl.exp(Bl)[None, :], input_precision=DOT_PREC)
    if STORE_HT:
        tl.store(ht + tl.trans(s_off), St, mask=tl.trans(m_s))


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_h_kernel(
    kd, bl, v, h0, cu,
    T, H, HKV, SHAPE_BUCKET,
    hc,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """The state entering every chunk, S_in, into hc [(total rows) // BT + N, H, D, E] (input dtype)
    for the in-chunk launch and the state-gradient pass: a forward sweep over one D-slice of BS key
    channels rebuilding S [BS, E] on the prep launch's kd and bl, S ← diag(e^{Bl})·S + kdᵀ·v; grid
    (cdiv(D, BS), N·H)."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    row_off = bos * (H * KD) + i_h * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    dt = v.dtype.element_ty
    S = _state_tile(h0, s_off, m_s, HAS_H0, BS, BV)
    for i_c in range(0, tl.cdiv(seq_len, BT)):
        tl.store(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), S.to(hc.dtype.element_ty), mask=m_s)
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        kdt = load_tile_t(kd + row_off, rows, H * KD, o_k, valid, m_k)
        bv = load_tile(v_base, rows, HKV * VD, o_e, valid, m_e)
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        S = tl.dot(kdt.to(dt), bv, S * tl.exp(Bl)[:, None], input_precision=DOT_PREC)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_dh_kernel(
    qd, bl, do, dht, cu, hc,
    T, H, HKV, scale, SHAPE_BUCKET,
    dhc, thr, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """The state gradient leaving every chunk, for the exit launch: a backward sweep over one
    D-slice of BS key channels carrying Y = dS/scale [BS, E], Y ← Y·diag(e^{Bl}) + qdᵀ·do (the
    update accumulates doᵀ·qd on the prep launch's qd in place, with no rounding of scale·qd, as
    the dv pass); grid (cdiv(D, BS), N·H). Writes each chunk's exit Y into dhc [slots, H, D, E]
    (input dtype: the exit launch's product rounds it there anyway), dg's pairs from the entry
    state S_in (hc) to the exit one, thr = e^{Bl}·rowsum(dS_out ⊙ S_in) [slots, H, D] fp32, and dh0."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    row_off = bos * (H * KD) + i_h * KD
    do_base = do + bos * (H * VD) + i_h * VD
    dt = do.dtype.element_ty
    Y = _state_tile(dht, s_off, m_s, HAS_DHT, BS, BV) / scale
    n_chunks = tl.cdiv(seq_len, BT)
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        tl.store(_entry_state(dhc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), Y.to(dhc.dtype.element_ty), mask=m_s)
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        S_in = tl.load(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), mask=m_s, other=0.0)
        tl.store(_chunk_vector(thr, bos, i_n, i_c, i_h, H, KD, o_k, BT),
                 tl.exp(Bl) * tl.sum(Y * S_in.to(tl.float32), 1) * scale, mask=m_k)
        qdt = load_tile_t(qd + row_off, rows, H * KD, o_k, valid, m_k)
        bdo = load_tile(do_base, rows, H * VD, o_e, valid, m_e)
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
        bqd = load_tile(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = load_tile(kd_base, rows, H * KD, o_k, valid, m_k)
        bdo = load_tile(do_base, rows, H * VD, o_v, valid, m_v)
        M = load_tile(a_base, rows, H * BT, o_t, valid, o_t < BT)  # [t, s]
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        acc = tl.dot(Y.to(dt), tl.trans(bkd.to(dt)), input_precision=DOT_PREC)
        acc = tl.dot(tl.trans(bdo), M.to(dt), acc, input_precision=DOT_PREC)
        store_tile(dv_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc * scale))
        Y = tl.dot(tl.trans(bdo), bqd.to(dt), Y * tl.exp(Bl)[None, :], input_precision=DOT_PREC)


# Autotuned launchers of the sweeps on a GPU; under the interpreter autotune cannot run ("0 active
# drivers"), so the launchers run the plain kernels with configs.INTERP_CONFIG. The parallel
# launches take one fixed config each (configs.PREP_*).
_KEY = ["KD", "VD", "SHAPE_BUCKET"]
if INTERPRET:
    gla_fwd = gla_bwd_h = gla_bwd_dh = gla_bwd_v = None
else:
    _prune = {"early_config_prune": prune_configs}
    gla_fwd = triton.autotune(configs=autotune_configs(FWD_CONFIGS), key=_KEY,
                              prune_configs_by=_prune)(gla_fwd_kernel)
    gla_bwd_h = triton.autotune(configs=autotune_configs(BWD_H_CONFIGS), key=_KEY,
                                prune_configs_by=_prune)(gla_bwd_h_kernel)
    gla_bwd_dh = triton.autotune(configs=autotune_configs(BWD_DH_CONFIGS), key=_KEY,
                                 prune_configs_by=_prune)(gla_bwd_dh_kernel)
    gla_bwd_v = triton.autotune(configs=autotune_configs(BWD_V_CONFIGS), key=_KEY,
                                prune_configs_by=_prune)(gla_bwd_v_kernel)
