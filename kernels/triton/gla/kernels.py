"""Triton kernels of Gated Linear Attention (chunked, fused: the state never leaves the chip).

Recurrence per (sequence, query head), fp32 state ``S ∈ R^{D×E}``:
``S_t = diag(exp(g_t))·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``, g ≤ 0 per key channel.

Inside a chunk of BT tokens, with ``B`` the inclusive cumulative sum of g in processing order
(relative to the chunk start, so ``B ≤ 0`` and falling) and ``Bl`` the chunk's total:
  o_t    = scale·[(q_t⊙e^{B_t})ᵀ S_in + Σ_{s≤t} (Σ_d q_td k_sd e^{B_td − B_sd}) v_s]
  S_out  = diag(e^{Bl})·S_in + Σ_s (k_s⊙e^{Bl − B_s}) v_sᵀ
Every inter-chunk factor is ≤ 1. Each chunk has qd = q⊙e^B and kd = k⊙e^{Bl − B} and uses them for
the intra-chunk products too, e^{B_t − B_s} = e^{B_t}·e^{Bl − B_s}·e^{−Bl} (``_decayed_scores``); a
chunk deeper than SAFE_DEPTH takes the exact token-by-token path instead. Every pass holds its state
slice as the M dimension of its big products (all of a head dim at BS = 128, the two warpgroups
splitting it).

Five kernels, one launch each:
  gla_prep_kernel   qd, kd and the chunk totals Bl of every chunk at once (no state: parallel over
                    chunks), so that the forward and the dv pass sweep them ready-made (PRE)
  gla_fwd_kernel    o (and S_T); programs own an E-slice, state Sᵀ [BS, D]
  gla_bwd_q_kernel  dq, forward sweep; programs own a D-slice (GLA's state rows evolve
                    independently), state S [BS, E], chunk tiles transposed; also the state
                    entering every chunk (hc) and dg's value after the last row (gend)
  gla_bwd_k_kernel  dk, dg and dh0, backward sweep over the same D-slices, state dS [BS, E]; dg
                    from q⊙dq − k⊙dk inside each chunk, pinned at both chunk ends by
                    rowsum(dS ⊙ S) (``_chunk_dg_t``)
  gla_bwd_v_kernel  dv, backward sweep; programs own an E-slice, state dSᵀ [BS, D]
The backward recomputes every state it needs; the things stored per chunk are the forward's chunk
totals and the state entering it (written by the dq pass in the input dtype, read back by the dk
pass for dg).

Tensors are contiguous ``[B, T, heads, dim]`` (q, g, do, o, dq, dg with H heads; k, v with HKV);
kernels take inputs, then scalars, then outputs (jax-triton appends outputs last), so the same
kernels launch from torch and from jax-triton. Absent optional tensors are any placeholder
pointer; constexpr flags keep them untouched.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import configs as _cfg
from .configs import (BWD_K_CONFIGS, BWD_Q_CONFIGS, BWD_V_CONFIGS, EXACT_BWD_QK_CONFIG, EXACT_BWD_V_CONFIG,
                      EXACT_FWD_CONFIG, FWD_CONFIGS, INTERPRET, autotune_configs, exact_configs, prune_configs)

MAX_CHUNK = tl.constexpr(_cfg.MAX_CHUNK)
# The chunk of the exact sweep inside a PATH "both" launch of the forward or the dv pass: ptxas
# allocates both sweeps of such a kernel together, and the exact sweep at the fast one's 64 rows
# spills (7-8 KB, sm_90), where at 16 it leaves the fast sweep's registers alone.
BOTH_EXACT_CHUNK = tl.constexpr(_cfg.BOTH_EXACT_CHUNK)


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
def _order(BT: tl.constexpr, BACK: tl.constexpr):
    """Row offsets of a chunk (ascending addresses) and each row's position p in processing order."""
    o_t = tl.arange(0, BT)
    if BACK:
        p = BT - 1 - o_t
    else:
        p = o_t
    return o_t, p


@triton.jit
def _chunk_rows(seq_len, i_c, o_t, p, BT: tl.constexpr, BACK: tl.constexpr):
    """Rows (ascending addresses) of the chunk at processing index i_c, and which are valid; walking
    backwards (BACK) a last, partial chunk starts below row 0."""
    ps = i_c * BT
    if BACK:
        start = seq_len - ps - BT
    else:
        start = ps
    return start + o_t, p < seq_len - ps


@triton.jit
def _load(base, rows, row_stride, lanes, valid, m_lanes):
    """A [rows, lanes] tile, zero outside the valid rows and lanes."""
    return tl.load(base + rows[:, None] * row_stride + lanes[None, :], mask=valid[:, None] & m_lanes[None, :],
                   other=0.0)


@triton.jit
def _e_slice(q, g, k, cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr,
             BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of an E-sliced pass (grid (cdiv(E, BS), N·H)) works: its query and kv head,
    first row and length, the chunk rows' order, its BK key lanes and BS value columns with their
    masks, its q, g and k base pointers, and the offset and mask of its [BK, BS] state tile."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t, p = _order(BT, REVERSE)
    o_k = tl.arange(0, BK)
    o_v = tl.program_id(0) * BS + tl.arange(0, BS)
    m_k = o_k < KD
    m_v = o_v < VD
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    s_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD) + o_k[:, None] * VD + o_v[None, :]
    m_s = m_k[:, None] & m_v[None, :]
    return i_h, i_hk, bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, q_base, g_base, k_base, s_off, m_s


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
    """Pointers of a program's [BS, E] tile of the state entering chunk i_c of sequence i_n in hc
    [slots, H, D, E]: slot bos // BT + i_n + i_c. A sequence of L rows from row bos uses
    cdiv(L, BT) ≤ (bos + L) // BT + 1 − bos // BT slots, so the sequences' slots never overlap and
    all fit in (total rows) // BT + N."""
    return hc + (_slot(bos, i_n, i_c, BT) * H + i_h) * (KD * VD) + o_k[:, None] * VD + o_e[None, :]


@triton.jit
def _slot(bos, i_n, i_c, BT: tl.constexpr):
    """Slot of chunk i_c of sequence i_n (first row bos) in a per-chunk buffer: bos // BT + i_n + i_c."""
    return (bos // BT + i_n + i_c).to(tl.int64)


@triton.jit
def _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD: tl.constexpr, o_k, m_k, BT: tl.constexpr):
    """Bl [channels] of chunk i_c from bl [slots, H, D], the totals ``gla_prep_kernel`` wrote."""
    return tl.load(bl + (_slot(bos, i_n, i_c, BT) * H + i_h) * KD + o_k, mask=m_k, other=0.0)


@triton.jit
def _chunk_dg_t(dGt, dg_end, dg_start, p, n_valid, BACK: tl.constexpr):
    """dgᵀ [channels, rows] of a chunk from its terms dGᵀ = (q⊙dq − k⊙dk)ᵀ and the chunk's exact
    ends: dg_start, the first row's dg, and dg_end, the dg just after its last row (processing
    order).

    dg_t = dg_end + Σ_{t'≥t} dG_t' = dg_start − Σ_{t'<t} dG_t' in exact arithmetic. The terms
    nearly cancel, so either sum's rounding error drifts like a random walk from its end; each row
    blends the two by inverse variance (weight 1 − p/n_valid on the prefix side), which spreads
    the chunk's mismatch linearly over its rows. Nothing accumulates across chunks."""
    mismatch = dg_start - dg_end - tl.sum(dGt, 1)
    w = 1.0 - p.to(tl.float32) / n_valid
    return tl.cumsum(dGt, 1, reverse=not BACK) + dg_end[:, None] + w[None, :] * mismatch[:, None]


@triton.jit
def _store(base, rows, row_stride, lanes, valid, m_lanes, x):
    tl.store(base + rows[:, None] * row_stride + lanes[None, :], x.to(base.dtype.element_ty),
             mask=valid[:, None] & m_lanes[None, :])


@triton.jit
def _tri_product(x, tri, LEFT: tl.constexpr, DOT_PREC: tl.constexpr):
    """tri·x (LEFT) or x·tri for a 0/1 matrix tri and fp32 x, to fp32 accuracy: the chunk's
    prefix and suffix sums as tensor-core products, where a scan over rows spread across warps
    goes through shared memory step by step. tri is exact in tf32; x splits into its tf32 head
    and the fp32 remainder, so both tf32 products are exact but for the remainder's own rounding
    (2^-21 of x) and only the fp32 accumulation rounds. IEEE dots (fp32 inputs) need no split."""
    if DOT_PREC == "ieee":
        if LEFT:
            return tl.dot(tri, x, input_precision="ieee")
        else:
            return tl.dot(x, tri, input_precision="ieee")
    else:
        hi = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
        lo = x - hi
        if LEFT:
            return tl.dot(tri, lo, tl.dot(tri, hi, input_precision="tf32"), input_precision="tf32")
        else:
            return tl.dot(lo, tri, tl.dot(hi, tri, input_precision="tf32"), input_precision="tf32")


@triton.jit
def _log_gates(g, p, DOT_PREC: tl.constexpr):
    """(B, Bl): inclusive cumulative log gate of each row in processing order, and the chunk total.
    Invalid rows hold g = 0, so they neither add to Bl nor change B."""
    return _tri_product(g, (p[None, :] <= p[:, None]).to(tl.float32), True, DOT_PREC), tl.sum(g, 0)


@triton.jit
def _log_gates_t(gt, p, DOT_PREC: tl.constexpr):
    """(Bᵀ, Bl) of a transposed chunk gᵀ [channels, rows], as ``_log_gates``."""
    return _tri_product(gt, (p[:, None] <= p[None, :]).to(tl.float32), False, DOT_PREC), tl.sum(gt, 1)


@triton.jit
def _gcast(x, GATE_BF16: tl.constexpr):
    """Dot operand carrying a gate factor up to e^{SAFE_DEPTH}: bf16 keeps fp32's range; fp16
    would overflow, so fp16 and fp32 inputs keep such operands in fp32."""
    if GATE_BF16:
        return x.to(tl.bfloat16)
    else:
        return x.to(tl.float32)


@triton.jit
def _row(x, o_t, j):
    """Row j of a [BT, n] tile, in fp32."""
    return tl.sum(tl.where((o_t == j)[:, None], x.to(tl.float32), 0.0), 0)


@triton.jit
def _exact_scores(a, b, B, p, o_t, BT: tl.constexpr):
    """M[t, s] = Σ_d a_td b_sd e^{B_td − B_sd} for p_s ≤ p_t, else 0 (fp32), one key row s at a
    time, so every kept exponent is ≤ 0 whatever the chunk's gate range."""
    M = tl.zeros([BT, BT], dtype=tl.float32)
    af = a.to(tl.float32)
    for j in range(BT):
        b_j = _row(b, o_t, j)
        B_j = _row(B, o_t, j)
        p_j = tl.sum(tl.where(o_t == j, p, 0), 0)
        w = tl.exp(tl.where((p >= p_j)[:, None], B - B_j[None, :], float("-inf")))
        col = tl.sum(af * b_j[None, :] * w, 1)
        M = tl.where((o_t == j)[None, :], col[:, None], M)
    return M


@triton.jit
def _exact_apply(W, x, B, p, o_t, SIGN: tl.constexpr, BT: tl.constexpr, BX: tl.constexpr):
    """Y[u, d] = Σ_w W_uw x_wd e^{SIGN·(B_ud − B_wd)} for a W already zero outside
    SIGN·(p_u − p_w) ≥ 0 (fp32), one row w at a time, so every exponent is ≤ 0 where W may be
    nonzero, whatever the chunk's gate range."""
    Y = tl.zeros([BT, BX], dtype=tl.float32)
    for j in range(BT):
        x_j = _row(x, o_t, j)
        B_j = _row(B, o_t, j)
        p_j = tl.sum(tl.where(o_t == j, p, 0), 0)
        W_j = tl.sum(tl.where((o_t == j)[None, :], W, 0.0), 1)
        e = tl.where((SIGN * (p - p_j) >= 0)[:, None], SIGN * (B - B_j[None, :]), float("-inf"))
        Y += W_j[:, None] * x_j[None, :] * tl.exp(e)
    return Y


@triton.jit
def _decayed_scores(qd, kd, bq, bk, B, Bl, p, o_t, TRANS: tl.constexpr, GATE_BF16: tl.constexpr,
                    DOT_PREC: tl.constexpr, SAFE_DEPTH: tl.constexpr, EXACT: tl.constexpr, BT: tl.constexpr):
    """M[t, s] = Σ_d q_td k_sd e^{B_td − B_sd} for p_s ≤ p_t, else 0 (fp32; Mᵀ when TRANS), from the
    decayed operands the chunk computes anyway, qd = q⊙e^B and kd = k⊙e^{Bl − B}:
    e^{B_t − B_s} = e^{B_t}·e^{Bl − B_s}·e^{−Bl}, so M = qd·(kd·diag(e^{−Bl}))ᵀ. While every
    channel's chunk total Bl is at least −SAFE_DEPTH, qd and kd are normal numbers and no factor
    exceeds e^{SAFE_DEPTH}; a deeper chunk takes the exact row-by-row path, compiled in only for
    the sweeps that may take it (EXACT: the kernels' PATH, ``_run_rows``)."""
    if not EXACT or _depth(Bl) <= SAFE_DEPTH:
        kn = _gcast(kd * tl.exp(-Bl)[None, :], GATE_BF16)
        qg = _gcast(qd, GATE_BF16)
        if TRANS:
            M = tl.where(p[:, None] <= p[None, :], tl.dot(kn, tl.trans(qg), input_precision=DOT_PREC), 0.0)
        else:
            M = tl.where(p[None, :] <= p[:, None], tl.dot(qg, tl.trans(kn), input_precision=DOT_PREC), 0.0)
    else:
        M = _exact_scores(bq, bk, B, p, o_t, BT)
        if TRANS:
            M = tl.trans(M)
    return M


@triton.jit
def _apart(live, a, b, DOT_PREC: tl.constexpr):
    """tl.dot(a, b) for a ``live`` that is always true where it is called, so the product sits in a
    region of its own. Triton gives a product whose result feeds another product in its region
    all warps along M, to keep that result in registers; for a [32, 32] or [64, 64] product at
    8 warps that repeats every row block on several warps (the forward's [32, 32] scores: 44
    mma instructions a thread against 20). Apart it gets the default tiling."""
    if live:
        r = tl.dot(a, b, input_precision=DOT_PREC)
    else:
        r = tl.zeros([a.shape[0], b.shape[1]], dtype=tl.float32)
    return r


@triton.jit
def _run_rows(deep, row, n_chunks, EXACT: tl.constexpr):
    """(chunks this program runs, whether it writes its end results). From torch a pass launches
    twice: PATH "fast" takes the decayed products in every chunk of every row; "exact", launched
    after it, reruns only the (sequence, head) rows that ``deep`` flags and leaves the others'
    outputs as the fast launch wrote them. Keeping the exact path's code out of the fast launch
    keeps its registers for the fast sweep (ptxas for sm_90: the dq pass's fast sweep spills when
    both sweeps share one kernel). jax-triton hands every launch fresh output buffers, so from JAX
    a pass launches once with PATH "both": the fast sweep, and the exact one in flagged rows."""
    if EXACT:
        run = tl.load(deep + row) != 0
        return tl.where(run, n_chunks, 0), run
    else:
        return n_chunks, True


@triton.jit
def _ends_mask(m, ends, EXACT: tl.constexpr):
    """A store mask of a program's end results: m, and in the EXACT variant only for a rerun row
    (as an int product: the interpreter rejects a mask that ands a tensor with a scalar bool)."""
    if EXACT:
        return (m.to(tl.int32) * ends.to(tl.int32)) != 0
    else:
        return m


@triton.jit
def _depth(Bl):
    """The chunk's depth: minus its smallest per-channel total log gate."""
    return -tl.min(Bl, 0)


@triton.jit
def gla_prep_kernel(
    q, k, g, cu,
    T, H, HKV,
    qd, kd, bl,
    KD: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):
    """The decayed operands of every chunk at once, for the sweeps that take them ready-made (PRE):
    qd = q⊙e^B, kd = k⊙e^{Bl − B} [B, T, H, D] (per query head) and Bl into bl [slots, H, D] (slot
    ``_slot``). B is the inclusive cumulative log gate in processing order from the chunk start, so
    every factor is ≤ 1. Grid (P, N·H, cdiv(D, BD)): program (j, row, slice) takes the row's chunks
    j, j + P, … of its BD key channels; the chunks are independent, so this is the parallel part of
    the recurrence, taken out of the sequential sweeps."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t, p = _order(BT, REVERSE)
    o_k = tl.program_id(2) * BD + tl.arange(0, BD)
    m_k = o_k < KD
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bg = _load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        B = tl.cumsum(bg, 0, reverse=REVERSE)  # invalid rows hold g = 0
        Bl = tl.sum(bg, 0)
        bq = _load(q_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bk = _load(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
        _store(qd_base, rows, H * KD, o_k, valid, m_k, bq * tl.exp(B))
        _store(kd_base, rows, H * KD, o_k, valid, m_k, bk * tl.exp(Bl[None, :] - B))
        tl.store(bl + (_slot(bos, i_n, i_c, BT) * H + i_h) * KD + o_k, Bl, mask=m_k)


@triton.jit
def _fwd_sweep_pre(St, n_chunks, qd_base, kd_base, v_base, bl, o_base, bos, i_n, i_h, seq_len, o_t, p, o_k, o_v, m_k,
                   m_v, H, HKV, scale, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr,
                   REVERSE: tl.constexpr, DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr):
    """``_fwd_sweep`` on the decayed operands ``gla_prep_kernel`` wrote: the sweep keeps only what
    carries from chunk to chunk (the products and the state's decay), no cumulative sum and no
    per-element exponential. kn = kd⊙e^{−Bl} (= k⊙e^{−B}) comes from kd and the chunk's totals."""
    dt = v_base.dtype.element_ty
    worst = tl.zeros([BK], dtype=tl.float32)
    for i_c in range(0, n_chunks):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bqd = _load(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = _load(kd_base, rows, H * KD, o_k, valid, m_k)
        bv = _load(v_base, rows, HKV * VD, o_v, valid, m_v)
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        # carried state, decayed to each row: oᵀ = Sᵀ·qdᵀ
        acc = tl.dot(St.to(dt), tl.trans(bqd.to(dt)), input_precision=DOT_PREC)
        if n_chunks > 0:  # always: a region of its own gives the product its own warp tiling (_apart)
            kn = _gcast(bkd.to(tl.float32) * tl.exp(-Bl)[None, :], GATE_BF16)
            Mt = tl.where(p[:, None] <= p[None, :],
                          tl.dot(kn, tl.trans(_gcast(bqd, GATE_BF16)), input_precision=DOT_PREC), 0.0)
        else:
            Mt = tl.zeros([BT, BT], dtype=tl.float32)
        acc = tl.dot(tl.trans(bv), Mt.to(dt), acc, input_precision=DOT_PREC) * scale
        _store(o_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc))
        # Sᵀ ← Sᵀ·diag(e^{Bl}) + vᵀ·kd
        St = tl.dot(tl.trans(bv), bkd.to(dt), St * tl.exp(Bl)[None, :], input_precision=DOT_PREC)
        worst = tl.maximum(worst, -Bl)
    return St, worst


@triton.jit
def _fwd_sweep(St, n_chunks, q_base, k_base, v_base, g_base, o_base, seq_len, o_t, p, o_k, o_v, m_k, m_v, H, HKV, scale,
               KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr,
               DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, EXACT: tl.constexpr):
    """The forward's chunks in order from the state Sᵀ = St: writes o; returns the final Sᵀ and each
    key channel's deepest chunk. EXACT compiles in the exact path of chunks deeper than SAFE_DEPTH."""
    dt = q_base.dtype.element_ty
    worst = tl.zeros([BK], dtype=tl.float32)  # per channel: no cross-warp reduction in the loop
    for i_c in range(0, n_chunks):
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bq = _load(q_base, rows, H * KD, o_k, valid, m_k)
        bk = _load(k_base, rows, HKV * KD, o_k, valid, m_k)
        bv = _load(v_base, rows, HKV * VD, o_v, valid, m_v)
        bg = _load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        B, Bl = _log_gates(bg, p, DOT_PREC)
        qd = bq * tl.exp(B)  # every factor ≤ 1
        kd = bk * tl.exp(Bl[None, :] - B)
        # carried state, decayed to each row: oᵀ = Sᵀ·qdᵀ
        acc = tl.dot(St.to(dt), tl.trans(qd.to(dt)), input_precision=DOT_PREC)
        if n_chunks > 0:  # always: a region of its own gives the product its own warp tiling (_apart)
            Mt = _decayed_scores(qd, kd, bq, bk, B, Bl, p, o_t, True, GATE_BF16, DOT_PREC, SAFE_DEPTH, EXACT, BT)
        else:
            Mt = tl.zeros([BT, BT], dtype=tl.float32)
        acc = tl.dot(tl.trans(bv), Mt.to(dt), acc, input_precision=DOT_PREC) * scale
        _store(o_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc))
        # Sᵀ ← Sᵀ·diag(e^{Bl}) + vᵀ·kd
        St = tl.dot(tl.trans(bv), kd.to(dt), St * tl.exp(Bl)[None, :], input_precision=DOT_PREC)
        worst = tl.maximum(worst, -Bl)
    return St, worst


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_fwd_kernel(
    q, k, v, g, qd, kd, bl, h0, cu, deep,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht, deep_out,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, PATH: tl.constexpr,
    PRE: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """o (and S_T into ht) from q, g [B, T, H, D], k [B, T, HKV, D], v [B, T, HKV, E]; grid
    (cdiv(E, BS), N·H). BK is D padded to a power of two; SPLIT (= E) and SHAPE_BUCKET only steer
    autotuning. PRE: the fast sweep takes the decayed operands qd, kd and the chunk totals bl that
    ``gla_prep_kernel`` wrote at this BT (``_fwd_sweep_pre``); the exact sweep always starts from
    q, k and g. The rows with a chunk deeper than SAFE_DEPTH·BT/MAX_CHUNK are flagged in deep_out
    [N·H] (int32), so that no chunk of any pass (BT ≤ MAX_CHUNK) is deeper than SAFE_DEPTH in an
    unflagged row. ``PATH`` (``_run_rows``): "fast" sweeps every row without the exact path and
    writes the flags; "exact" resweeps the rows ``deep`` flags with it; "both" does both in one
    launch.

    Every product is transposed, as in the Lightning kernel's transposed pass: the state is held as
    Sᵀ [BS, BK] and the output chunk as oᵀ [BS, BT], so the value slice (all of E at BS = 128) is
    the M dimension of the big products, the two warpgroups split it, and q, k and g are loaded,
    cumulated and decayed once per head rather than once per E-slice."""
    (i_h, i_hk, bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, q_base, g_base, k_base, s_off,
     m_s) = _e_slice(q, g, k, cu, T, H, HKV, KD, VD, BK, BS, BT, REVERSE, IS_VARLEN)
    v_base = v + bos * (HKV * VD) + i_hk * VD
    o_base = o + bos * (H * VD) + i_h * VD
    S0 = tl.trans(_state_tile(h0, s_off, m_s, HAS_H0, BK, BS))
    n_run, ends = _run_rows(deep, tl.program_id(1), tl.cdiv(seq_len, BT), PATH == "exact")
    if PRE and PATH != "exact":
        i_n = tl.program_id(1) // H
        qd_base = qd + bos * (H * KD) + i_h * KD
        kd_base = kd + bos * (H * KD) + i_h * KD
        St, worst = _fwd_sweep_pre(S0, n_run, qd_base, kd_base, v_base, bl, o_base, bos, i_n, i_h, seq_len, o_t, p,
                                   o_k, o_v, m_k, m_v, H, HKV, scale, KD, VD, BK, BT, REVERSE, DOT_PREC, GATE_BF16)
    else:
        St, worst = _fwd_sweep(S0, n_run, q_base, k_base, v_base, g_base, o_base, seq_len, o_t, p, o_k, o_v, m_k, m_v,
                               H, HKV, scale, KD, VD, BK, BT, REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH,
                               PATH == "exact")
    is_deep = tl.max(worst, 0) > SAFE_DEPTH * BT / MAX_CHUNK
    if PATH == "both":
        if is_deep:
            xo_t, xp = _order(BOTH_EXACT_CHUNK, REVERSE)
            St, _ = _fwd_sweep(S0, tl.cdiv(seq_len, BOTH_EXACT_CHUNK), q_base, k_base, v_base, g_base, o_base, seq_len,
                               xo_t, xp, o_k, o_v, m_k, m_v, H, HKV, scale, KD, VD, BK, BOTH_EXACT_CHUNK, REVERSE,
                               DOT_PREC, GATE_BF16, SAFE_DEPTH, True)
    if STORE_HT:
        tl.store(ht + tl.trans(s_off), St, mask=_ends_mask(tl.trans(m_s), ends, PATH == "exact"))
    if PATH != "exact":
        tl.store(deep_out + tl.program_id(1), is_deep.to(tl.int32))


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
def _d_slice(cu, T, H, HKV, KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, BS: tl.constexpr,
             BT: tl.constexpr, REVERSE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of a D-sliced pass (grid (cdiv(D, BS), N·H)) works: its sequence, query and
    kv head, first row and length, the chunk rows' order, its BS key channels and BV value columns
    with their masks, and the offset and mask of its [BS, BV] state tile."""
    i_n, i_h, bos, seq_len = _sequence(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t, p = _order(BT, REVERSE)
    o_k = tl.program_id(0) * BS + tl.arange(0, BS)
    o_e = tl.arange(0, BV)
    m_k = o_k < KD
    m_e = o_e < VD
    s_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD) + o_k[:, None] * VD + o_e[None, :]
    return i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off, m_k[:, None] & m_e[None, :]


@triton.jit
def _q_sweep(S, n_chunks, k_base, v_base, g_base, do_base, dq_base, hc, bos, i_n, i_h, seq_len, o_t, p, o_k,
             o_e, m_k, m_e, m_s, H, HKV, scale, KD: tl.constexpr, VD: tl.constexpr, BS: tl.constexpr, BT: tl.constexpr,
             REVERSE: tl.constexpr, DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr,
             EXACT: tl.constexpr):
    """The dq pass's chunks in order from the state S: writes dq and each chunk's entry state into
    hc; returns the final S. EXACT compiles in the exact path of chunks deeper than SAFE_DEPTH."""
    dt = k_base.dtype.element_ty
    for i_c in range(0, n_chunks):
        tl.store(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), S.to(hc.dtype.element_ty), mask=m_s)
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        kt = _load_t(k_base, rows, HKV * KD, o_k, valid, m_k)
        gt = _load_t(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
        bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
        Bt, Bl = _log_gates_t(gt, p, DOT_PREC)
        kdt = kt * tl.exp(Bl[:, None] - Bt)
        acc = tl.dot(S.to(dt), tl.trans(bdo), input_precision=DOT_PREC)
        Wt = tl.where(p[:, None] <= p[None, :], _apart(n_chunks > 0, bv, tl.trans(bdo), DOT_PREC), 0.0)
        # the intra-chunk part apart from acc: Triton 3.6's pipeliner fails on a dot accumulating into
        # a loop value inside a branch
        if not EXACT or _depth(Bl) <= SAFE_DEPTH:
            knt = _gcast(kdt * tl.exp(-Bl)[:, None], GATE_BF16)
            intra = tl.dot(knt, _gcast(Wt, GATE_BF16), input_precision=DOT_PREC) * tl.exp(Bt)
        else:
            intra = tl.trans(_exact_apply(tl.trans(Wt), tl.trans(kt), tl.trans(Bt), p, o_t, 1.0, BT, BS))
        _store_t(dq_base, rows, H * KD, o_k, valid, m_k, (acc * tl.exp(Bt) + intra) * scale)
        S = tl.dot(kdt.to(dt), bv, S * tl.exp(Bl)[:, None], input_precision=DOT_PREC)
    return S


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_q_kernel(
    k, v, g, do, h0, dht, cu, deep,
    T, H, HKV, scale, SHAPE_BUCKET,
    dq, hc, gend,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, PATH: tl.constexpr,
    BT: tl.constexpr, BS: tl.constexpr,
):
    """dq for one D-slice of BS key channels, a forward sweep rebuilding S (its rows of this slice);
    grid (cdiv(D, BS), N·H). BV is E padded to a power of two. Also writes, for the dk/dg pass, the
    state entering every chunk into hc (input dtype, [(total rows) // BT + N, H, D, E]) and the dg
    just after the last row, rowsum(dS_T ⊙ S_T), into gend [N, H, D]. ``deep``: the forward's row
    flags, which ``PATH`` follows as in the forward.

    The chunk's k, g and dq are held transposed, [BS, BT] (key channels × rows), so the state
    slice's rows are the M dimension of every product and the gates act on the output's rows:
    dqᵀ = scale·e^{B}ᵀ⊙(S·doᵀ + knᵀ·Wᵀ), kn = k⊙e^{−B}, Wᵀ[s, t] = v_s·do_t for s ≤ t."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    dq_base = dq + bos * (H * KD) + i_h * KD
    S0 = _state_tile(h0, s_off, m_s, HAS_H0, BS, BV)
    n_run, ends = _run_rows(deep, tl.program_id(1), tl.cdiv(seq_len, BT), PATH == "exact")
    if PATH == "both":
        if tl.load(deep + tl.program_id(1)) != 0:
            S = _q_sweep(S0, n_run, k_base, v_base, g_base, do_base, dq_base, hc, bos, i_n, i_h, seq_len, o_t, p,
                         o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT, REVERSE, DOT_PREC, GATE_BF16,
                         SAFE_DEPTH, True)
        else:
            S = _q_sweep(S0, n_run, k_base, v_base, g_base, do_base, dq_base, hc, bos, i_n, i_h, seq_len, o_t, p,
                         o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT, REVERSE, DOT_PREC, GATE_BF16,
                         SAFE_DEPTH, False)
    else:
        S = _q_sweep(S0, n_run, k_base, v_base, g_base, do_base, dq_base, hc, bos, i_n, i_h, seq_len, o_t, p, o_k,
                     o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT, REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH,
                     PATH == "exact")
    gend_off = (i_n.to(tl.int64) * H + i_h) * KD + o_k
    if HAS_DHT:
        X = tl.load(dht + s_off, mask=m_s, other=0.0).to(tl.float32)
        tl.store(gend + gend_off, tl.sum(X * S, 1), mask=_ends_mask(m_k, ends, PATH == "exact"))
    else:
        tl.store(gend + gend_off, tl.zeros([BS], dtype=tl.float32), mask=_ends_mask(m_k, ends, PATH == "exact"))


@triton.jit
def _k_sweep(X, dg_end, n_chunks, q_base, k_base, v_base, g_base, do_base, dq_base, dk_base, dg_base, hc, bos, i_n, i_h,
             seq_len, o_t, p, o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD: tl.constexpr, VD: tl.constexpr,
             BS: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr, DOT_PREC: tl.constexpr,
             GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, EXACT: tl.constexpr):
    """The dk / dg pass's chunks from the last to the first, from the state gradient X and dg's
    value after the last row: writes dk and dg; returns the gradient of the initial state. EXACT
    compiles in the exact path of chunks deeper than SAFE_DEPTH."""
    dt = q_base.dtype.element_ty
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        qt = _load_t(q_base, rows, H * KD, o_k, valid, m_k)
        kt = _load_t(k_base, rows, HKV * KD, o_k, valid, m_k)
        gt = _load_t(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bv = _load(v_base, rows, HKV * VD, o_e, valid, m_e)
        bdo = _load(do_base, rows, H * VD, o_e, valid, m_e)
        # a scan here: the products' two extra [BS, BT] operand tiles spill in this, the widest pass
        Bt = tl.cumsum(gt, 1, reverse=REVERSE)
        Bl = tl.sum(gt, 1)
        qdt = qt * tl.exp(Bt) * scale
        ekt = tl.exp(Bl[:, None] - Bt)
        acc = tl.dot(X.to(dt), tl.trans(bv), input_precision=DOT_PREC)
        W = tl.where(p[:, None] >= p[None, :], _apart(n_chunks > 0, bdo, tl.trans(bv), DOT_PREC), 0.0)
        if not EXACT or _depth(Bl) <= SAFE_DEPTH:
            qnt = _gcast(qdt * tl.exp(-Bl)[:, None], GATE_BF16)
            intra = tl.dot(qnt, _gcast(W, GATE_BF16), input_precision=DOT_PREC) * ekt
        else:
            intra = scale * tl.trans(_exact_apply(tl.trans(W), tl.trans(qt), tl.trans(Bt), p, o_t, -1.0, BT, BS))
        acc = acc * ekt + intra
        _store_t(dk_base, rows, H * KD, o_k, valid, m_k, acc)
        X = tl.dot(qdt.to(dt), bdo, X * tl.exp(Bl)[:, None], input_precision=DOT_PREC)
        # X is now the gradient of the state entering the chunk: the first row's dg is rowsum(X ⊙ S_in)
        S_in = tl.load(_entry_state(hc, bos, i_n, i_c, i_h, H, KD, VD, o_k, o_e, BT), mask=m_s, other=0.0)
        dg_start = tl.sum(X * S_in.to(tl.float32), 1)
        dqt = _load_t(dq_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        dGt = qt.to(tl.float32) * dqt - kt.to(tl.float32) * acc
        n_valid = tl.minimum(seq_len - i_c * BT, BT).to(tl.float32)
        _store_t(dg_base, rows, H * KD, o_k, valid, m_k, _chunk_dg_t(dGt, dg_end, dg_start, p, n_valid, REVERSE))
        dg_end = dg_start
    return X


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_k_kernel(
    q, k, v, g, do, dht, cu, dq, hc, gend, deep,
    T, H, HKV, scale, SHAPE_BUCKET,
    dk, dg, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BV: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, PATH: tl.constexpr,
    BT: tl.constexpr, BS: tl.constexpr,
):
    """dk (per query head), dg and dh0 for one D-slice of BS key channels, a backward sweep carrying
    dS; grid (cdiv(D, BS), N·H), at the dq pass's BT (hc's slots follow it). dg from q⊙dq − k⊙dk
    in each chunk, pinned at both chunk ends by rowsum(dS ⊙ S) with the entry states in hc and the
    last row's end value in gend (``_chunk_dg_t``). ``PATH`` as in the dq pass.

    Transposed as the dq pass: dkᵀ = e^{Bl−B}ᵀ⊙(dS·vᵀ + scale·qnᵀ·W'), qn = q⊙e^{B−Bl},
    W'[t, s] = do_t·v_s for t ≥ s."""
    (i_n, i_h, i_hk, bos, seq_len, o_t, p, o_k, o_e, m_k, m_e, s_off,
     m_s) = _d_slice(cu, T, H, HKV, KD, VD, BV, BS, BT, REVERSE, IS_VARLEN)
    q_base = q + bos * (H * KD) + i_h * KD
    g_base = g + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    do_base = do + bos * (H * VD) + i_h * VD
    dq_base = dq + bos * (H * KD) + i_h * KD
    dk_base = dk + bos * (H * KD) + i_h * KD
    dg_base = dg + bos * (H * KD) + i_h * KD
    n_run, ends = _run_rows(deep, tl.program_id(1), tl.cdiv(seq_len, BT), PATH == "exact")
    X0 = _state_tile(dht, s_off, m_s, HAS_DHT, BS, BV)
    dg_end = tl.load(gend + (i_n.to(tl.int64) * H + i_h) * KD + o_k, mask=m_k, other=0.0)
    if PATH == "both":
        if tl.load(deep + tl.program_id(1)) != 0:
            X = _k_sweep(X0, dg_end, n_run, q_base, k_base, v_base, g_base, do_base, dq_base, dk_base, dg_base, hc,
                         bos, i_n, i_h, seq_len, o_t, p, o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT,
                         REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH, True)
        else:
            X = _k_sweep(X0, dg_end, n_run, q_base, k_base, v_base, g_base, do_base, dq_base, dk_base, dg_base, hc,
                         bos, i_n, i_h, seq_len, o_t, p, o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT,
                         REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH, False)
    else:
        X = _k_sweep(X0, dg_end, n_run, q_base, k_base, v_base, g_base, do_base, dq_base, dk_base, dg_base, hc, bos,
                     i_n, i_h, seq_len, o_t, p, o_k, o_e, m_k, m_e, m_s, H, HKV, scale, KD, VD, BS, BT, REVERSE,
                     DOT_PREC, GATE_BF16, SAFE_DEPTH, PATH == "exact")
    if HAS_H0:
        tl.store(dh0 + s_off, X, mask=_ends_mask(m_s, ends, PATH == "exact"))


@triton.jit
def _v_sweep(Xt, n_chunks, q_base, k_base, g_base, do_base, dv_base, seq_len, o_t, p, o_k, o_v, m_k, m_v, H, HKV, scale,
             KD: tl.constexpr, VD: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr, DOT_PREC: tl.constexpr,
             GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, EXACT: tl.constexpr):
    """The dv pass's chunks from the last to the first, from dSᵀ = Xt: writes dv. EXACT compiles in
    the exact path of chunks deeper than SAFE_DEPTH."""
    dt = q_base.dtype.element_ty
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bq = _load(q_base, rows, H * KD, o_k, valid, m_k)
        bk = _load(k_base, rows, HKV * KD, o_k, valid, m_k)
        bg = _load(g_base, rows, H * KD, o_k, valid, m_k).to(tl.float32)
        bdo = _load(do_base, rows, H * VD, o_v, valid, m_v)
        B, Bl = _log_gates(bg, p, DOT_PREC)
        qd = bq * tl.exp(B)
        kd = bk * tl.exp(Bl[None, :] - B)
        acc = tl.dot(Xt.to(dt), tl.trans(kd.to(dt)), input_precision=DOT_PREC)
        if n_chunks > 0:  # always: as the forward's scores
            M = _decayed_scores(qd, kd, bq, bk, B, Bl, p, o_t, False, GATE_BF16, DOT_PREC, SAFE_DEPTH, EXACT,
                                BT) * scale
        else:
            M = tl.zeros([BT, BT], dtype=tl.float32)
        acc = tl.dot(tl.trans(bdo), M.to(dt), acc, input_precision=DOT_PREC)
        _store(dv_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc))
        Xt = tl.dot(tl.trans(bdo), (qd * scale).to(dt), Xt * tl.exp(Bl)[None, :], input_precision=DOT_PREC)


@triton.jit
def _v_sweep_pre(Xt, n_chunks, qd_base, kd_base, do_base, dv_base, bl, bos, i_n, i_h, seq_len, o_t, p, o_k, o_v, m_k,
                 m_v, H, scale, KD: tl.constexpr, VD: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr,
                 DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr):
    """``_v_sweep`` on the forward's decayed operands (``gla_prep_kernel``). It carries
    Y = dSᵀ/scale, so that the state update accumulates doᵀ·qd in place, with no rounding of
    scale·qd: dvᵀ = scale·(Y·kdᵀ + doᵀ·M), M the unscaled intra-chunk scores."""
    dt = do_base.dtype.element_ty
    Y = Xt / scale
    for i_r in range(0, n_chunks):
        i_c = n_chunks - 1 - i_r
        rows, valid = _chunk_rows(seq_len, i_c, o_t, p, BT, REVERSE)
        bqd = _load(qd_base, rows, H * KD, o_k, valid, m_k)
        bkd = _load(kd_base, rows, H * KD, o_k, valid, m_k)
        bdo = _load(do_base, rows, H * VD, o_v, valid, m_v)
        Bl = _chunk_totals(bl, bos, i_n, i_c, i_h, H, KD, o_k, m_k, BT)
        acc = tl.dot(Y.to(dt), tl.trans(bkd.to(dt)), input_precision=DOT_PREC)
        if n_chunks > 0:  # always: as the forward's scores
            kn = _gcast(bkd.to(tl.float32) * tl.exp(-Bl)[None, :], GATE_BF16)
            M = tl.where(p[None, :] <= p[:, None],
                         tl.dot(_gcast(bqd, GATE_BF16), tl.trans(kn), input_precision=DOT_PREC), 0.0)
        else:
            M = tl.zeros([BT, BT], dtype=tl.float32)
        acc = tl.dot(tl.trans(bdo), M.to(dt), acc, input_precision=DOT_PREC)
        _store(dv_base, rows, H * VD, o_v, valid, m_v, tl.trans(acc * scale))
        Y = tl.dot(tl.trans(bdo), bqd.to(dt), Y * tl.exp(Bl)[None, :], input_precision=DOT_PREC)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def gla_bwd_v_kernel(
    q, k, g, qd, kd, bl, do, dht, cu, deep,
    T, H, HKV, scale, SHAPE_BUCKET,
    dv,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, GATE_BF16: tl.constexpr, SAFE_DEPTH: tl.constexpr, PATH: tl.constexpr,
    PRE: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr,
):
    """dv (per query head) for one E-slice, backward sweep with dS held transposed, dSᵀ [BS, D];
    grid (cdiv(E, BS), N·H). dv_s = dS_sᵀ k_s = Σ_{t≥s} M_ts·scale·do_t + (dS carried)ᵀ(k_s⊙e^{Bl − B_s}):
    the forward's transposed pass run backwards, dvᵀ = dSᵀ·kdᵀ + scale·doᵀ·M. ``PATH`` as in the dq
    pass; PRE as in the forward (the forward's qd, kd and bl, ``_v_sweep_pre``)."""
    (i_h, i_hk, bos, seq_len, o_t, p, o_k, o_v, m_k, m_v, q_base, g_base, k_base, s_off,
     m_s) = _e_slice(q, g, k, cu, T, H, HKV, KD, VD, BK, BS, BT, REVERSE, IS_VARLEN)
    do_base = do + bos * (H * VD) + i_h * VD
    dv_base = dv + bos * (H * VD) + i_h * VD
    X0 = tl.trans(_state_tile(dht, s_off, m_s, HAS_DHT, BK, BS))
    n_run, _ = _run_rows(deep, tl.program_id(1), tl.cdiv(seq_len, BT), PATH == "exact")
    i_n = tl.program_id(1) // H
    qd_base = qd + bos * (H * KD) + i_h * KD
    kd_base = kd + bos * (H * KD) + i_h * KD
    if PATH == "both":
        if tl.load(deep + tl.program_id(1)) != 0:
            xo_t, xp = _order(BOTH_EXACT_CHUNK, REVERSE)
            _v_sweep(X0, tl.cdiv(seq_len, BOTH_EXACT_CHUNK), q_base, k_base, g_base, do_base, dv_base, seq_len,
                     xo_t, xp, o_k, o_v, m_k, m_v, H, HKV, scale, KD, VD, BOTH_EXACT_CHUNK, REVERSE, DOT_PREC,
                     GATE_BF16, SAFE_DEPTH, True)
        elif PRE:
            _v_sweep_pre(X0, n_run, qd_base, kd_base, do_base, dv_base, bl, bos, i_n, i_h, seq_len, o_t, p, o_k, o_v,
                         m_k, m_v, H, scale, KD, VD, BT, REVERSE, DOT_PREC, GATE_BF16)
        else:
            _v_sweep(X0, n_run, q_base, k_base, g_base, do_base, dv_base, seq_len, o_t, p, o_k, o_v, m_k, m_v, H, HKV,
                     scale, KD, VD, BT, REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH, False)
    elif PRE and PATH == "fast":
        _v_sweep_pre(X0, n_run, qd_base, kd_base, do_base, dv_base, bl, bos, i_n, i_h, seq_len, o_t, p, o_k, o_v, m_k,
                     m_v, H, scale, KD, VD, BT, REVERSE, DOT_PREC, GATE_BF16)
    else:
        _v_sweep(X0, n_run, q_base, k_base, g_base, do_base, dv_base, seq_len, o_t, p, o_k, o_v, m_k, m_v, H, HKV,
                 scale, KD, VD, BT, REVERSE, DOT_PREC, GATE_BF16, SAFE_DEPTH, PATH == "exact")


# Autotuned launchers on a GPU (the fast launches), and one-config launchers of the exact reruns;
# under the interpreter autotune cannot run ("0 active drivers"), so the launchers run the plain
# kernels with configs.INTERP_CONFIG.
_KEY = ["KD", "VD", "SHAPE_BUCKET"]
if INTERPRET:
    gla_fwd = gla_bwd_q = gla_bwd_k = gla_bwd_v = None
    gla_fwd_exact = gla_bwd_q_exact = gla_bwd_k_exact = gla_bwd_v_exact = None
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
    gla_fwd_exact = triton.autotune(configs=exact_configs(EXACT_FWD_CONFIG), key=_KEY)(gla_fwd_kernel)
    gla_bwd_q_exact = triton.autotune(configs=exact_configs(EXACT_BWD_QK_CONFIG), key=_KEY)(gla_bwd_q_kernel)
    gla_bwd_k_exact = triton.autotune(configs=exact_configs(EXACT_BWD_QK_CONFIG), key=_KEY)(gla_bwd_k_kernel)
    gla_bwd_v_exact = triton.autotune(configs=exact_configs(EXACT_BWD_V_CONFIG), key=_KEY)(gla_bwd_v_kernel)
