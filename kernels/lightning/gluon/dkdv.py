"""The Gluon dk / dv pass for sm_90: both reversed backward passes in one kernel.

Why: dk and dv are the outputs of two reversed passes over one state, ``R_s`` (``backward``):

    dk_s = R_s v_s      = (v⊙λ^(p+1)·scale)·Rᵀ_{c−1} + ((V dOᵀ) ⊙ M)·Q      per chunk, as the forward
    dv_s = R_sᵀ k_s     = (k⊙λ^(p+1)·scale)·R_{c−1}  + ((K Qᵀ)  ⊙ M)·dO
    R_c  = λ^L R_{c−1} + (Q ⊙ λ^(L−1−p))ᵀ dO                              R [D, E], fp32

Run as two passes of the forward kernel they read q, k, v and dO twice over and keep two copies
of R; one kernel reads each tile once and keeps R once: 6 tensor moves instead of 8. Its output
warpgroup then has both halves' products to make per chunk; made one half after the other, each
waited on at once, that chain took the time the saved traffic would have, so the halves' wgmmas
are interleaved and every wait is deferred past independent issues.

One program owns one (sequence, head), all of D and E. Partitions, as the forward's:

    load   (1 warp)      TMA copies of the q, k, v, dO chunk tiles into a ring of NBUF slots
    state  (4 warps)     R, fp32 in registers; publishes R_{c−1} as bf16 into a ring of NS
                         shared buffers before it reads chunk c
    output (4 warps,     per chunk both halves at once, their wgmma chains interleaved: the two
            default)     score products K Qᵀ and V dOᵀ, then the two state products K·R and V·Rᵀ
                         (shared-memory operands, the decay applied to the fp32 result's rows), each
                         waited on only as its result is needed, so the tensor cores work on one
                         half while the other's scores are masked and its rows decayed; then the
                         two masked score products, and the tiles leave by TMA store

The barriers are the forward's (``kernels``): ld_ready / ld_empty per ring slot (ld_empty counts
the state and the output partitions), s_ready / s_empty per state buffer. Heads are not grouped
(H = H_kv: dO has a query head's worth of heads). Rows past T read as zeros and are not written.
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, WS_LIST_FORM, fence_async_shared, gl, gluon, mbarrier, tma, warpgroup_mma
from ...common.gluon_compat import grid_dependents, tma_load, tma_store, warpgroup_mma_wait

if IMPORT_ERROR is None:
    from .kernels import START_CAP, _chunk_row, _decay_mask, _positions, _shifted_decay, _state_chain

    @gluon.jit
    def _dkdv_load_partition(descs, bufs, bars, geo, ptrs, flags):
        """One warp: keep the ring of q, k, v, dO chunk tiles full."""
        REVERSE: gl.constexpr = flags[0]
        FROM_DST: gl.constexpr = flags[1]
        STORE_HT: gl.constexpr = flags[2]
        q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc = descs
        q_bufs, k_bufs, v_bufs, do_bufs, s_bufs, dk_bufs, dv_bufs = bufs
        ld_ready, ld_empty, s_ready, s_empty = bars
        i_b, i_h, T, H, n_chunks = geo
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        E: gl.constexpr = v_desc.block_type.shape[2]
        NBUF: gl.constexpr = q_bufs.type.shape[0]
        nbytes: gl.constexpr = 2 * (q_desc.block_type.nbytes + v_desc.block_type.nbytes)
        for c in range(n_chunks):
            slot = c % NBUF
            mbarrier.wait(ld_empty.index(slot), ((c // NBUF) & 1) ^ 1)
            t0 = _chunk_row(c, n_chunks, BT, REVERSE)
            bar = ld_ready.index(slot)
            mbarrier.expect(bar, nbytes)
            tma_load(q_desc, [i_b, t0, i_h * D], bar, q_bufs.index(slot))
            tma_load(k_desc, [i_b, t0, i_h * D], bar, k_bufs.index(slot))
            tma_load(v_desc, [i_b, t0, i_h * E], bar, v_bufs.index(slot))
            tma_load(do_desc, [i_b, t0, i_h * E], bar, do_bufs.index(slot))

    @gluon.jit
    def _dkdv_state_partition(descs, bufs, bars, geo, ptrs, flags):
        """One warpgroup: R [D, E] fp32 is the wgmma accumulator; Qᵀ, decayed per token, is the
        register A operand; dO comes straight from the ring. Starts from c·dS_T (FROM_DST)."""
        REVERSE: gl.constexpr = flags[0]
        FROM_DST: gl.constexpr = flags[1]
        STORE_HT: gl.constexpr = flags[2]
        q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc = descs
        q_bufs, k_bufs, v_bufs, do_bufs, s_bufs, dk_bufs, dv_bufs = bufs
        i_b, i_h, T, H, n_chunks = geo
        dst_ptr, ht_ptr, g_ptr, scale = ptrs
        D: gl.constexpr = q_desc.block_type.shape[2]
        E: gl.constexpr = v_desc.block_type.shape[2]
        dtype: gl.constexpr = q_desc.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, E, 16])
        qa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=st_layout, k_width=2)

        gam = gl.load(g_ptr + i_h).to(gl.float32)
        d_rows = gl.arange(0, D, layout=gl.SliceLayout(1, st_layout))
        e_cols = gl.arange(0, E, layout=gl.SliceLayout(0, st_layout))
        state_off = (i_b * H + i_h).to(gl.int64) * (D * E)
        s_idx = d_rows[:, None] * E + e_cols[None, :]
        if FROM_DST:  # a reversed backward pass starts from c·dS_T (``backward``)
            R = gl.load(dst_ptr + state_off + s_idx) * (gl.exp(gl.minimum(-gam, START_CAP)) / scale)
        else:
            R = gl.full([D, E], 0.0, gl.float32, st_layout)
        R = _state_chain(R, q_bufs, do_bufs, s_bufs, bars, gam, T, n_chunks, qa_layout, dtype, REVERSE)

        if STORE_HT:
            gl.store(ht_ptr + state_off + s_idx, R)

    @gluon.jit
    def _dkdv_output_partition(descs, bufs, bars, geo, ptrs, flags):
        """The default warpgroup: per chunk dv = diag(kdec)·(K·R) + ((K Qᵀ) ⊙ M)·dO and
        dk = diag(vdec)·(V·Rᵀ) + ((V dOᵀ) ⊙ M)·Q as six async wgmmas in one interleaved chain (wgmma
        groups complete in issue order, so each wait names how many later groups may still run);
        NO tiles of each in flight to TMA stores."""
        REVERSE: gl.constexpr = flags[0]
        FROM_DST: gl.constexpr = flags[1]
        STORE_HT: gl.constexpr = flags[2]
        q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc = descs
        q_bufs, k_bufs, v_bufs, do_bufs, s_bufs, dk_bufs, dv_bufs = bufs
        ld_ready, ld_empty, s_ready, s_empty = bars
        i_b, i_h, T, H, n_chunks = geo
        dst_ptr, ht_ptr, g_ptr, scale = ptrs
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        E: gl.constexpr = v_desc.block_type.shape[2]
        NBUF: gl.constexpr = q_bufs.type.shape[0]
        NS: gl.constexpr = s_bufs.type.shape[0]
        NO: gl.constexpr = dk_bufs.type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        sc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BT, 16])
        dv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, E, 16])
        dk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, D, 16])
        pv_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dv_layout, k_width=2)
        pk_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk_layout, k_width=2)

        gam = gl.load(g_ptr + i_h).to(gl.float32)
        # loop invariants: the intra-chunk decay mask (scale folded in) and the carried state's
        # decay per row, λ^(p+1)·scale, put on the fp32 rows of K·R (dv) and V·Rᵀ (dk)
        mask = _decay_mask(gam, scale, BT, sc_layout, REVERSE)
        p_v = _positions(BT, gl.SliceLayout(1, dv_layout), REVERSE)
        p_k = _positions(BT, gl.SliceLayout(1, dk_layout), REVERSE)
        kdec = gl.exp(gam * (p_v + 1.0)) * scale
        vdec = gl.exp(gam * (p_k + 1.0)) * scale
        zero_sc = gl.full([BT, BT], 0.0, gl.float32, sc_layout)
        zero_dv = gl.full([BT, E], 0.0, gl.float32, dv_layout)
        zero_dk = gl.full([BT, D], 0.0, gl.float32, dk_layout)

        for c in range(n_chunks):
            slot = c % NBUF
            mbarrier.wait(ld_ready.index(slot), (c // NBUF) & 1)
            q_s = q_bufs.index(slot).reshape([BT, D])
            k_s = k_bufs.index(slot).reshape([BT, D])
            v_s = v_bufs.index(slot).reshape([BT, E])
            do_s = do_bufs.index(slot).reshape([BT, E])
            # groups 1, 2: the scores of both halves, which need no state
            s_v = warpgroup_mma(k_s, q_s.permute((1, 0)), zero_sc, use_acc=False, is_async=True)
            s_k = warpgroup_mma(v_s, do_s.permute((1, 0)), zero_sc, use_acc=False, is_async=True)
            t0 = _chunk_row(c, n_chunks, BT, REVERSE)
            if REVERSE:
                kdec = _shifted_decay(p_v, T, t0, gam, scale, BT)
                vdec = _shifted_decay(p_k, T, t0, gam, scale, BT)
            sb = c % NS
            mbarrier.wait(s_ready.index(sb), (c // NS) & 1)
            st = s_bufs.index(sb)
            # groups 3, 4: the state products, from shared memory; their rows are decayed in fp32
            a_v = warpgroup_mma(k_s, st, zero_dv, use_acc=False, is_async=True)
            a_k = warpgroup_mma(v_s, st.permute((1, 0)), zero_dk, use_acc=False, is_async=True)
            s_v = warpgroup_mma_wait(num_outstanding=3, deps=[s_v])
            p_v_op = gl.convert_layout((s_v * mask).to(dtype), pv_layout)
            s_k = warpgroup_mma_wait(num_outstanding=2, deps=[s_k])
            p_k_op = gl.convert_layout((s_k * mask).to(dtype), pk_layout)
            a_v = warpgroup_mma_wait(num_outstanding=1, deps=[a_v])
            # group 5: dv's masked scores, while V·Rᵀ may still run
            a_v = warpgroup_mma(p_v_op, do_s, a_v * kdec[:, None], is_async=True)
            a_k, p_v_op = warpgroup_mma_wait(num_outstanding=1, deps=[a_k, p_v_op])
            # group 6: dk's masked scores, while dv's may still run
            a_k = warpgroup_mma(p_k_op, q_s, a_k * vdec[:, None], is_async=True)
            a_v, p_v_op, p_k_op = warpgroup_mma_wait(num_outstanding=1, deps=[a_v, p_v_op, p_k_op])

            ob = c % NO
            tma.store_wait(2 * NO - 1)  # the dv store that last used buffer ob has read it
            dv_bufs.index(ob).reshape([BT, E]).store(a_v.to(dtype))
            fence_async_shared()
            tma_store(dv_desc, [i_b, t0, i_h * E], dv_bufs.index(ob))

            a_k, p_k_op = warpgroup_mma_wait(num_outstanding=0, deps=[a_k, p_k_op])
            # every wgmma reading the slot and the state buffer is complete: hand both back
            fence_async_shared()
            mbarrier.arrive(ld_empty.index(slot), count=1)
            mbarrier.arrive(s_empty.index(sb), count=1)
            tma.store_wait(2 * NO - 1)  # the dk store that last used buffer ob has read it
            dk_bufs.index(ob).reshape([BT, D]).store(a_k.to(dtype))
            fence_async_shared()
            tma_store(dk_desc, [i_b, t0, i_h * D], dk_bufs.index(ob))
        tma.store_wait(0)

    @gluon.jit
    def lightning_dkdv_kernel(
        q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dst, ht, g,
        T, H, scale,
        REVERSE: gl.constexpr, FROM_DST: gl.constexpr, STORE_HT: gl.constexpr, NBUF: gl.constexpr,
        NS: gl.constexpr, NO: gl.constexpr, LOAD_WARPS: gl.constexpr, STATE_WARPS: gl.constexpr,
        LOAD_REGS: gl.constexpr, STATE_REGS: gl.constexpr, S_LAYOUT: gl.constexpr,
        PDL_TRIGGER: gl.constexpr = False,
    ):
        """dk and dv of one (sequence, head) per program; grid (B·H,). REVERSE is the pass's
        direction (the forward's reversed). dst: fp32 dS_T [B, H, D, E] when FROM_DST (any pointer
        otherwise); ht: fp32 [B, H, D, E], R after the last chunk, when STORE_HT; g: fp32 [H] log
        decay; S_LAYOUT: the shared layout of a [D, E] state buffer. PDL_TRIGGER: a programmatic
        dependent launch after this kernel may start as soon as every program has started."""
        if PDL_TRIGGER:
            grid_dependents()
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        E: gl.constexpr = v_desc.block_type.shape[2]
        dtype: gl.constexpr = q_desc.dtype
        i_bh = gl.program_id(0)
        i_b = i_bh // H
        i_h = i_bh % H

        q_bufs = gl.allocate_shared_memory(dtype, [NBUF] + q_desc.block_type.shape, q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [NBUF] + k_desc.block_type.shape, k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [NBUF] + v_desc.block_type.shape, v_desc.layout)
        do_bufs = gl.allocate_shared_memory(dtype, [NBUF] + do_desc.block_type.shape, do_desc.layout)
        s_bufs = gl.allocate_shared_memory(dtype, [NS, D, E], S_LAYOUT)
        dk_bufs = gl.allocate_shared_memory(dtype, [NO] + dk_desc.block_type.shape, dk_desc.layout)
        dv_bufs = gl.allocate_shared_memory(dtype, [NO] + dv_desc.block_type.shape, dv_desc.layout)
        ld_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        ld_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        s_ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        s_empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NBUF):
            mbarrier.init(ld_ready.index(i), count=1)
            mbarrier.init(ld_empty.index(i), count=2)  # the output and the state partitions
        for i in gl.static_range(NS):
            mbarrier.init(s_ready.index(i), count=1)
            mbarrier.init(s_empty.index(i), count=1)

        n_chunks = (T + BT - 1) // BT  # plain arithmetic, as in the forward (``kernels``)
        descs = (q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc)
        bufs = (q_bufs, k_bufs, v_bufs, do_bufs, s_bufs, dk_bufs, dv_bufs)
        bars = (ld_ready, ld_empty, s_ready, s_empty)
        geo = (i_b, i_h, T, H, n_chunks)
        ptrs = (dst, ht, g, scale)
        args = (descs, bufs, bars, geo, ptrs, gl.constexpr((REVERSE, FROM_DST, STORE_HT)))  # as the forward's
        if WS_LIST_FORM:
            gl.warp_specialize([(_dkdv_output_partition, args), (_dkdv_load_partition, args),
                                (_dkdv_state_partition, args)], [LOAD_WARPS, STATE_WARPS], [LOAD_REGS, STATE_REGS])
        else:
            gl.warp_specialize(args, _dkdv_output_partition, args, [_dkdv_load_partition, _dkdv_state_partition],
                               [LOAD_WARPS, STATE_WARPS], [LOAD_REGS, STATE_REGS])
