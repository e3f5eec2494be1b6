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
are passed as any placeholder pointer; constexpr flags keep them untouched.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# TR=3 configs make tensor descriptors on the device: they need tl.make_tensor_descriptor and
# Triton's global-scratch allocator (set by ops.ensure_allocator before each launch).
try:
    from triton.runtime import _allocation as _triton_allocation
except ImportError:  # an older Triton
    _triton_allocation = None
# LIGHTNING_TRITON_TMA=0 (read at import) keeps them out of the autotune lists.
# LIGHTNING_TRITON_WS=1 (read at import; a dev probe, off by default) asks Triton to warp-specialize
# the transposed pass's chunk loop (tl.range(warp_specialize=True)).
WS_LOOP = tl.constexpr(os.environ.get("LIGHTNING_TRITON_WS", "0").strip() == "1")
TMA_OK = (hasattr(tl, "make_tensor_descriptor") and _triton_allocation is not None
          and hasattr(_triton_allocation, "_allocator") and hasattr(_triton_allocation, "NullAllocator")
          and os.environ.get("LIGHTNING_TRITON_TMA", "1").strip() != "0")


# Host-side launch arithmetic shared by the torch, jax-triton and look-back launchers. Plain Python:
# triton.cdiv / next_power_of_2 are ConstexprFunctions costing ~5 µs a call on the host (triton
# 3.9), and at n <= 1024 a torch fwd+bwd is host-bound.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2(x: int) -> int:
    """max(16, next power of two >= x): the padded width of a head dim."""
    return max(16, 1 << (int(x) - 1).bit_length())


FEW_ROWS = 64  # fewer (sequence, head) rows than this: a grid that leaves most SMs idle


def shape_bucket(t: int, rows: int = 128) -> int:
    """Autotune key bucket of a launch shape: the sequence length (0 short ≤ 1024, 1 medium ≤ 4096,
    2 long), plus 3 when the grid has few (sequence, head) rows (N·H < FEW_ROWS). Why both: the tuned
    config is reused for every launch with the same key, and a config tuned on a small grid (a
    gradient check at B2 H8, 16 rows) lost 1.4-2x at B4 H32 in the same process (results/h200/s5c)."""
    return (0 if t <= 1024 else (1 if t <= 4096 else 2)) + (3 if rows < FEW_ROWS else 0)


def long_sequence(bucket: int) -> bool:
    """Whether a shape bucket is of the long sequences (> 4096 tokens)."""
    return bucket % 3 == 2


@triton.jit
def _sequence(cu_ptr, g_ptr, i_nh, T, H, IS_VARLEN: tl.constexpr):
    """(sequence index, head, first row, length, log decay γ) of the program row i_nh = n·H + h."""
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int64)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
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
    DOT_PREC: tl.constexpr, PROBE: tl.constexpr = 0,
):
    # PROBE (bound analysis only, wrong results; 0 = the real pass, code identical):
    # 1 SKIP_INTRA (no a·bᵀ / P·c dots), 2 SKIP_STATE (no a·S, no state update),
    # 3 STREAM_ONLY (load a, b, c; store a+b+c), 4 NO_DECAY (no per-chunk exp / mask multiply)
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
        if PROBE == 3:
            acc = c.to(tl.float32) + tl.sum(a.to(tl.float32) + b.to(tl.float32), 1)[:, None]
        elif PROBE == 4:
            acc = tl.dot(a, S.to(dt), input_precision=DOT_PREC)
            s = tl.dot(a, tl.trans(b), input_precision=DOT_PREC)
            acc = tl.dot(s.to(dt), c, acc, input_precision=DOT_PREC)
            S = tl.dot(tl.trans(b), c, S, input_precision=DOT_PREC)
        else:
            # carried state, decayed p+1 steps: (diag(qd)·a)·S = diag(qd)·(a·S), a straight from smem
            if PROBE == 2:
                acc = tl.zeros([BT, BV], dtype=tl.float32)
            else:
                acc = tl.dot(a, S.to(dt), input_precision=DOT_PREC) * qd[:, None]
            if PROBE != 1:
                # intra-chunk quadratic part, accumulated onto the state part
                s = tl.dot(a, tl.trans(b), input_precision=DOT_PREC)
                s = s * m_intra * (out_scale * k_scale)
                acc = tl.dot(s.to(dt), c, acc, input_precision=DOT_PREC)
            if PROBE != 2:
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
    DOT_PREC: tl.constexpr, DECAY_ON_B: tl.constexpr = False, PROBE: tl.constexpr = 0,
    TMA: tl.constexpr = False,
):
    """_chunk_pass with every product transposed: the state is held as Sᵀ [BV, BK] and the output
    chunk as outᵀ [BV, BT], so the value slice (BV, e.g. all 128 of E) is the M dimension of the
    three big products. Why: with BV = 128 and 8 warps the two warpgroups split M (no duplicated
    64-row products, the reason BV = 128 lost in _chunk_pass), q and k are read once per head
    instead of once per E-slice, and Sᵀ feeds outᵀ = Sᵀ·aᵀ straight from registers (no bf16 copy of
    the state stored to shared memory each chunk). Same arithmetic, same decays, same results.

    TMA: the chunk tiles move by tensor descriptors (made on the device; the launch needs Triton's
    global-scratch allocator) instead of per-element pointers, which take ~150 of the ~710
    instructions per thread and chunk. The caller (_chunk_pass) sets it only where a descriptor's
    zero fill outside [0, T) is the pass's row mask: one sequence per batch row (not varlen), KD a
    power of two (BK = KD), whole BV slices of VD; and never under a PROBE."""
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
    for i_c in tl.range(0, n_chunks, warp_specialize=WS_LOOP):
        if PROBE == 5:  # COMPUTE_ONLY (bound analysis, wrong results): every chunk re-reads chunk 0
            rows, valid, n_valid = _chunk_rows(seq_len, 0, o_t, p, BT, REVERSE)
        else:
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
        if DECAY_ON_B:  # cᵀ straight from shared memory as the A operand, the scaled b stored for B
            bw = (b * kd[:, None]).to(dt)
            St = tl.dot(tl.trans(c), bw, St * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
        else:
            cw = (c * kd[:, None]).to(dt)
            St = tl.dot(tl.trans(cw), b, St * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
        out = tl.trans(acc).to(o_ptr.dtype.element_ty)
        if TMA:
            o_desc.store([i_n, t0, o_col], out.reshape(1, BT, BV))
        else:
            o_ptrs = o_base + rows[:, None] * o_row + o_v[None, :]
            if PROBE == 5:  # one output store, at the last chunk
                if i_c == n_chunks - 1:
                    tl.store(o_ptrs, out, mask=valid[:, None] & m_v[None, :])
            else:
                tl.store(o_ptrs, out, mask=valid[:, None] & m_v[None, :])
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
    DOT_PREC: tl.constexpr, PROBE: tl.constexpr = 0, TR: tl.constexpr = 0,
):
    """The chunk pass in the orientation TR picks (a tuning choice: same arithmetic, same results):
    0 row-wise (_chunk_pass_n), 1 transposed (_chunk_pass_t), 2 transposed with the update's decay
    on b instead of c, 3 transposed with tensor-descriptor (TMA) loads and stores where they apply."""
    if TR:
        _chunk_pass_t(a_ptr, b_ptr, c_ptr, o_ptr, h0_ptr, ht_ptr, g_ptr, cu_ptr, T, H, A_H, B_H, C_H,
                      out_scale, k_scale, i_v, i_nh, KD, VD, BK, BV, BT, REVERSE, HAS_H0, H0_TRANS,
                      STORE_HT, BWD_STATE, IS_VARLEN, DOT_PREC, TR == 2, PROBE,
                      TR == 3 and PROBE == 0 and not IS_VARLEN and KD == BK and VD % BV == 0)
    else:
        _chunk_pass_n(a_ptr, b_ptr, c_ptr, o_ptr, h0_ptr, ht_ptr, g_ptr, cu_ptr, T, H, A_H, B_H, C_H,
                      out_scale, k_scale, i_v, i_nh, KD, VD, BK, BV, BT, REVERSE, HAS_H0, H0_TRANS,
                      STORE_HT, BWD_STATE, IS_VARLEN, DOT_PREC, PROBE)


# (BT, BV, num_warps, num_stages). Seen in the sm_90 compiler report (bf16, D=E=128): BT=64 with
# 8 warps duplicates the chained 64-row dots across the two warpgroups; BV=64 with 4 warps spills
# a little; (64, 32, 4, 2) uses 201 registers and 77 KB of shared memory (two programs per SM).
# Measured on the H200 (bench/NOTES-triton.md, n=8192 fwd): (64,64,4,2) 0.41 ms, (64,32,4,3) 0.47,
# (64,128,8,2) 0.54, (64,32,4,2) 0.59, (128,64,8,2) 0.59; (64,64,8,2) 0.77, (64,16,4,3) 0.79,
# (128,32,8,2) 0.84, (64,16,4,2) 0.90 were dropped. Session 4 (results/h200/s4a): (64,64,4,3) lost to
# (64,64,4,2) (n=32768 fwd 2.11 vs 1.98 ms); (64,128,8,2), (128,64,8,2), (64,32,4,2), (64,32,4,4) dropped
# from the forward's list with it (the transposed configs below cover BV=128).
FWD_CONFIGS = [(64, 32, 4, 3), (64, 64, 4, 2)]
BWD_CONFIGS = [(64, 32, 4, 2), (64, 32, 4, 3), (64, 64, 4, 2)]
# Transposed pass (_chunk_pass_t): (BT, BV, num_warps, num_stages, TR). sm_90 AOT (triton 3.9, bf16
# D=E=128, fwd): (64,128,8,2) 242 regs, 96 KB smem; (64,128,8,3) 254, 144 KB; (64,128,8,4) 255, 192 KB;
# (64,64,4,2) 255, 80 KB; no spill. H200 do_bench, one run (results/h200/s4a/triton_tr_dev.json), ms at
# n=32768 fwd: row-wise (64,64,4,2) 1.984, transposed (64,128,8,3) 1.700, (64,128,8,4) 1.700,
# (64,64,4,2) 1.887, (64,128,8,2) 2.090; backward passes dq / dk / dv: row-wise 1.99 / 1.87 / 1.88,
# transposed (64,128,8,3) 1.69 / 1.79 / 1.79. BT=32 and 16 warps lost everywhere.
# TR=3 (transposed + tensor-descriptor loads / stores; sm_90 AOT: (64,128,8,3) 238 regs, 160 KB smem;
# (64,128,8,4) 238, 208 KB; loop body 710 -> 640 PTX instructions). H200 do_bench, one run
# (results/h200/s4f), n=32768: fwd TR=1 (64,128,8,3) 1.675 ms, TR=3 (64,128,8,3) 1.546, (64,128,8,4)
# 1.539, (64,128,8,2) 2.088; bwd passes TR=1 1.66 / 1.79 / 1.79, TR=3 1.61 / 1.68 / 1.65; outputs
# bit-identical to TR=1. Pruned up to 4096 tokens (see _prune). Session 5 (results/h200/s5a), n=32768
# fwd: TR=3 (64,128,8,3) 1.554 ms, (64,128,8,4) 1.611, (64,64,4,2) 1.768 (two programs per SM),
# (128,128,8,2) 2.671 (520 B spill); the compute chain alone (PROBE=5) 1.32 ms.
FWD_CONFIGS_T = [(64, 128, 8, 3, 1), (64, 128, 8, 4, 1), (64, 128, 8, 3, 2), (64, 64, 4, 2, 1),
                 (64, 128, 8, 3, 3), (64, 128, 8, 4, 3)]
BWD_CONFIGS_T = [(64, 128, 8, 3, 1), (64, 128, 8, 3, 2), (64, 64, 4, 2, 1), (64, 128, 8, 3, 3)]
INTERP_CONFIG = (32, 32, 4, 1)
# fused dk+dv pass: (BT, num_warps, num_stages); BV is fixed by the caller (ops.FUSED_BV), BV=E=128
# at D=E=128. sm_90 AOT report (bf16, BV 128, all at 255 regs): (64,8,2) 316 B spill, 160 KB smem;
# (64,8,1) 404 B, 96 KB; (32,8,2) 348 B, 68 KB; (32,4,2) 816 B, 66 KB; (64,4,2) 760 B (dropped).
# TRANS=True (transposed products) spilled more in every config (564 B at (64,8,2)): not tuned.
FUSED_CONFIGS = [(64, 8, 2), (64, 8, 1), (32, 8, 2), (32, 4, 2)]
# TRANS=True configs (BT, num_warps, num_stages, TMA): the transposed products (the value slice as M,
# as in _chunk_pass_t). sm_90 AOT (triton 3.9, bf16 D=E=128, no dS_T): pointer tiles (64,8,2) 255 regs
# + 728 B stack; tensor-descriptor tiles (TMA) (64,8,2) 255 + 304 B, (64,8,3) 255 + 296 B, 229 KB smem.
# H200 do_bench, one run (results/h200/s5a), dk+dv in ms at n=8192 / 32768: split passes TR=3
# (64,128,8,3) 0.855 / 3.41; fused TMA (64,8,3) 0.860 / 3.37, (64,8,2) 0.980 / 3.84; fused pointer
# tiles (64,8,3) 1.50 / 5.98. One fused chain takes as long as the two it replaces: the path stays opt-in.
FUSED_CONFIGS_T = [(64, 8, 3, False), (64, 8, 2, False), (64, 8, 2, True), (64, 8, 3, True)]


def _configs(table, table_t=()):
    """Autotune configs: the row-wise table (TR=0) and the transposed one (TR from the tuple)."""
    if INTERPRET:
        table, table_t = [INTERP_CONFIG], ()
    rows = [(bt, bv, w, s, 0) for bt, bv, w, s in table] + list(table_t)
    return [triton.Config({"BT": bt, "BV": bv, "TR": tr}, num_warps=w, num_stages=s) for bt, bv, w, s, tr in rows]


def _descriptors_pay(allargs) -> bool:
    """Whether the tensor-descriptor configs may run for these launch arguments: descriptors need
    16-byte-aligned bases; and up to 4096 tokens (not long_sequence) a torch call is host-bound, where
    the scratch allocation each descriptor launch makes costs more than it saves (results/h200/s4e
    vs s4f: fwd+bwd at n=512 0.22 vs 0.46 ms, device gain ~3-8 % at n=32768)."""
    tensors = [a for a in allargs.values() if hasattr(a, "data_ptr")]
    return (TMA_OK and long_sequence(allargs.get("SHAPE_BUCKET", 2))
            and not any(a.data_ptr() % 16 for a in tensors))


def _prune_fused(configs, named_args, **kwargs):
    """The fused dk+dv pass's autotune list: the descriptor configs only where _descriptors_pay."""
    if _descriptors_pay({**named_args, **kwargs}):
        return configs
    return [c for c in configs if not c.kwargs.get("TMA")] or configs[:1]


def _prune(configs, named_args, **kwargs):
    """Drop configs whose BV is wider than the split dimension needs (pointless duplicates).

    The constexprs arrive in kwargs (triton 3.6) or in named_args, depending on the version.
    """
    allargs = {**named_args, **kwargs}
    if "VD" not in allargs or "KD" not in allargs:
        return configs
    split = allargs["VD"]
    role = allargs.get("ROLE", 2)
    if role in (0, 1):  # dq / dk split D
        split = allargs["KD"]
    elif role == 3:  # all three passes in one launch: the wider of D and E
        split = max(allargs["KD"], allargs["VD"])
    keep = [c for c in configs if c.kwargs["BV"] <= pow2(split)]
    if not _descriptors_pay(allargs):
        keep = [c for c in keep if c.kwargs.get("TR") != 3]
    if role == 3:  # three passes in one kernel: a transposed BV=128 config needs > 228 KB of smem
        keep = [c for c in keep if not (c.kwargs.get("TR") and c.kwargs["BV"] > 64)]
    return keep or configs[:1]


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def lightning_fwd_kernel(
    q, k, v, h0, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    o, ht,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, PROBE: tl.constexpr = 0,
    TR: tl.constexpr = 0,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    _chunk_pass(q, k, v, o, h0, ht, g, cu, T, H, H, HKV, HKV, scale, 1.0, i_v, i_nh,
                KD, VD, BK, BV, BT, REVERSE, HAS_H0, False, STORE_HT, False, IS_VARLEN, DOT_PREC, PROBE, TR)


@triton.jit
def _bwd_role(
    q, k, v, do, h0, dht, g, cu, T, H, HKV, scale, dx, dh0, i_v, i_nh,
    KD: tl.constexpr, VD: tl.constexpr, BKD: tl.constexpr, BVD: tl.constexpr, ROLE: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TR: tl.constexpr = 0,
    PROBE: tl.constexpr = 0,
):
    """One backward pass as a chunk pass: ROLE 0 writes dq, 1 dk, 2 dv (and dh0) into dx.
    PROBE as in _chunk_pass (bound analysis only; 0 = the real pass)."""
    if ROLE == 0:
        _chunk_pass(do, v, k, dx, h0, h0, g, cu, T, H, H, HKV, HKV, scale, 1.0, i_v, i_nh,
                    VD, KD, BVD, BV, BT, REVERSE, HAS_H0, True, False, False, IS_VARLEN, DOT_PREC, PROBE, TR)
    elif ROLE == 1:
        _chunk_pass(v, do, q, dx, dht, dht, g, cu, T, H, HKV, H, H, 1.0, scale, i_v, i_nh,
                    VD, KD, BVD, BV, BT, not REVERSE, HAS_DHT, True, False, True, IS_VARLEN, DOT_PREC, PROBE, TR)
    else:
        _chunk_pass(k, q, do, dx, dht, dh0, g, cu, T, H, HKV, H, H, 1.0, scale, i_v, i_nh,
                    KD, VD, BKD, BV, BT, not REVERSE, HAS_DHT, False, HAS_H0, True, IS_VARLEN, DOT_PREC, PROBE, TR)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def lightning_bwd_kernel(
    q, k, v, do, h0, dht, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    dx, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BKD: tl.constexpr, BVD: tl.constexpr, ROLE: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TR: tl.constexpr = 0,
    PROBE: tl.constexpr = 0,
):
    """One backward pass: ROLE 0 writes dq, 1 dk, 2 dv (and dh0); dx is that output.

    KD = D (q/k head dim), VD = E (v head dim); BKD/BVD their padded powers of two. The three
    passes are independent (each recomputes its state on the fly), one launch each.
    """
    _bwd_role(q, k, v, do, h0, dht, g, cu, T, H, HKV, scale, dx, dh0, tl.program_id(0), tl.program_id(1),
              KD, VD, BKD, BVD, ROLE, REVERSE, HAS_H0, HAS_DHT, IS_VARLEN, DOT_PREC, BT, BV, TR, PROBE)


@triton.jit(do_not_specialize=["SHAPE_BUCKET"])
def lightning_bwd_one_kernel(
    q, k, v, do, h0, dht, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET,
    dq, dk, dv, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BKD: tl.constexpr, BVD: tl.constexpr, ROLE: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, TR: tl.constexpr = 0,
):
    """The three backward passes of lightning_bwd_kernel in ONE launch: grid
    (cdiv(max(D, E), BV), N·H, 3), program_id(2) picks the pass (0 dq, 1 dk, 2 dv + dh0); slices
    past a pass's own split width (D ≠ E) do nothing. ROLE must be 3 (it tells the config pruner
    that BV splits max(D, E)).

    Why: at small n the backward is host-bound (one launch instead of three), and the three
    passes share the GPU instead of running one after the other (3× the programs of one pass:
    at n = 512, B4 H32 one pass has 256 programs for 132 SMs).
    """
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    role = tl.program_id(2)
    if role == 0:
        if i_v * BV < KD:
            _bwd_role(q, k, v, do, h0, dht, g, cu, T, H, HKV, scale, dq, dh0, i_v, i_nh,
                      KD, VD, BKD, BVD, 0, REVERSE, HAS_H0, HAS_DHT, IS_VARLEN, DOT_PREC, BT, BV, TR)
    elif role == 1:
        if i_v * BV < KD:
            _bwd_role(q, k, v, do, h0, dht, g, cu, T, H, HKV, scale, dk, dh0, i_v, i_nh,
                      KD, VD, BKD, BVD, 1, REVERSE, HAS_H0, HAS_DHT, IS_VARLEN, DOT_PREC, BT, BV, TR)
    else:
        if i_v * BV < VD:
            _bwd_role(q, k, v, do, h0, dht, g, cu, T, H, HKV, scale, dv, dh0, i_v, i_nh,
                      KD, VD, BKD, BVD, 2, REVERSE, HAS_H0, HAS_DHT, IS_VARLEN, DOT_PREC, BT, BV, TR)


@triton.jit
def _dkdv_pass(
    q_ptr, k_ptr, v_ptr, do_ptr, dht_ptr, dh0_ptr, g_ptr, cu_ptr, dk_ptr, dv_ptr,
    T, H, HKV, scale, dk_slice_stride, i_v, i_nh,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr,
    BACK: tl.constexpr, HAS_DHT: tl.constexpr, STORE_DH0: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, TRANS: tl.constexpr, TMA: tl.constexpr = False,
):
    """Fused dk + dv: one pass opposite the forward's direction holding P[:, BV slice of E] (fp32).

    Per chunk, with the carried P (before this chunk's update) and the same decays as the split
    passes:  dv[:, slice] = diag(λ^{p+shift})·(k·P) + ((k·qᵀ)⊙M·scale)·dO[:, slice]   (complete)
             dk_part      = diag(λ^{p+shift})·(v_s·P_sᵀ) + ((v_s·dO_sᵀ)⊙M·scale)·q    (linear in
    the slice: dk = Σ over E-slices; with one slice (BV ≥ E) it is dk itself).
    dk_part of slice i_v goes to dk_ptr + i_v·dk_slice_stride.

    TMA (transposed products only): the four input tiles and the two output tiles move by
    device-side tensor descriptors instead of per-element pointers, whose address registers made the
    pointer version spill. The caller (lightning_bwd_dkdv_kernel) sets it only where the zero fill
    outside [0, T) is the row mask: not varlen, KD a power of two, one slice (BV = VD).
    """
    i_n, i_h, bos, seq_len, gam = _sequence(cu_ptr, g_ptr, i_nh, T, H, IS_VARLEN)
    o_t, o_k, o_v, m_k, m_v, p, pf, m_intra = _chunk_layout(gam, i_v, KD, VD, BK, BV, BT, BACK)
    m_intra = m_intra * scale

    i_hk = i_h // (H // HKV)
    q_base = q_ptr + bos * (H * KD) + i_h * KD
    k_base = k_ptr + bos * (HKV * KD) + i_hk * KD
    v_base = v_ptr + bos * (HKV * VD) + i_hk * VD
    do_base = do_ptr + bos * (H * VD) + i_h * VD
    dv_base = dv_ptr + bos * (H * VD) + i_h * VD
    dk_base = dk_ptr + i_v.to(tl.int64) * dk_slice_stride + bos * (H * KD) + i_h * KD

    state_off, s_idx, m_s = _state_index(i_n, i_h, H, o_k, o_v, m_k, m_v, KD, VD, False)
    if HAS_DHT:
        P = tl.load(dht_ptr + state_off + s_idx, mask=m_s, other=0.0).to(tl.float32)
    else:
        P = tl.zeros([BK, BV], dtype=tl.float32)

    dt = q_ptr.dtype.element_ty
    n_chunks = tl.cdiv(seq_len, BT)
    qd_first = tl.exp(gam * pf)
    lam = tl.exp(gam)
    if TMA:
        # [batch, T, heads·dim] views; rows outside [0, T) read as zeros and are not written
        q_desc = tl.make_tensor_descriptor(q_ptr, shape=[i_n + 1, T, H * KD], strides=[T * H * KD, H * KD, 1],
                                           block_shape=[1, BT, BK])
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[i_n + 1, T, HKV * KD], strides=[T * HKV * KD, HKV * KD, 1],
                                           block_shape=[1, BT, BK])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[i_n + 1, T, HKV * VD], strides=[T * HKV * VD, HKV * VD, 1],
                                           block_shape=[1, BT, BV])
        do_desc = tl.make_tensor_descriptor(do_ptr, shape=[i_n + 1, T, H * VD], strides=[T * H * VD, H * VD, 1],
                                            block_shape=[1, BT, BV])
        dk_desc = tl.make_tensor_descriptor(dk_ptr, shape=[i_n + 1, T, H * KD], strides=[T * H * KD, H * KD, 1],
                                            block_shape=[1, BT, BK])
        dv_desc = tl.make_tensor_descriptor(dv_ptr, shape=[i_n + 1, T, H * VD], strides=[T * H * VD, H * VD, 1],
                                            block_shape=[1, BT, BV])
    for i_c in range(0, n_chunks):
        rows, valid, n_valid = _chunk_rows(seq_len, i_c * BT, o_t, p, BT, BACK)
        m_rk = valid[:, None] & m_k[None, :]
        m_rv = valid[:, None] & m_v[None, :]
        if TMA:
            t0 = _chunk_start(seq_len, i_c * BT, BT, BACK)
            q = q_desc.load([i_n, t0, i_h * KD]).reshape(BT, BK)
            k = k_desc.load([i_n, t0, i_hk * KD]).reshape(BT, BK)
            v = v_desc.load([i_n, t0, i_hk * VD]).reshape(BT, BV)
            do = do_desc.load([i_n, t0, i_h * VD]).reshape(BT, BV)
        else:
            q = _load_rows(q_base, rows, H * KD, o_k, valid, m_k)
            k = _load_rows(k_base, rows, HKV * KD, o_k, valid, m_k)
            v = _load_rows(v_base, rows, HKV * VD, o_v, valid, m_v)
            do = tl.load(do_base + rows[:, None] * (H * VD) + o_v[None, :], mask=m_rv, other=0.0)
        shift, qd = _out_decay(i_c, gam, pf, qd_first, lam, 1.0, True)
        Pb = P.to(dt)
        if TRANS:
            # the same products transposed: every big dot has M = D or E (128), not BT, so with 8
            # warps the two warpgroups split the rows instead of both holding the [BT, 128] tiles
            m_t = tl.trans(m_intra)
            st = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * m_t
            acc = tl.dot(tl.trans(Pb), tl.trans(k), input_precision=DOT_PREC) * qd[None, :]
            acc = tl.dot(tl.trans(do), st.to(dt), acc, input_precision=DOT_PREC)
            if TMA:
                dv_desc.store([i_n, t0, i_h * VD], tl.trans(acc).to(dv_ptr.dtype.element_ty).reshape(1, BT, BV))
            else:
                tl.store(dv_base + rows[None, :] * (H * VD) + o_v[:, None], acc.to(dv_ptr.dtype.element_ty),
                         mask=tl.trans(m_rv))
            s2t = tl.dot(do, tl.trans(v), input_precision=DOT_PREC) * m_t
            acc2 = tl.dot(Pb, tl.trans(v), input_precision=DOT_PREC) * qd[None, :]
            acc2 = tl.dot(tl.trans(q), s2t.to(dt), acc2, input_precision=DOT_PREC)
            if TMA:
                dk_desc.store([i_n, t0, i_h * KD], tl.trans(acc2).to(dk_ptr.dtype.element_ty).reshape(1, BT, BK))
            else:
                tl.store(dk_base + rows[None, :] * (H * KD) + o_k[:, None], acc2.to(dk_ptr.dtype.element_ty),
                         mask=tl.trans(m_rk))
        else:
            # dv (complete for this slice of E)
            acc = tl.dot(k, Pb, input_precision=DOT_PREC) * qd[:, None]
            s = tl.dot(k, tl.trans(q), input_precision=DOT_PREC) * m_intra
            acc = tl.dot(s.to(dt), do, acc, input_precision=DOT_PREC)
            tl.store(dv_base + rows[:, None] * (H * VD) + o_v[None, :], acc.to(dv_ptr.dtype.element_ty), mask=m_rv)
            # dk, this slice's share
            acc2 = tl.dot(v, tl.trans(Pb), input_precision=DOT_PREC) * qd[:, None]
            s2 = tl.dot(v, tl.trans(do), input_precision=DOT_PREC) * m_intra
            acc2 = tl.dot(s2.to(dt), q, acc2, input_precision=DOT_PREC)
            tl.store(dk_base + rows[:, None] * (H * KD) + o_k[None, :], acc2.to(dk_ptr.dtype.element_ty), mask=m_rk)
        # P = λ^L·P + qᵀ·diag(λ^(L−1−p))·dO·scale
        kd = tl.where(valid, tl.exp(gam * tl.maximum(n_valid - 1 - pf, 0.0)), 0.0) * scale
        dow = (do * kd[:, None]).to(dt)
        P = tl.dot(tl.trans(q), dow, P * tl.exp(gam * (n_valid - 1 + shift)), input_precision=DOT_PREC)
    if STORE_DH0:
        P = P * tl.exp(gam * tl.where(n_chunks > 0, 1.0, 0.0))
        tl.store(dh0_ptr + state_off + s_idx, P, mask=m_s)


@triton.jit(do_not_specialize=["SHAPE_BUCKET", "DK_STRIDE"])
def lightning_bwd_dkdv_kernel(
    q, k, v, do, dht, g, cu,
    T, H, HKV, scale, SHAPE_BUCKET, DK_STRIDE,
    dk, dv, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BKD: tl.constexpr,
    REVERSE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, IS_VARLEN: tl.constexpr,
    DOT_PREC: tl.constexpr, BV: tl.constexpr, BT: tl.constexpr, TRANS: tl.constexpr = False,
    TMA: tl.constexpr = False,
):
    """Fused backward for dk and dv (+dh0); grid (cdiv(E, BV), N·H). BV is chosen by the caller
    (it fixes the dk partial buffer: DK_STRIDE elements between slices), BT/warps/stages tuned.
    TMA asks for tensor-descriptor tiles; they are used only where they apply (see _dkdv_pass)."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    _dkdv_pass(q, k, v, do, dht, dh0, g, cu, dk, dv, T, H, HKV, scale, DK_STRIDE, i_v, i_nh,
               KD, VD, BKD, BV, BT, not REVERSE, HAS_DHT, HAS_H0, IS_VARLEN, DOT_PREC, TRANS,
               TMA and TRANS and not IS_VARLEN and KD == BKD and VD == BV)


# Autotuned launchers on a GPU; under the interpreter autotune cannot run ("0 active drivers"),
# so the wrappers launch the plain kernels with the single fixed config of _fwd_configs().
if INTERPRET:
    lightning_fwd = lightning_bwd = lightning_bwd_one = lightning_bwd_dkdv = None
else:
    _prune_by = {"early_config_prune": _prune}
    lightning_fwd = triton.autotune(configs=_configs(FWD_CONFIGS, FWD_CONFIGS_T), key=["KD", "VD", "SHAPE_BUCKET"],
                                    prune_configs_by=_prune_by)(lightning_fwd_kernel)
    lightning_bwd = triton.autotune(configs=_configs(BWD_CONFIGS, BWD_CONFIGS_T), key=["KD", "VD", "SHAPE_BUCKET", "ROLE"],
                                    prune_configs_by=_prune_by)(lightning_bwd_kernel)
    lightning_bwd_one = triton.autotune(configs=_configs(BWD_CONFIGS, BWD_CONFIGS_T), key=["KD", "VD", "SHAPE_BUCKET"],
                                        prune_configs_by=_prune_by)(lightning_bwd_one_kernel)
    lightning_bwd_dkdv = triton.autotune(
        configs=[triton.Config({"BT": bt, "TRANS": tr, "TMA": tma}, num_warps=w, num_stages=st)
                 for bt, w, st, tr, tma in [c + (False, False) for c in FUSED_CONFIGS]
                 + [(bt, w, st, True, tma) for bt, w, st, tma in FUSED_CONFIGS_T]],
        key=["KD", "VD", "SHAPE_BUCKET", "BV"], prune_configs_by={"early_config_prune": _prune_fused},
    )(lightning_bwd_dkdv_kernel)
