"""The GLA backward's in-chunk launch in Gluon for sm_90, on the prep launch's column layout.

Same arguments, outputs and numerics as ``triton.kernels.gla_bwd_intra_kernel``: with
W = scale·do·vᵀ (s ≤ t), dqi_t = Σ_{s≤t} W_ts k_s⊙e^{B_t − B_s}, dki_s = Σ_{t≥s} W_ts q_t⊙e^{B_t − B_s}
and dg's in-chunk part dga, the suffix sum of q⊙dqi − k⊙dki over the strict pairs, each pair's two
copies from the same tf32-truncated operands so that they cancel. Each level's exponents E come
from registers as in ``prep``; its two products, dq's W_L·(k⊙E) and dk's W_Lᵀ·(q⊙E), are tf32 wgmmas
over the chunk's 64 rows for all of D at once, their operands staged in shared memory (tf32 wgmma
reads both operands K-major from there, so W_L and the decayed tiles are stored as they are and
transposed). dq, dk and the dg terms accumulate in the products' layout across the levels.
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, cta_barrier, fence_async_shared, gl, gluon, warpgroup_mma

if IMPORT_ERROR is None:
    from .prep import _add, _chunk_start, _level, _sequence, _stage_gqk

    @gluon.jit
    def _truncated(x):
        """x as a tf32 product reads it (10 of fp32's 23 mantissa bits)."""
        return (x.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)

    @gluon.jit
    def _intra_level(B, W, dq, dk, terms, q_s, k_s, pos, pos_a, pos_r, pos_c, qlt_s, klt_s, wl_s, wlt_s, e_s, zero,
                     L: gl.constexpr, ACC: gl.constexpr, BT: gl.constexpr, KD: gl.constexpr, SPAN: gl.constexpr):
        """One level's pairs added into dq, dk and the dg terms (all [BT, KD] in the products' layout)."""
        E = _level(B, L, BT, KD, SPAN)
        later = ((pos // (SPAN // 2)) % 2 == 1)[:, None]
        ql = _truncated(gl.where(later, q_s.load(L).to(gl.float32) * E, 0.0))
        kl = _truncated(gl.where(later, 0.0, k_s.load(L).to(gl.float32) * E))
        WL = gl.where((pos_r[:, None] // SPAN) == (pos_c[None, :] // SPAN), W, 0.0)
        cta_barrier()  # every warpgroup's products of the last level have read the buffers
        qlt_s.store(gl.permute(ql, (1, 0)))
        klt_s.store(gl.permute(kl, (1, 0)))
        e_s.store(E)
        wl_s.store(WL)
        wlt_s.store(gl.permute(WL, (1, 0)))
        fence_async_shared()
        cta_barrier()
        rows_later = ((pos_a // (SPAN // 2)) % 2 == 1)[:, None]
        # dq's part: P[t] = Σ_s W_ts·(k⊙E)_s on the later rows
        P = warpgroup_mma(wl_s, klt_s.permute((1, 0)), zero, use_acc=False)  # tf32: the default precision
        Em = e_s.load(ACC)
        dq += gl.where(rows_later, Em, 0.0) * P
        terms += qlt_s.permute((1, 0)).load(ACC) * P
        # dk's part: Q[s] = Σ_t W_ts·(q⊙E)_t on the earlier rows
        Q = warpgroup_mma(wlt_s, qlt_s.permute((1, 0)), zero, use_acc=False)
        dk += gl.where(rows_later, 0.0, Em) * Q
        terms -= klt_s.permute((1, 0)).load(ACC) * Q
        return dq, dk, terms

    @gluon.jit
    def gla_bwd_intra_gluon_kernel(
        q, k, v, g, do, cu,
        T, H, HKV, scale,
        dqi, dki, dga,
        KD: gl.constexpr, VD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        DS: gl.constexpr, ROW_LANES: gl.constexpr,
    ):
        """Grid (P, N·H) as the prep launch; DS · ROW_LANES / 32 warps; BT = 64, KD and VD 64 or 128,
        the key channels in slices of DS (dq, dk and the dg terms of a whole chunk and D do not fit
        a thread's registers beside a level's operands)."""
        WARPS: gl.constexpr = DS * ROW_LANES // 32
        L: gl.constexpr = gl.BlockedLayout([BT // ROW_LANES, 1], [ROW_LANES, 32 // ROW_LANES], [1, WARPS], [0, 1])
        LD: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // DS, DS // 4], [WARPS, 1], [1, 0])
        LDV: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // VD, VD // 4], [WARPS, 1], [1, 0])
        ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                      instr_shape=[16, DS // (WARPS // 4), 8])
        SC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                     instr_shape=[16, BT // (WARPS // 4), 16])
        F32_T: gl.constexpr = gl.NVMMASharedLayout.get_default_for([DS, BT], gl.float32)
        F32_W: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BT], gl.float32)
        RAW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        OPV: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, VD], do.dtype.element_ty)
        qlt_s = gl.allocate_shared_memory(gl.float32, [DS, BT], F32_T)
        klt_s = gl.allocate_shared_memory(gl.float32, [DS, BT], F32_T)
        wl_s = gl.allocate_shared_memory(gl.float32, [BT, BT], F32_W)
        wlt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], F32_W)
        e_s = gl.allocate_shared_memory(gl.float32, [BT, DS], RAW)
        q_s = gl.allocate_shared_memory(q.dtype.element_ty, [BT, DS], RAW)
        k_s = gl.allocate_shared_memory(k.dtype.element_ty, [BT, DS], RAW)
        do_s = gl.allocate_shared_memory(do.dtype.element_ty, [BT, VD], OPV)
        v_s = gl.allocate_shared_memory(v.dtype.element_ty, [BT, VD], OPV)

        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)

        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, L))
        pos_ld = gl.arange(0, BT, layout=gl.SliceLayout(1, LD))
        col_ld = gl.arange(0, DS, layout=gl.SliceLayout(0, LD))
        pos_ldv = gl.arange(0, BT, layout=gl.SliceLayout(1, LDV))
        col_ldv = gl.arange(0, VD, layout=gl.SliceLayout(0, LDV))
        pos_r = gl.arange(0, BT, layout=gl.SliceLayout(1, SC))
        pos_c = gl.arange(0, BT, layout=gl.SliceLayout(0, SC))
        pos_a = gl.arange(0, BT, layout=gl.SliceLayout(1, ACC))
        if REVERSE:
            off_ld, off_ldv = BT - 1 - pos_ld, BT - 1 - pos_ldv
        else:
            off_ld, off_ldv = pos_ld, pos_ldv
        zero_sc = gl.zeros([BT, BT], gl.float32, SC)
        zero = gl.zeros([BT, DS], gl.float32, ACC)
        causal = pos_c[None, :] <= pos_r[:, None]
        diag = pos_r[:, None] == pos_c[None, :]

        n_chunks = (seq_len + BT - 1) // BT
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            start = _chunk_start(seq_len, i_c, BT, REVERSE)
            n_left = seq_len - i_c * BT
            m = (pos_ld < n_left)[:, None]
            mv = (pos_ldv < n_left)[:, None]
            row0 = bos + start
            do_in = gl.load(do + (row0 * (H * VD) + i_h * VD) + (off_ldv[:, None] * (H * VD) + col_ldv[None, :]),
                            mask=mv, other=0.0)
            v_in = gl.load(v + (row0 * (HKV * VD) + i_hk * VD) + (off_ldv[:, None] * (HKV * VD) + col_ldv[None, :]),
                           mask=mv, other=0.0)
            cta_barrier()  # the last chunk's products have read do_s and v_s
            do_s.store(do_in)
            v_s.store(v_in)
            fence_async_shared()
            cta_barrier()
            # W = scale·do·vᵀ on the pairs s ≤ t (processing order), and its diagonal
            W = warpgroup_mma(do_s, v_s.permute((1, 0)), zero_sc, use_acc=False)
            W = gl.where(causal, W * scale, 0.0)
            w_diag = gl.convert_layout(gl.sum(gl.where(diag, W, 0.0), axis=1), gl.SliceLayout(1, ACC))
            for i_d in range(0, KD // DS):
                x_base = row0 * (H * KD) + i_h * KD + i_d * DS
                k_base = row0 * (HKV * KD) + i_hk * KD + i_d * DS
                x_off = off_ld[:, None] * (H * KD) + col_ld[None, :]
                k_off = off_ld[:, None] * (HKV * KD) + col_ld[None, :]
                gg = _stage_gqk(g, q, k, x_base, k_base, x_off, k_off, m, q_s, k_s, L)
                B = gl.associative_scan(gg, 0, _add)
                dq = gl.zeros([BT, DS], gl.float32, ACC)
                dk = gl.zeros([BT, DS], gl.float32, ACC)
                terms = gl.zeros([BT, DS], gl.float32, ACC)  # q⊙dq − k⊙dk of the strict pairs
                lv = (q_s, k_s, pos, pos_a, pos_r, pos_c, qlt_s, klt_s, wl_s, wlt_s, e_s, zero)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 64)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 32)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 16)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 8)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 4)
                dq, dk, terms = _intra_level(B, W, dq, dk, terms, *lv, L, ACC, BT, DS, 2)
                # dg's in-chunk part: the terms' suffix sums over later processing positions
                dg_t = gl.associative_scan(gl.convert_layout(terms, L), 0, _add, reverse=True)
                gl.store(dga + x_base + x_off, gl.convert_layout(dg_t, LD), mask=m)
                # the diagonal pairs (weight 1), added after the sum so that they never cancel there
                dq += w_diag[:, None] * k_s.load(ACC).to(gl.float32)
                dk += w_diag[:, None] * q_s.load(ACC).to(gl.float32)
                gl.store(dqi + x_base + x_off, gl.convert_layout(dq.to(dqi.dtype.element_ty), LD), mask=m)
                gl.store(dki + x_base + x_off, gl.convert_layout(dk.to(dki.dtype.element_ty), LD), mask=m)
