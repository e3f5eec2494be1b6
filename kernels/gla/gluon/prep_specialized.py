"""The GLA prep launch in Gluon, warp-specialized: each level's operands beside the last one's product.

Why: ``prep.gla_prep_gluon_kernel`` runs a chunk's six levels as one chain that stops all of its
warps at every step (the level factors, the operands' stores, a barrier, the wgmma, a barrier, the
masked sum), one program an SM, so nothing overlaps the product or the factors. Here the
work splits into two partitions joined by a two-slot ring of operand buffers:

    levels   (default, KD·ROW_LANES / 32 warps)  the loads, the totals, qd and kd; per level the
             factors and the fp16 operands into a free slot of the ring
    products (4 warps, one warpgroup)            per level the wgmma of a full slot, masked to the
             level's groups and summed into the chunk's scores; at the chunk's end the diagonal,
             the rows' scales and the store of A

so level l + 1's factors are made while level l's product runs, and a chunk's loads and qd / kd
stores while the last chunk's products finish. The levels partition keeps two barriers a chunk of
its own warps (the layout changes through shared memory), where the whole-D kernel stops every
warp twice a level.

Synchronisation (mbarriers, count 1; six levels a chunk, so level l always takes slot l % 2):

    op_ready[s]  slot s holds a level's operands (stored, then fenced for the async proxy)
    op_free[s]   the product that read slot s is complete

The chunk's diagonal weights and rows' inverse scales go to ``info`` before its first level's
operands and are read by the products partition after that level's ``op_ready``; the next chunk's
first level rewrites them only after ``op_free`` of this chunk's fifth level, long after that read.

Same arguments, outputs and numerics as ``prep.gla_prep_gluon_kernel`` with fp16 level operands
(whose helpers it uses).
"""
from __future__ import annotations

from ...common.gluon_compat import (IMPORT_ERROR, WS_LIST_FORM, copy_wait, cta_barrier, fence_async_shared, gl, gluon,
                                    mbarrier, warpgroup_mma)

if IMPORT_ERROR is None:
    from .prep import (_chain_start, _chain_step, _chunk_start, _chunk_tile, _issue_chunk, _level_operands,
                       _own_from_ring, _sequence, _stage_gqk, _store_decayed)

    LEVELS: gl.constexpr = gl.constexpr(6)  # BT = 64: groups of 2 up to 64 positions

    @gluon.jit
    def _levels_partition(ptrs, bufs, bars, geo, flags):
        """The default partition: a chunk's loads, cumulative gate, qd, kd and totals, and each level's
        fp16 operands, stored channel-major into the ring (``prep._stage_level16``'s form)."""
        KD: gl.constexpr = flags[0]
        BT: gl.constexpr = flags[1]
        ROW_LANES: gl.constexpr = flags[2]
        REVERSE: gl.constexpr = flags[3]
        IS_VARLEN: gl.constexpr = flags[4]
        SCALED: gl.constexpr = flags[5]
        RING: gl.constexpr = flags[6]
        q, k, g, cu, qd, kd, bl, A = ptrs
        qe_r, ke_r, g_s, q_s, k_s, qd_s, kd_s, info = bufs
        op_ready, op_free = bars
        T, H, HKV = geo
        WARPS: gl.constexpr = KD * ROW_LANES // 32
        # a thread holds BT / ROW_LANES rows of one key channel; global loads and stores go row-major
        L: gl.constexpr = gl.BlockedLayout([BT // ROW_LANES, 1], [ROW_LANES, 32 // ROW_LANES], [1, WARPS], [0, 1])
        LD: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // KD, KD // 4], [WARPS, 1], [1, 0])

        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)
        slot0 = bos // BT + i_n  # chunk slots of this sequence in bl (``tiles.chunk_slot``)
        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, L))
        col = gl.arange(0, KD, layout=gl.SliceLayout(0, L))
        pos_ld = gl.arange(0, BT, layout=gl.SliceLayout(1, LD))
        col_ld = gl.arange(0, KD, layout=gl.SliceLayout(0, LD))
        off_ld = (BT - 1 - pos_ld) if REVERSE else pos_ld
        n_chunks = (seq_len + BT - 1) // BT
        if RING:  # g_s, q_s, k_s are two-slot rings: slot j % 2 holds the program's j-th chunk
            _issue_chunk(g, q, k, bos, seq_len, gl.program_id(0), i_h, i_hk, H, HKV, off_ld, col_ld, pos_ld,
                         g_s.index(0), q_s.index(0), k_s.index(0), KD, BT, REVERSE)
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            j = (i_c - gl.program_id(0)) // gl.num_programs(0)
            uses = 3 * j  # each operand slot's uses before this chunk
            row0, x_base, k_base, x_off, k_off, m = _chunk_tile(bos, seq_len, i_c, i_h, i_hk, H, HKV, off_ld, col_ld,
                                                                pos_ld, KD, BT, REVERSE)
            if RING:
                # the next chunk's copies into the other slot (its last reader, the last chunk, is done
                # with it in program order), then this chunk's, issued one chunk ago
                g_c, q_c, k_c = g_s.index(j % 2), q_s.index(j % 2), k_s.index(j % 2)
                _issue_chunk(g, q, k, bos, seq_len, i_c + gl.num_programs(0), i_h, i_hk, H, HKV, off_ld, col_ld,
                             pos_ld, g_s.index(1 - j % 2), q_s.index(1 - j % 2), k_s.index(1 - j % 2), KD, BT, REVERSE)
                copy_wait(1)
                cta_barrier()  # every thread's copies of this chunk visible to all of this partition's warps
                q_inv, k_inv, own = _own_from_ring(q_c, k_c, BT, LD, SCALED)
                # qd takes the chunk's gate slot once its gates are read (the same elements by the same
                # threads, in L)
                qd_c = g_c
            else:
                # the layout changes through shared memory need barriers of this partition's warps
                # only, which the compiler's barrier pass places
                q_inv, k_inv, own = _stage_gqk(g, q, k, x_base, k_base, x_off, k_off, m, g_s, q_s, k_s, BT, LD,
                                               SCALED, False)
                g_c, q_c, k_c, qd_c = g_s, q_s, k_s, qd_s
            gg = g_c.load(L).to(gl.float32)
            gl.store(bl + ((slot0 + i_c) * H + i_h) * KD + col, gl.sum(gg, axis=0))
            # the level factors as products (``prep._level_scores``): after the widest level they are
            # qd and kd
            F, Qc, Kc = _chain_start(gg, q_c.load(L).to(gl.float32), k_c.load(L).to(gl.float32))
            for lvl in gl.static_range(LEVELS):
                qe, ke = _level_operands(Qc, Kc, pos, lvl, True)  # groups of 2 << lvl positions
                F, Qc, Kc = _chain_step(F, Qc, Kc, L, BT, KD, lvl)
                mbarrier.wait(op_free.index(lvl % 2), ((uses + lvl // 2) & 1) ^ 1)
                if lvl == 0:  # the products partition reads these after this level's op_ready
                    info.index(2).store(own)
                    if SCALED:
                        info.index(0).store(q_inv)
                        info.index(1).store(k_inv)
                qe_r.index(lvl % 2).store(gl.permute(qe, (1, 0)))
                ke_r.index(lvl % 2).store(gl.permute(ke, (1, 0)))
                fence_async_shared()
                mbarrier.arrive(op_ready.index(lvl % 2), count=1)
            # the compiler's barrier pass orders these stores before the reads of ``_store_decayed``
            qd_c.store(Qc.to(qd_c.dtype))
            kd_s.store(Kc.to(kd.dtype.element_ty))
            _store_decayed(qd + x_base, kd + x_base, qd_c, kd_s, info, x_off, m, LD, SCALED)
        if RING:  # the last issue (of a chunk past the end: zeros) lands before the program's memory is freed
            copy_wait(0)

    @gluon.jit
    def _products_partition(ptrs, bufs, bars, geo, flags):
        """One warpgroup: each level's product of a full ring slot, masked to its groups and summed;
        per chunk the diagonal, the rows' scales (exact, powers of two) and the store of A."""
        BT: gl.constexpr = flags[1]
        REVERSE: gl.constexpr = flags[3]
        IS_VARLEN: gl.constexpr = flags[4]
        SCALED: gl.constexpr = flags[5]
        q, k, g, cu, qd, kd, bl, A = ptrs
        qe_r, ke_r, g_s, q_s, k_s, qd_s, kd_s, info = bufs
        op_ready, op_free = bars
        T, H, HKV = geo
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BT, 16])
        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)
        LA: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // BT, BT // 8], [4, 1], [1, 0])
        pos_r = gl.arange(0, BT, layout=gl.SliceLayout(1, MMA))
        pos_c = gl.arange(0, BT, layout=gl.SliceLayout(0, MMA))
        pos_a = gl.arange(0, BT, layout=gl.SliceLayout(1, LA))
        col_a = gl.arange(0, BT, layout=gl.SliceLayout(0, LA))
        if REVERSE:  # processing positions: rows and columns both reversed
            off_a = BT - 1 - pos_a
            col_a = BT - 1 - col_a
        else:
            off_a = pos_a
        zero = gl.zeros([BT, BT], gl.float32, MMA)
        diag = pos_r[:, None] == pos_c[None, :]
        n_chunks = (seq_len + BT - 1) // BT
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            uses = 3 * ((i_c - gl.program_id(0)) // gl.num_programs(0))
            # the chunk's info came with its first level's operands
            mbarrier.wait(op_ready.index(0), uses & 1)
            own = info.index(2).load(gl.SliceLayout(1, MMA))
            if SCALED:
                q_inv = info.index(0).load(gl.SliceLayout(1, MMA))
                k_inv = info.index(1).load(gl.SliceLayout(0, MMA))
            scores = zero
            # a loop, not unrolled: unrolled, the compiler keeps each level's group mask across the chunks
            for lvl in range(LEVELS):
                slot = lvl % 2
                mbarrier.wait(op_ready.index(slot), (uses + lvl // 2) & 1)
                s = warpgroup_mma(qe_r.index(slot).permute((1, 0)), ke_r.index(slot), zero, use_acc=False)
                mbarrier.arrive(op_free.index(slot), count=1)
                group = lvl + 1  # log2 of the level's group span
                scores += gl.where((pos_r[:, None] >> group) == (pos_c[None, :] >> group), s, 0.0)
            # the diagonal pairs (weight Σ_d q·k at the rows' scales), where the levels give exact zeros
            scores = gl.where(diag, own[:, None], scores)
            if SCALED:
                scores = scores * q_inv[:, None] * k_inv[None, :]
            # stored row-major (8 contiguous scores a thread): in the MMA layout a thread's 32 scores
            # take an address each, which the compiler keeps across the levels
            row0 = bos + _chunk_start(seq_len, i_c, BT, REVERSE)
            a_out = gl.convert_layout(scores.to(A.dtype.element_ty), LA)
            a_ptr = A + (row0 * (H * BT) + i_h * BT) + (off_a[:, None] * (H * BT) + col_a[None, :])
            gl.store(a_ptr, a_out, mask=(pos_a < seq_len - i_c * BT)[:, None])  # keys past the end score 0

    @gluon.jit
    def gla_prep_specialized_gluon_kernel(
        q, k, g, cu,
        T, H, HKV,
        qd, kd, bl, A,
        KD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        ROW_LANES: gl.constexpr, PRODUCT_REGS: gl.constexpr = 96, PREFETCH: gl.constexpr = False,
    ):
        """Grid (P, N·H): program (j, row) takes the row's chunks j, j + P, …; KD·ROW_LANES / 32 warps
        in the levels partition and 4 in the products one (at PRODUCT_REGS registers a thread);
        BT = 64 (six levels), KD 64 or 128. PREFETCH: for bf16 inputs, each chunk's g, q and k arrive
        by asynchronous copies into a two-slot ring, the next chunk's issued before this one's levels,
        and qd takes its chunk's gate slot; fp16 inputs (fp32 qd and kd) leave no room for the ring
        beside the operands' and stage as without it, as does g in a third dtype."""
        # fp16 level operands take bf16 inputs scaled per row (fp16 inputs fit as they are)
        SCALED: gl.constexpr = q.dtype.element_ty == gl.bfloat16
        # qd takes its chunk's gate slot: g in fp32 holds it unrounded, g in qd's dtype as qd itself
        RING: gl.constexpr = PREFETCH and SCALED and (g.dtype.element_ty == gl.float32
                                                      or g.dtype.element_ty == qd.dtype.element_ty)
        OPT: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KD, BT], gl.float16)
        RAW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        qe_r = gl.allocate_shared_memory(gl.float16, [2, KD, BT], OPT)
        ke_r = gl.allocate_shared_memory(gl.float16, [2, KD, BT], OPT)
        if RING:
            g_s = gl.allocate_shared_memory(g.dtype.element_ty, [2, BT, KD], RAW)
            q_s = gl.allocate_shared_memory(q.dtype.element_ty, [2, BT, KD], RAW)
            k_s = gl.allocate_shared_memory(k.dtype.element_ty, [2, BT, KD], RAW)
            qd_s = g_s  # qd goes to its chunk's gate slot
        else:
            g_s = gl.allocate_shared_memory(gl.float32, [BT, KD], RAW)
            q_s = gl.allocate_shared_memory(q.dtype.element_ty, [BT, KD], RAW)
            k_s = gl.allocate_shared_memory(k.dtype.element_ty, [BT, KD], RAW)
            qd_s = gl.allocate_shared_memory(qd.dtype.element_ty, [BT, KD], RAW)
        kd_s = gl.allocate_shared_memory(kd.dtype.element_ty, [BT, KD], RAW)
        # the rows' inverse scales of q and k and the diagonal weights of the chunk in flight
        info = gl.allocate_shared_memory(gl.float32, [3, BT], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        op_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        op_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(op_ready.index(i), count=1)
            mbarrier.init(op_free.index(i), count=1)
        ptrs = (q, k, g, cu, qd, kd, bl, A)
        bufs = (qe_r, ke_r, g_s, q_s, k_s, qd_s, kd_s, info)
        bars = (op_ready, op_free)
        geo = (T, H, HKV)
        # the flags as one constexpr tuple: a constexpr passed alone in the partitions' arguments
        # reaches them as a tensor
        args = (ptrs, bufs, bars, geo, gl.constexpr((KD, BT, ROW_LANES, REVERSE, IS_VARLEN, SCALED, RING)))
        if WS_LIST_FORM:
            gl.warp_specialize([(_levels_partition, args), (_products_partition, args)], [4], [PRODUCT_REGS])
        else:
            gl.warp_specialize(args, _levels_partition, args, [_products_partition], [4], [PRODUCT_REGS])
