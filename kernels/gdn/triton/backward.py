"""Triton kernels of the gated delta rule's backward, chunked in the WY form of ``kernels.py``.

Per chunk entered with state S (notation of ``kernels.py``; X_u = β ⊙ V, X_w = β e^G ⊙ K,
(I + A)[u | w] = [X_u | X_w], ν = u − w S, γ = G_last), with dO and the cotangent dS' of the
state leaving the chunk:

    dν  = scale·((Q Kᵀ) ⊙ M)ᵀ dO + (e^{γ−G} ⊙ K) dS'
    dS  = e^γ dS' + scale·Qᵀ(e^G ⊙ dO) − wᵀ dν                       (the state entering the chunk)
    dQ  = scale·e^G ⊙ (dO Sᵀ) + W K,          W = scale·(dO νᵀ) ⊙ M
    dK  = Wᵀ Q + e^{γ−G} ⊙ (ν dS'ᵀ)  + the WY terms below
    du  = dν,   dw = −dν Sᵀ
    dX  = (I + A)⁻ᵀ d[u | w],   dA = −(dX_u uᵀ + dX_w wᵀ) on A's strict lower triangle
    dV  = β ⊙ dX_u,   dβ = Σ_e dX_u ⊙ V + e^G Σ_d dX_w ⊙ K + Σ_j (dA ⊙ A)_ij / β_i
    dK += β e^G ⊙ dX_w + β ⊙ (P K) + Pᵀ(β ⊙ K),   P = dA ⊙ e^{G_i − G_j}

and the cumulative gate's cotangent dG (every e^{G} above, A's decays, γ's terms), from which
dg is its suffix sum inside the chunk (G is the prefix sum of g); the pair terms (the decays
e^{G_i − G_j}) are summed straight into dg, over the positions between their two ends.

Two launches:
  gdn_bwd_state_kernel  a reverse sweep per (value-column slice, sequence·head) carrying dS
                        [BK, BV] in fp32 registers from the forward's chunk-entry states hc: dν,
                        and each slice's share of dQ, dK's sweep terms, dw and dg (the host sums
                        the slices), and dh0
  gdn_bwd_wy_kernel     parallel over chunks: (I + A)⁻¹ again, the WY terms, dV, dβ, dK and dg

Products take operands in the input dtype (fp32 inputs: IEEE dots) and accumulate in fp32, as
the forward's; products with (I + A)⁻¹ are fp32. Every exponent is ≤ 0.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ...common.tiles import chunk_slot, load_tile, sequence_of, store_tile
from .kernels import _gates, _pair_decay, _unit_lower_inverse


@triton.jit
def _straddling(X, o_t):
    """[BT]: Σ over the pairs j < t ≤ i of X_ij, for X [BT, BT] on and below the diagonal: the pair
    terms of dg, +X_ij on G_i and −X_ij on G_j, without the suffix sums whose difference they are.
    One fp32 product with the 0/1 matrix [j < t], then a masked column sum."""
    C = tl.dot(X, tl.where(o_t[:, None] < o_t[None, :], 1.0, 0.0), input_precision="ieee")
    return tl.sum(tl.where(o_t[:, None] >= o_t[None, :], C, 0.0), 0)


@triton.jit
def gdn_bwd_state_kernel(
    q, k, g, u, w, do, dht, hc, cu,
    T, H, HKV, ROWS, scale,
    dnu, dqp, dkp, dwp, dgp, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    WIDE_STATE_TERMS: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
):
    """The reverse sweep; grid (cdiv(E, BV), N·H). WIDE_STATE_TERMS (fp16 inputs) takes the state
    cotangent's own terms, Qᵀ(e^G ⊙ dO) and wᵀ dν, on fp32 operands: their rows scale as e^G, which
    fp16's range loses at strong gates, and dh0 is made of nothing else. Writes dν [B, T, H, E] (fp32), this slice's
    shares of dQ, of dK's sweep terms and of dw into dqp, dkp, dwp [slices, B, T, H, D] and of dg
    into dgp [slices, B, T, H] (ROWS = B·T rows a slice), and its columns of dh0."""
    i_v = tl.program_id(0)
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < KD
    m_v = o_v < VD
    head_off = i_h * (KD * VD) + o_k[:, None] * VD + o_v[None, :]
    s_off = i_n.to(tl.int64) * (H * KD * VD) + head_off
    m_s = m_k[:, None] & m_v[None, :]
    part_d = i_v.to(tl.int64) * ROWS * (H * KD) + bos * (H * KD) + i_h * KD  # a slice's share, per-head [.., D]
    q_base = q + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    g_base = g + bos * H + i_h
    u_base = u + bos * (H * VD) + i_h * VD
    w_base = w + bos * (H * KD) + i_h * KD
    do_base = do + bos * (H * VD) + i_h * VD
    dnu_base = dnu + bos * (H * VD) + i_h * VD
    dg_base = dgp + i_v.to(tl.int64) * ROWS * H + bos * H + i_h
    dt = q.dtype.element_ty
    if HAS_DHT:
        dS = tl.load(dht + s_off, mask=m_s, other=0.0).to(tl.float32)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    for i_r in range(0, tl.cdiv(seq_len, BT)):
        i_c = tl.cdiv(seq_len, BT) - 1 - i_r
        rows = i_c * BT + o_t
        valid = rows < seq_len
        G, G_last = _gates(g_base, rows, H, valid, DOT_PREC)
        eG = tl.exp(G.to(tl.float32))
        eL = tl.exp((G_last - G).to(tl.float32))
        eGL = tl.exp(G_last.to(tl.float32))
        bq = load_tile(q_base, rows, H * KD, o_k, valid, m_k)
        bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k)
        bw = load_tile(w_base, rows, H * KD, o_k, valid, m_k)
        bu = load_tile(u_base, rows, H * VD, o_v, valid, m_v)
        bdo = load_tile(do_base, rows, H * VD, o_v, valid, m_v)
        Sc = tl.load(hc + chunk_slot(bos, i_n, i_c, BT) * (H * KD * VD) + head_off, mask=m_s, other=0.0)
        Scd = Sc.to(dt)
        dSd = dS.to(dt)
        nu = bu - tl.dot(bw.to(dt), Scd, input_precision=DOT_PREC)
        nud = nu.to(dt)
        M = _pair_decay(G, o_t, False)
        QK = tl.dot(bq, tl.trans(bk), input_precision=DOT_PREC)
        W = tl.dot(bdo, tl.trans(nud), input_precision=DOT_PREC) * M * scale
        # dν = scale·((Q Kᵀ) ⊙ M)ᵀ dO + e^{γ−G} ⊙ (K dS')
        d_nu = tl.dot(tl.trans(QK * M).to(dt), bdo, input_precision=DOT_PREC) * scale
        d_nu += tl.dot(bk, dSd, input_precision=DOT_PREC) * eL[:, None]
        store_tile(dnu_base, rows, H * VD, o_v, valid, m_v, d_nu)
        # each [BT, D] share is stored as soon as it is made, so that few are live at once; dg (G is
        # g's prefix sum, γ = G at the chunk's last row): a term of row i in dG reaches dg_t for
        # t ≤ i; a pair's two ends, +x at i and −x at j < i, reach only j < t ≤ i, and are summed so
        # (``_straddling``) rather than as two suffix sums that would have to cancel
        dg = _straddling(W * QK, o_t) + eGL * tl.sum(tl.sum(Sc * dS, 1), 0)
        dq = tl.dot(bdo, tl.trans(Scd), input_precision=DOT_PREC) * (eG * scale)[:, None]
        dg += tl.cumsum(tl.sum(dq * bq.to(tl.float32), 1), 0, reverse=True)
        dq = tl.dot(W.to(dt), bk, dq, input_precision=DOT_PREC)
        store_tile(dqp + part_d, rows, H * KD, o_k, valid, m_k, dq)
        dk = tl.dot(nud, tl.trans(dSd), input_precision=DOT_PREC) * eL[:, None]
        z = tl.sum(dk * bk.to(tl.float32), 1)  # e^{γ−G_i}: +z_i through γ, −z_i through G_i
        dg += tl.cumsum(z, 0) - z
        dk = tl.dot(tl.trans(W).to(dt), bq, dk, input_precision=DOT_PREC)
        store_tile(dkp + part_d, rows, H * KD, o_k, valid, m_k, dk)
        store_tile(dwp + part_d, rows, H * KD, o_k, valid, m_k, -tl.dot(d_nu.to(dt), tl.trans(Scd),
                                                                      input_precision=DOT_PREC))
        tl.store(dg_base + rows * H, dg, mask=valid)
        # the state entering the chunk: e^γ dS' + scale·Qᵀ(e^G ⊙ dO) − wᵀ dν
        if WIDE_STATE_TERMS:
            sd = tl.float32
        else:
            sd = dt
        dS = tl.dot(tl.trans(bq.to(sd)), (bdo.to(tl.float32) * (eG * scale)[:, None]).to(sd), dS * eGL,
                    input_precision=DOT_PREC)
        dS -= tl.dot(tl.trans(bw.to(sd)), d_nu.to(sd), input_precision=DOT_PREC)
    if HAS_H0:
        tl.store(dh0 + s_off, dS, mask=m_s)


@triton.jit
def _mm(a, b):
    """A product with (I + A)⁻¹ or its cotangent in full fp32."""
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def gdn_bwd_wy_kernel(
    k, v, g, beta, u, w, du, dw, dks, dgs, cu,
    T, H, HKV,
    dk, dv, dbeta, dg,
    KD: tl.constexpr, VD: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """The WY terms of every chunk and the gradients they complete: dv, dk [B, T, H, ·] per query
    head (fp32; the host sums a GQA group), dβ and dg [B, T, H] (fp32), from the prep launch's u, w,
    the sweep's du = dν, dw, dK terms dks and dg terms dgs (slices summed). Grid (P, N·H) as the prep
    launch's. (I + A)⁻¹ is solved over the whole chunk by forward substitution in fp32."""
    i_n, i_h, bos, seq_len = sequence_of(cu, tl.program_id(1), T, H, IS_VARLEN)
    i_hk = i_h // (H // HKV)
    o_t = tl.arange(0, BT)
    k_base = k + bos * (HKV * KD) + i_hk * KD
    v_base = v + bos * (HKV * VD) + i_hk * VD
    g_base = g + bos * H + i_h
    b_base = beta + bos * H + i_h
    hd = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    he = bos * (H * VD) + i_h * VD  # every per-query-head [.., E] tensor
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows = i_c * BT + o_t
        valid = rows < seq_len
        G, _ = _gates(g_base, rows, H, valid, DOT_PREC)
        eG = tl.exp(G.to(tl.float32))
        b = tl.load(b_base + rows * H, mask=valid, other=0.0).to(tl.float32)
        KK = tl.zeros([BT, BT], dtype=tl.float32)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, o_k < KD)
            KK = tl.dot(bk, tl.trans(bk), KK, input_precision=DOT_PREC)
        decay = _pair_decay(G, o_t, True)
        A = b[:, None] * KK * decay
        Ti = _unit_lower_inverse(A, BT)
        dA = tl.zeros([BT, BT], dtype=tl.float32)
        db = tl.zeros([BT], dtype=tl.float32)
        dG = tl.zeros([BT], dtype=tl.float32)  # the single-row terms of dG
        for i_e in range(0, tl.cdiv(VD, BV)):
            o_e = i_e * BV + tl.arange(0, BV)
            m_e = o_e < VD
            dXu = _mm(tl.trans(Ti), load_tile(du + he, rows, H * VD, o_e, valid, m_e))
            dA -= _mm(dXu, tl.trans(load_tile(u + he, rows, H * VD, o_e, valid, m_e)))
            store_tile(dv + he, rows, H * VD, o_e, valid, m_e, dXu * b[:, None])
            db += tl.sum(dXu * load_tile(v_base, rows, HKV * VD, o_e, valid, m_e).to(tl.float32), 1)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            dXw = _mm(tl.trans(Ti), load_tile(dw + hd, rows, H * KD, o_k, valid, m_k))
            dA -= _mm(dXw, tl.trans(load_tile(w + hd, rows, H * KD, o_k, valid, m_k).to(tl.float32)))
            t = tl.sum(dXw * load_tile(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32), 1) * eG
            db += t
            dG += b * t
        dA = tl.where(o_t[:, None] > o_t[None, :], dA, 0.0)
        P = dA * decay
        db += tl.sum(P * KK, 1)
        pairs = _straddling(dA * A, o_t)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k).to(tl.float32)
            dXw = _mm(tl.trans(Ti), load_tile(dw + hd, rows, H * KD, o_k, valid, m_k))
            acc = load_tile(dks + hd, rows, H * KD, o_k, valid, m_k) + dXw * (b * eG)[:, None]
            acc += tl.dot(P.to(bk.dtype), bk, input_precision=DOT_PREC) * b[:, None]
            acc += tl.dot(tl.trans(P), bk * b[:, None], input_precision=DOT_PREC)
            store_tile(dk + hd, rows, H * KD, o_k, valid, m_k, acc)
        tl.store(dbeta + bos * H + i_h + rows * H, db, mask=valid)
        # G is the prefix sum of g inside the chunk: dg is dG's suffix sum (the pair terms: ``_straddling``)
        dgs_c = tl.load(dgs + bos * H + i_h + rows * H, mask=valid, other=0.0)
        tl.store(dg + bos * H + i_h + rows * H, dgs_c + tl.cumsum(dG, 0, reverse=True) + pairs, mask=valid)
