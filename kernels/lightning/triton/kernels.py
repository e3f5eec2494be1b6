"""Triton kernels of Lightning Attention (chunked, Lightning Attention-2 form).

One generic chunk pass does all the work. For an ordered sequence of tokens it runs the
recurrence ``S_p = exp(γ)·S_{p−1} + k_scale·b_p c_pᵀ`` (state ``S ∈ R^{KD×VD}``, fp32, kept in
registers for the whole sequence) and writes ``out_p = out_scale·S_pᵀ a_p``, chunk by chunk:
inside a chunk of BT tokens the quadratic form on tensor cores, across chunks the state.
A program owns one (sequence, head) and one BV-wide slice of the VD columns, so nothing but the
inputs and the outputs touches device memory (no per-chunk states).

The four uses (forward op in time direction R):
  forward  a=q  b=k  c=v   out=o   state S  [D,E], init S_0,     direction R
  dq       a=dO b=v  c=k   out=dq  state Sᵀ [E,D], init S_0ᵀ,    direction R
  dk       a=v  b=dO c=q   out=dk  state Pᵀ [E,D], init dS_Tᵀ,   direction not R, k_scale=scale
  dv       a=k  b=q  c=dO  out=dv  state P  [D,E], init dS_T,    direction not R, k_scale=scale,
                                                     final state ·exp(γ) = dS_0
with P_j = Σ_{t≥j} λ^{t−j} scale q_t dO_tᵀ + λ^{T−1−j} dS_T, dk_j = P_j v_j, dv_j = P_jᵀ k_j.
The backward's initial state enters one decay step "late" (λ^{T−1−j}, not λ^{T−j}):
BWD_STATE shifts the exponent of the first chunk by one instead of dividing by λ.

All tensors are contiguous ``[B, T, heads, dim]``; strides are derived from the shapes, and the
kernels take inputs, then scalars, then outputs (jax-triton appends output pointers last), so the
same kernels launch from torch and from jax-triton. Absent optional tensors (h0, dS_T, cu_seqlens)
are passed as any placeholder pointer; constexpr flags keep them untouched. The launch configs
(BT, BV, warps, stages, orientation TR) and their autotune key live in ``configs``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .configs import (BWD_CONFIGS, BWD_CONFIGS_T, FWD_CONFIGS, FWD_CONFIGS_T, INTERPRET, autotune_configs,
                      prune_configs)


@triton.jit
def _sequence(cu_ptr, g_ptr, i_nh, T, H, IS_VARLEN: tl.constexpr):
    """(sequence index, head, first row, length, log decay γ) of the program row i_nh = n·H + h."""
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        # clamped to [0, T]: offsets are not checked on the host when they live on the device
        bos = tl.minimum(tl.maximum(tl.load(cu_ptr + i_n).to(tl.int64), 0), T)
        eos = tl.minimum(tl.maximum(tl.load(cu_ptr + i_n + 1).to(tl.int64), bos), T)
    else:
        bos = i_n.to(tl.int64) * T
        eos = bos + T
    seq_len = (eos - bos).to(tl.int32)
    gam = tl.load(g_ptr + i_h).to(tl.float32)
    return i_n, i_h, bos, seq_len, gam


@triton.jit
def _chunk_layout(gam, i_v, KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                  BT: tl.constexpr, BACK: tl.constexpr):
    """Loop invariants of a chunk pass: row offsets, the KD lanes and this program's BV slice of the
    VD lanes with their masks, the processing-order position p (pf in fp32) of each row of a chunk
    (rows are loaded in ascending address order; BACK mirrors them), and the intra-chunk decay mask
    exp(γ·(p_r − p_s)) for p_s ≤ p_r."""
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < KD
    m_v = o_v < VD
    if BACK:
        p = BT - 1 - o_t
    else:
        p = o_t
    pf = p.to(tl.float32)
    diff = pf[:, None] - pf[None, :]
    m_intra = tl.where(diff >= 0, tl.exp(gam * tl.maximum(diff, 0.0)), 0.0)
    return o_t, o_k, o_v, m_k, m_v, p, pf, m_intra


@triton.jit
def _out_decay(i_c, gam, pf, qd_first, lam, out_scale, BWD_STATE: tl.constexpr):
    """(shift, qd) of chunk i_c: the carried state reaches row p decayed λ^(p+shift)·out_scale, with
    shift 1, except in a backward pass's first chunk (BWD_STATE: the initial state enters one step
    late, shift 0). BWD_STATE takes the loop-invariant qd_first = λ^p·out_scale and lam = λ and a
    scalar select, not BT exponentials per chunk (and no division by λ, which underflows)."""
    if BWD_STATE:
        return tl.where(i_c > 0, 1.0, 0.0), qd_first * tl.where(i_c > 0, lam, 1.0)
    else:
        return 1.0, tl.exp(gam * (pf + 1.0)) * out_scale


@triton.jit
def _chunk_start(T, ps, BT: tl.constexpr, BACK: tl.constexpr):
    """First row (lowest address) of the BT-row chunk at processing position ps of a sequence of T
    tokens; walking backwards (BACK) it is below row 0 for a last, partial chunk."""
    if BACK:
        return T - ps - BT
    else:
        return ps


@triton.jit
def _chunk_rows(T, ps, o_t, p, BT: tl.constexpr, BACK: tl.constexpr):
    """The chunk at processing position ps of a sequence of T tokens: its rows (ascending
    addresses), which of them are valid, and how many."""
    n_valid = tl.minimum(T - ps, BT)
    return _chunk_start(T, ps, BT, BACK) + o_t, p < n_valid, n_valid


@triton.jit
def _load_rows(base, rows, row_stride, lanes, valid, m_lanes):
    """A [rows, lanes] tile, zero outside the valid rows and the lanes."""
    return tl.load(base + rows[:, None] * row_stride + lanes[None, :], mask=valid[:, None] & m_lanes[None, :],
                   other=0.0)


@triton.jit
def _state_index(i_n, i_h, H, o_k, o_v, m_k, m_v, KD: tl.constexpr, VD: tl.constexpr, TRANS: tl.constexpr):
    """Offset of this (sequence, head)'s [KD, VD] fp32 state in an [N, H, KD, VD] tensor, the
    element index of this program's [BK, BV] tile in it (TRANS: the tensor holds the transpose),
    and the tile's mask."""
    state_off = i_n.to(tl.int64) * (H * KD * VD) + i_h * (KD * VD)
    if TRANS:
        s_idx = o_k[:, None] + o_v[None, :] * KD
    else:
        s_idx = o_k[:, None] * VD + o_v[None, :]
    return state_off, s_idx, m_k[:, None] & m_v[None, :]


@triton.jit
def _pass_bases(a_ptr, b_ptr, c_ptr, o_ptr, bos, i_h, H, A_H, B_H, C_H, KD: tl.constexpr, VD: tl.constexpr):
    """Row strides of a, b, c (A_H / B_H / C_H heads: GQA maps query head i_h onto theirs) and of the
    output (H heads), and the pointers to this (sequence, head)'s first row of each."""
    a_row = A_H * KD
    b_row = B_H * KD
    c_row = C_H * VD
    o_row = H * VD
    a_base = a_ptr + bos * a_row + (i_h // (H // A_H)) * KD
    b_base = b_ptr + bos * b_row + (i_h // (H // B_H)) * KD
    c_base = c_ptr + bos * c_row + (i_h // (H // C_H)) * VD
    o_base = o_ptr + bos * o_row + i_h * VD
    return a_row, b_row, c_row, o_row, a_base, b_base, c_base, o_base


@triton.jit
def _chunk_pass_n(
    a_ptr, b_ptr, c_ptr, o_ptr, h0_ptr, ht_ptr, g_ptr, cu_ptr,
    T, H, A_H, B_H, C_H,
    out_scale, k_scale,
    i_v, i_nh,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, H0_TRANS: tl.constexpr,
    STORE_HT: tl.constexpr, BWD_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """The chunk pass row-wise: state S [BK, BV], output chunk [BT, BV]."""
    i_n, i_h, bos, seq_len, gam = _sequence(cu_ptr, g_ptr, i_nh, T, H, IS_VARLEN)
    o_t, o_k, o_v, m_k, m_v, p, pf, m_intra = _chunk_layout(gam, i_v, KD, VD, BK, BV, BT, REVERSE)

    a_row, b_row, c_row, o_row, a_base, b_base, c_base, o_base = _pass_bases(
        a_ptr, b_ptr, c_ptr, o_ptr, bos, i_h, H, A_H, B_H, C_H, KD, VD)

    state_off, s_idx, m_s = _state_index(i_n, i_h, H, o_k, o_v, m_k, m_v, KD, VD, H0_TRANS)
    if HAS_H0:
        S = tl.load(h0_ptr + state_off + s_idx, mask=m_s, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)

    dt = a_ptr.dtype.element_ty
    n_chunks = tl.cdiv(seq_len, BT)
    qd_first = tl.exp(gam * pf) * out_scale
    lam = tl.exp(gam)
    for i_c in range(0, n_chunks):
        rows, valid, n_valid = _chunk_rows(seq_len, i_c * BT, o_t, p, BT, REVERSE)
        a = _load_rows(a_base, rows, a_row, o_k, valid, m_k)
        b = _load_rows(b_base, rows, b_row, o_k, valid, m_k)
        c = _load_rows(c_base, rows, c_row, o_v, valid, m_v)
        shift, qd = _out_decay(i_c, gam, pf, qd_first, lam, out_scale, BWD_STATE)
        # carried state, decayed p+1 steps: (diag(qd)·a)·S = diag(qd)·(a·S), a straight from smem
        acc = tl.dot(a, S.to(dt), input_precision=DOT_PREC) * qd[:, None]
        # intra-chunk quadratic part, accumulated onto the state part
        s = tl.dot(a, tl.trans(b), input_precision=DOT_PREC)
        s = s * m_intra * (out_scale * k_scale)
        acc = tl.dot(s.to(dt), c, acc, input_precision=DOT_PREC)
        # state update: S·λ^L + bᵀ·diag(λ^(L−1−p))·c, the decay put on c (the narrower operand)
        kd = tl.where(valid, tl.exp(gam * tl.maximum(n_valid - 1 - pf, 0.0)), 0.0) * k_scale
        cw = (c * kd[:, None]).to(dt)
        S = tl.dot(tl.trans(b), cw, S * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
        tl.store(o_base + rows[:, None] * o_row + o_v[None, :], acc.to(o_ptr.dtype.element_ty),
                 mask=valid[:, None] & m_v[None, :])
    if STORE_HT:
        if BWD_STATE:
            S = S * tl.exp(gam * tl.where(n_chunks > 0, 1.0, 0.0))
        tl.store(ht_ptr + state_off + s_idx, S, mask=m_s)


@triton.jit
def _chunk_pass_t(
    a_ptr, b_ptr, c_ptr, o_ptr, h0_ptr, ht_ptr, g_ptr, cu_ptr,
    T, H, A_H, B_H, C_H,
    out_scale, k_scale,
    i_v, i_nh,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, H0_TRANS: tl.constexpr,
    STORE_HT: tl.constexpr, BWD_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, DECAY_ON_B: tl.constexpr, TMA: tl.constexpr,
):
    """The chunk pass with every product transposed: the state is held as Sᵀ [BV, BK] and the
    output chunk as outᵀ [BV, BT], so the value slice (BV, e.g. all 128 of E) is the M dimension of
    the three big products. Why: with BV = 128 and 8 warps the two warpgroups split M (no duplicated
    64-row products, which is why BV = 128 does not pay in _chunk_pass_n), q and k are read once per
    head instead of once per E-slice, and Sᵀ feeds outᵀ = Sᵀ·aᵀ straight from registers (no bf16
    copy of the state stored to shared memory each chunk). Same arithmetic, same results.

    DECAY_ON_B: the state update scales b instead of c (cᵀ straight from shared memory as the A
    operand). TMA: the chunk tiles move by tensor descriptors (made on the device; the launch needs
    Triton's global-scratch allocator) instead of per-element pointers, whose address arithmetic is
    about a fifth of the loop's instructions. The caller (_chunk_pass) sets it only where a
    descriptor's zero fill outside [0, T) is the pass's row mask: one sequence per batch row (not
    varlen), KD a power of two (BK = KD), whole BV slices of VD."""
    i_n, i_h, bos, seq_len, gam = _sequence(cu_ptr, g_ptr, i_nh, T, H, IS_VARLEN)
    o_t, o_k, o_v, m_k, m_v, p, pf, m_intra = _chunk_layout(gam, i_v, KD, VD, BK, BV, BT, REVERSE)
    m_intra_t = tl.trans(m_intra) * (out_scale * k_scale)  # [s, r]

    a_row, b_row, c_row, o_row, a_base, b_base, c_base, o_base = _pass_bases(
        a_ptr, b_ptr, c_ptr, o_ptr, bos, i_h, H, A_H, B_H, C_H, KD, VD)

    state_off, s_idx, m_s = _state_index(i_n, i_h, H, o_k, o_v, m_k, m_v, KD, VD, H0_TRANS)
    s_idx_t = tl.trans(s_idx)
    m_s_t = tl.trans(m_s)
    if HAS_H0:
        St = tl.load(h0_ptr + state_off + s_idx_t, mask=m_s_t, other=0.0).to(tl.float32)
    else:
        St = tl.zeros([BV, BK], dtype=tl.float32)

    dt = a_ptr.dtype.element_ty
    n_chunks = tl.cdiv(seq_len, BT)
    qd_first = tl.exp(gam * pf) * out_scale
    lam = tl.exp(gam)
    if TMA:
        # [batch, T, heads·dim] views; rows outside [0, T) read as zeros and are not written
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[i_n + 1, T, a_row], strides=[T * a_row, a_row, 1],
                                           block_shape=[1, BT, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[i_n + 1, T, b_row], strides=[T * b_row, b_row, 1],
                                           block_shape=[1, BT, BK])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[i_n + 1, T, c_row], strides=[T * c_row, c_row, 1],
                                           block_shape=[1, BT, BV])
        o_desc = tl.make_tensor_descriptor(o_ptr, shape=[i_n + 1, T, o_row], strides=[T * o_row, o_row, 1],
                                           block_shape=[1, BT, BV])
        a_col = (i_h // (H // A_H)) * KD
        b_col = (i_h // (H // B_H)) * KD
        c_col = (i_h // (H // C_H)) * VD + i_v * BV
        o_col = i_h * VD + i_v * BV
    for i_c in range(0, n_chunks):
        rows, valid, n_valid = _chunk_rows(seq_len, i_c * BT, o_t, p, BT, REVERSE)
        if TMA:
            t0 = _chunk_start(seq_len, i_c * BT, BT, REVERSE)
            a = a_desc.load([i_n, t0, a_col]).reshape(BT, BK)
            b = b_desc.load([i_n, t0, b_col]).reshape(BT, BK)
            c = c_desc.load([i_n, t0, c_col]).reshape(BT, BV)
        else:
            a = _load_rows(a_base, rows, a_row, o_k, valid, m_k)
            b = _load_rows(b_base, rows, b_row, o_k, valid, m_k)
            c = _load_rows(c_base, rows, c_row, o_v, valid, m_v)
        shift, qd = _out_decay(i_c, gam, pf, qd_first, lam, out_scale, BWD_STATE)
        # carried state: outᵀ = (Sᵀ·aᵀ)·diag(qd)
        acc = tl.dot(St.to(dt), tl.trans(a), input_precision=DOT_PREC) * qd[None, :]
        # intra-chunk: outᵀ += cᵀ·((b·aᵀ)⊙Mᵀ)
        st = tl.dot(b, tl.trans(a), input_precision=DOT_PREC) * m_intra_t
        acc = tl.dot(tl.trans(c), st.to(dt), acc, input_precision=DOT_PREC)
        # state update: Sᵀ·λ^L + cᵀ·diag(λ^(L−1−p))·b
        kd = tl.where(valid, tl.exp(gam * tl.maximum(n_valid - 1 - pf, 0.0)), 0.0) * k_scale
        if DECAY_ON_B:
            bw = (b * kd[:, None]).to(dt)
            St = tl.dot(tl.trans(c), bw, St * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
        else:
            cw = (c * kd[:, None]).to(dt)
            St = tl.dot(tl.trans(cw), b, St * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
        out = tl.trans(acc).to(o_ptr.dtype.element_ty)
        if TMA:
            o_desc.store([i_n, t0, o_col], out.reshape(1, BT, BV))
        else:
            tl.store(o_base + rows[:, None] * o_row + o_v[None, :], out, mask=valid[:, None] & m_v[None, :])
    if STORE_HT:
        if BWD_STATE:
            St = St * tl.exp(gam * tl.where(n_chunks > 0, 1.0, 0.0))
        tl.store(ht_ptr + state_off + s_idx_t, St, mask=m_s_t)


@triton.jit
def _chunk_pass(
    a_ptr, b_ptr, c_ptr, o_ptr, h0_ptr, ht_ptr, g_ptr, cu_ptr,
    T, H, A_H, B_H, C_H,
    out_scale, k_scale,
    i_v, i_nh,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, H0_TRANS: tl.constexpr,
    STORE_HT: tl.constexpr, BWD_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, TR: tl.constexpr,
):
    """One chunk pass (see the module docstring) in the orientation TR picks, a tuning choice with
    the same arithmetic and results: 0 row-wise (_chunk_pass_n), 1 transposed (_chunk_pass_t),
    2 transposed with the update's decay on b, 3 transposed with tensor-descriptor loads and stores
    where they apply.

    a, b, c: the pass's operands (A_H, B_H, C_H heads; GQA maps query head i_h onto theirs), o its
    output (H heads); h0 the initial state (HAS_H0; H0_TRANS: stored transposed), ht where the final
    state goes (STORE_HT); BWD_STATE: a backward pass (the initial state enters one step late, the
    final state is decayed once more). T, H: sequence length (or the packed length, IS_VARLEN) and
    query heads; i_v, i_nh: this program's BV slice and (sequence, head) row."""
    if TR:
        _chunk_pass_t(
            a_ptr=a_ptr, b_ptr=b_ptr, c_ptr=c_ptr, o_ptr=o_ptr, h0_ptr=h0_ptr, ht_ptr=ht_ptr, g_ptr=g_ptr,
            cu_ptr=cu_ptr, T=T, H=H, A_H=A_H, B_H=B_H, C_H=C_H, out_scale=out_scale, k_scale=k_scale,
            i_v=i_v, i_nh=i_nh, KD=KD, VD=VD, BK=BK, BV=BV, BT=BT, REVERSE=REVERSE, HAS_H0=HAS_H0,
            H0_TRANS=H0_TRANS, STORE_HT=STORE_HT, BWD_STATE=BWD_STATE, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC,
            DECAY_ON_B=TR == 2, TMA=TR == 3 and not IS_VARLEN and KD == BK and VD % BV == 0)
    else:
        _chunk_pass_n(
            a_ptr=a_ptr, b_ptr=b_ptr, c_ptr=c_ptr, o_ptr=o_ptr, h0_ptr=h0_ptr, ht_ptr=ht_ptr, g_ptr=g_ptr,
            cu_ptr=cu_ptr, T=T, H=H, A_H=A_H, B_H=B_H, C_H=C_H, out_scale=out_scale, k_scale=k_scale,
            i_v=i_v, i_nh=i_nh, KD=KD, VD=VD, BK=BK, BV=BV, BT=BT, REVERSE=REVERSE, HAS_H0=HAS_H0,
            H0_TRANS=H0_TRANS, STORE_HT=STORE_HT, BWD_STATE=BWD_STATE, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC)


@triton.jit(do_not_specialize=["T", "SHAPE_BUCKET"])
def lightning_fwd_kernel(
    q, k, v, h0, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TR: tl.constexpr,
):
    """The forward: o (and the final state ht) from q [B, T, H, D], k [B, T, HKV, D], v
    [B, T, HKV, E]; grid (cdiv(E, BV), N·H). KD = D, VD = E, BK the padded D; SHAPE_BUCKET is only
    the autotune key (configs.shape_bucket)."""
    _chunk_pass(
        a_ptr=q, b_ptr=k, c_ptr=v, o_ptr=o, h0_ptr=h0, ht_ptr=ht, g_ptr=g, cu_ptr=cu,
        T=T, H=H, A_H=H, B_H=HKV, C_H=HKV, out_scale=scale, k_scale=1.0,
        i_v=tl.program_id(0), i_nh=tl.program_id(1),
        KD=KD, VD=VD, BK=BK, BV=BV, BT=BT, REVERSE=REVERSE, HAS_H0=HAS_H0, H0_TRANS=False,
        STORE_HT=STORE_HT, BWD_STATE=False, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC, TR=TR)


@triton.jit(do_not_specialize=["T", "SHAPE_BUCKET"])
def lightning_bwd_kernel(
    q, k, v, do, h0, dht, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    dx, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BKD: tl.constexpr, BVD: tl.constexpr, ROLE: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TR: tl.constexpr,
):
    """One backward pass: ROLE 0 writes dq, 1 dk, 2 dv and dh0; dx is that output (per query head).

    KD = D (q/k head dim), VD = E (v head dim); BKD/BVD their padded powers of two. The three
    passes are independent (each recomputes its state on the fly), one launch each; grid
    (cdiv(split, BV), N·H) with split = D for dq and dk, E for dv.
    """
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    if ROLE == 0:  # dq: state Sᵀ [E, D] from S_0, in the forward's direction
        _chunk_pass(
            a_ptr=do, b_ptr=v, c_ptr=k, o_ptr=dx, h0_ptr=h0, ht_ptr=h0, g_ptr=g, cu_ptr=cu,
            T=T, H=H, A_H=H, B_H=HKV, C_H=HKV, out_scale=scale, k_scale=1.0, i_v=i_v, i_nh=i_nh,
            KD=VD, VD=KD, BK=BVD, BV=BV, BT=BT, REVERSE=REVERSE, HAS_H0=HAS_H0, H0_TRANS=True,
            STORE_HT=False, BWD_STATE=False, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC, TR=TR)
    elif ROLE == 1:  # dk: state Pᵀ [E, D] from dS_Tᵀ, against the forward's direction
        _chunk_pass(
            a_ptr=v, b_ptr=do, c_ptr=q, o_ptr=dx, h0_ptr=dht, ht_ptr=dht, g_ptr=g, cu_ptr=cu,
            T=T, H=H, A_H=HKV, B_H=H, C_H=H, out_scale=1.0, k_scale=scale, i_v=i_v, i_nh=i_nh,
            KD=VD, VD=KD, BK=BVD, BV=BV, BT=BT, REVERSE=not REVERSE, HAS_H0=HAS_DHT, H0_TRANS=True,
            STORE_HT=False, BWD_STATE=True, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC, TR=TR)
    else:  # dv and dh0: state P [D, E] from dS_T, against the forward's direction
        _chunk_pass(
            a_ptr=k, b_ptr=q, c_ptr=do, o_ptr=dx, h0_ptr=dht, ht_ptr=dh0, g_ptr=g, cu_ptr=cu,
            T=T, H=H, A_H=HKV, B_H=H, C_H=H, out_scale=1.0, k_scale=scale, i_v=i_v, i_nh=i_nh,
            KD=KD, VD=VD, BK=BKD, BV=BV, BT=BT, REVERSE=not REVERSE, HAS_H0=HAS_DHT, H0_TRANS=False,
            STORE_HT=HAS_H0, BWD_STATE=True, IS_VARLEN=IS_VARLEN, DOT_PREC=DOT_PREC, TR=TR)


# Autotuned launchers on a GPU; under the interpreter autotune cannot run ("0 active drivers"),
# so the launchers run the plain kernels with configs.INTERP_CONFIG.
if INTERPRET:
    lightning_fwd = lightning_bwd = None
else:
    lightning_fwd = triton.autotune(configs=autotune_configs(FWD_CONFIGS, FWD_CONFIGS_T),
                                    key=["KD", "VD", "SHAPE_BUCKET"],
                                    prune_configs_by={"early_config_prune": prune_configs})(lightning_fwd_kernel)
    lightning_bwd = triton.autotune(configs=autotune_configs(BWD_CONFIGS, BWD_CONFIGS_T),
                                    key=["KD", "VD", "SHAPE_BUCKET", "ROLE"],
                                    prune_configs_by={"early_config_prune": prune_configs})(lightning_bwd_kernel)
