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

Three launches:
  gdn_bwd_state_kernel  a reverse sweep per (value-column slice, sequence·head) carrying dS
                        [BK, BV] in fp32 registers: ν (from the forward's chunk-entry states hc),
                        dν, each chunk's dS' and dh0
  gdn_bwd_chunk_kernel  parallel over chunks: dQ, dK's sweep terms, dw and dg's sweep terms
  gdn_bwd_wy_kernel     parallel over chunks: (I + A)⁻¹ again, the WY terms, dV, dβ, dK and dg

Products take operands in the input dtype (fp32 inputs: IEEE dots) and accumulate in fp32, as
the forward's; products with (I + A)⁻¹ are fp32. Every exponent is ≤ 0.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ...common.tiles import chunk_slot, load_tile, load_tile_t, store_tile
from .kernels import _gates, _gram, _kv_bases, _pair_decay, _program_row, _unit_lower_inverse, _value_slice


@triton.jit
def _straddling(X, o_t):
    """[BT]: Σ over the pairs j < t ≤ i of X_ij, for X [BT, BT] on and below the diagonal: the pair
    terms of dg, +X_ij on G_i and −X_ij on G_j, without the suffix sums whose difference they are.
    One fp32 product with the 0/1 matrix [j < t], then a masked column sum."""
    C = tl.dot(X, tl.where(o_t[:, None] < o_t[None, :], 1.0, 0.0), input_precision="ieee")
    return tl.sum(tl.where(o_t[:, None] >= o_t[None, :], C, 0.0), 0)


@triton.jit
def _pair_decay_t(G, o_t):
    """The transpose of ``_pair_decay(G, o_t, False)``: [j, i] = e^{G_i − G_j} for i ≥ j, else 0."""
    x = tl.where(o_t[None, :] >= o_t[:, None], G[None, :] - G[:, None], -float("inf"))
    return tl.exp(x.to(tl.float32))


@triton.jit
def gdn_bwd_state_kernel(
    q, k, g, u, w, do, dht, hc, cu,
    T, H, HKV, scale,
    nu, dnu, dhc, dh0,
    KD: tl.constexpr, VD: tl.constexpr, BK: tl.constexpr,
    HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    WIDE_STATE_TERMS: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
):
    """The reverse sweep; grid (cdiv(E, BV), N·H). Carries dS [BK, BV] and writes, per chunk, the
    cotangent dS' of the state leaving it into dhc [slots, H, D, E] (fp32, ``chunk_slot``), ν and dν
    [B, T, H, E] (fp32), and at the end its columns of dh0. WIDE_STATE_TERMS (fp16 inputs) takes the
    state cotangent's own terms, Qᵀ(e^G ⊙ dO) and wᵀ dν, on fp32 operands: their rows scale as e^G,
    which fp16's range loses at strong gates, and dh0 is made of nothing else."""
    i_n, i_h, i_hk, bos, seq_len, o_k, o_v, m_k, m_v, head_off, s_off, m_s = _value_slice(
        cu, T, H, HKV, KD, VD, BK, BV, IS_VARLEN)
    o_t = tl.arange(0, BT)
    hd = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    he = bos * (H * VD) + i_h * VD  # every per-query-head [.., E] tensor
    k_base = k + bos * (HKV * KD) + i_hk * KD
    g_base = g + bos * H + i_h
    dt = q.dtype.element_ty
    if WIDE_STATE_TERMS:
        sd = tl.float32
        sp: tl.constexpr = "ieee"
    else:
        sd = dt
        sp: tl.constexpr = DOT_PREC
    if HAS_DHT:
        dS = tl.load(dht + s_off, mask=m_s, other=0.0).to(tl.float32)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    # q and w come in transposed as [BK, BT] tiles and the intra-chunk scores are formed transposed
    # (K Qᵀ), so that no MMA operand is a register tile transposed: Triton 3.6 on sm_90 compiled
    # this sweep with those into out-of-range shared-memory reads at 16-bit inputs
    for i_r in range(0, tl.cdiv(seq_len, BT)):
        i_c = tl.cdiv(seq_len, BT) - 1 - i_r
        rows = i_c * BT + o_t
        valid = rows < seq_len
        slot = chunk_slot(bos, i_n, i_c, BT) * (H * KD * VD) + head_off
        tl.store(dhc + slot, dS, mask=m_s)
        G, G_last = _gates(g_base, rows, H, valid, DOT_PREC)
        bqt = load_tile_t(q + hd, rows, H * KD, o_k, valid, m_k)
        bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k)
        bw = load_tile(w + hd, rows, H * KD, o_k, valid, m_k)
        bwt = load_tile_t(w + hd, rows, H * KD, o_k, valid, m_k)
        bdo = load_tile(do + he, rows, H * VD, o_v, valid, m_v)
        Sc = tl.load(hc + slot, mask=m_s, other=0.0)
        store_tile(nu + he, rows, H * VD, o_v, valid, m_v, load_tile(u + he, rows, H * VD, o_v, valid, m_v)
                   - tl.dot(bw.to(dt), Sc.to(dt), input_precision=DOT_PREC))
        # dν = scale·((Q Kᵀ) ⊙ M)ᵀ dO + e^{γ−G} ⊙ (K dS'), the first term as ((K Qᵀ) ⊙ Mᵀ) dO
        scores_t = tl.dot(bk, bqt, input_precision=DOT_PREC) * _pair_decay_t(G, o_t)
        d_nu = tl.dot(scores_t.to(dt), bdo, input_precision=DOT_PREC) * scale
        d_nu += tl.dot(bk, dS.to(dt), input_precision=DOT_PREC) * tl.exp((G_last - G).to(tl.float32))[:, None]
        store_tile(dnu + he, rows, H * VD, o_v, valid, m_v, d_nu)
        # the state entering the chunk: e^γ dS' + scale·Qᵀ(e^G ⊙ dO) − wᵀ dν
        eG = tl.exp(G.to(tl.float32)) * scale
        dS = tl.dot(bqt.to(sd), (bdo.to(tl.float32) * eG[:, None]).to(sd),
                    dS * tl.exp(G_last.to(tl.float32)), input_precision=sp)
        dS -= tl.dot(bwt.to(sd), d_nu.to(sd), input_precision=sp)
    if HAS_H0:
        tl.store(dh0 + s_off, dS, mask=m_s)


@triton.jit
def gdn_bwd_chunk_kernel(
    q, k, g, do, nu, dnu, hc, dhc, cu,
    T, H, HKV, scale,
    dq, dks, dw, dgs,
    KD: tl.constexpr, VD: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PREC: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr,
):
    """Everything of a chunk's backward that needs the states but carries nothing: dq, dk's sweep
    terms dks (fp32), dw (fp32) [B, T, H, D] and dg's sweep terms dgs [B, T, H] (fp32), from the
    chunk-entry states hc, the sweep's dS' (dhc), ν and dν; grid (P, N·H) as the prep launch's, D in
    slices of BD, E in slices of BV."""
    i_n, i_h, i_hk, bos, seq_len = _program_row(cu, T, H, HKV, IS_VARLEN)
    o_t = tl.arange(0, BT)
    q_base = q + bos * (H * KD) + i_h * KD
    k_base = k + bos * (HKV * KD) + i_hk * KD
    g_base = g + bos * H + i_h
    hd = bos * (H * KD) + i_h * KD  # every per-query-head [.., D] tensor
    he = bos * (H * VD) + i_h * VD  # every per-query-head [.., E] tensor
    dt = q.dtype.element_ty
    for i_c in range(tl.program_id(0), tl.cdiv(seq_len, BT), tl.num_programs(0)):
        rows = i_c * BT + o_t
        valid = rows < seq_len
        G, G_last = _gates(g_base, rows, H, valid, DOT_PREC)
        slot = chunk_slot(bos, i_n, i_c, BT) * (H * KD * VD) + i_h * (KD * VD)
        W = tl.zeros([BT, BT], dtype=tl.float32)
        for i_e in range(0, tl.cdiv(VD, BV)):
            o_e = i_e * BV + tl.arange(0, BV)
            m_e = o_e < VD
            W = tl.dot(load_tile(do + he, rows, H * VD, o_e, valid, m_e),
                       tl.trans(load_tile(nu + he, rows, H * VD, o_e, valid, m_e).to(dt)), W, input_precision=DOT_PREC)
        W = W * _pair_decay(G, o_t, False) * scale  # W = scale·(dO νᵀ) ⊙ M
        QK = _gram(q_base, H * KD, rows, valid, k_base, HKV * KD, rows, valid, KD, BD, BT, BT, DOT_PREC)
        # dg (G is g's prefix sum, γ = G at the chunk's last row): a term of row i in dG reaches dg_t
        # for t ≤ i; a pair's two ends, +x at i and −x at j < i, reach only j < t ≤ i, and are summed
        # so (``_straddling``) rather than as two suffix sums that would have to cancel
        dg = _straddling(W * QK, o_t)
        rq = tl.zeros([BT], dtype=tl.float32)  # e^{G_i} of o's state term
        z = tl.zeros([BT], dtype=tl.float32)  # e^{γ−G_i} of the leaving state: +z_i through γ, −z_i through G_i
        d_gamma = tl.zeros([BT], dtype=tl.float32)  # e^γ of the leaving state (every entry the same)
        for i_d in range(0, tl.cdiv(KD, BD)):
            o_k = i_d * BD + tl.arange(0, BD)
            m_k = o_k < KD
            bq = load_tile(q_base, rows, H * KD, o_k, valid, m_k)
            bk = load_tile(k_base, rows, HKV * KD, o_k, valid, m_k)
            a_q = tl.zeros([BT, BD], dtype=tl.float32)  # dO Sᵀ
            a_k = tl.zeros([BT, BD], dtype=tl.float32)  # ν dS'ᵀ
            a_w = tl.zeros([BT, BD], dtype=tl.float32)  # dν Sᵀ
            for i_e in range(0, tl.cdiv(VD, BV)):
                o_e = i_e * BV + tl.arange(0, BV)
                m_e = o_e < VD
                s_off = slot + o_k[:, None] * VD + o_e[None, :]
                m_s = m_k[:, None] & m_e[None, :]
                Sc = tl.load(hc + s_off, mask=m_s, other=0.0)
                dSn = tl.load(dhc + s_off, mask=m_s, other=0.0)
                d_gamma += tl.sum(tl.sum(Sc * dSn, 1), 0)
                a_q = tl.dot(load_tile(do + he, rows, H * VD, o_e, valid, m_e), tl.trans(Sc.to(dt)), a_q,
                             input_precision=DOT_PREC)
                a_k = tl.dot(load_tile(nu + he, rows, H * VD, o_e, valid, m_e).to(dt), tl.trans(dSn.to(dt)), a_k,
                             input_precision=DOT_PREC)
                a_w = tl.dot(load_tile(dnu + he, rows, H * VD, o_e, valid, m_e).to(dt), tl.trans(Sc.to(dt)), a_w,
                             input_precision=DOT_PREC)
            a_q = a_q * (tl.exp(G.to(tl.float32)) * scale)[:, None]
            a_k = a_k * tl.exp((G_last - G).to(tl.float32))[:, None]
            rq += tl.sum(a_q * bq.to(tl.float32), 1)
            z += tl.sum(a_k * bk.to(tl.float32), 1)
            store_tile(dq + hd, rows, H * KD, o_k, valid, m_k, tl.dot(W.to(dt), bk, a_q, input_precision=DOT_PREC))
            store_tile(dks + hd, rows, H * KD, o_k, valid, m_k,
                       tl.dot(tl.trans(W).to(dt), bq, a_k, input_precision=DOT_PREC))
            store_tile(dw + hd, rows, H * KD, o_k, valid, m_k, -a_w)
        dg += tl.cumsum(rq, 0, reverse=True) + tl.cumsum(z, 0) - z + tl.exp(G_last.to(tl.float32)) * d_gamma
        tl.store(dgs + bos * H + i_h + rows * H, dg, mask=valid)


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
    du = dν, and the chunk launch's dw, dK terms dks and dg terms dgs. Grid (P, N·H) as the prep
    launch's. (I + A)⁻¹ is solved over the whole chunk by forward substitution in fp32."""
    i_n, i_h, i_hk, bos, seq_len = _program_row(cu, T, H, HKV, IS_VARLEN)
    o_t = tl.arange(0, BT)
    k_base, v_base = _kv_bases(k, v, bos, i_hk, HKV, KD, VD)
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
        KK = _gram(k_base, HKV * KD, rows, valid, k_base, HKV * KD, rows, valid, KD, BD, BT, BT, DOT_PREC)
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
            # dX_w again: P needs all of dA, so the first pass cannot finish dk; redoing the product
            # costs less than keeping [BT, D] fp32 across it
            dXw = _mm(tl.trans(Ti), load_tile(dw + hd, rows, H * KD, o_k, valid, m_k))
            acc = load_tile(dks + hd, rows, H * KD, o_k, valid, m_k) + dXw * (b * eG)[:, None]
            acc += tl.dot(P.to(bk.dtype), bk, input_precision=DOT_PREC) * b[:, None]
            acc += tl.dot(tl.trans(P), bk * b[:, None], input_precision=DOT_PREC)
            store_tile(dk + hd, rows, H * KD, o_k, valid, m_k, acc)
        tl.store(dbeta + bos * H + i_h + rows * H, db, mask=valid)
        # G is the prefix sum of g inside the chunk: dg is dG's suffix sum (the pair terms: ``_straddling``)
        dgs_c = tl.load(dgs + bos * H + i_h + rows * H, mask=valid, other=0.0)
        tl.store(dg + bos * H + i_h + rows * H, dgs_c + tl.cumsum(dG, 0, reverse=True) + pairs, mask=valid)
