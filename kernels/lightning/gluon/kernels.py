"""The Gluon forward of Lightning Attention for sm_90: TMA ring, async wgmma, warp specialization.

One program owns one (sequence b, query head h) and the BV value columns of slice i_v. For
every chunk c of BT tokens (processing positions p = 0..BT−1; reversed rows under REVERSE):

    O_c = scale · (diag(λ^(p+1)) Q_c S_{c−1} + ((Q_c K_cᵀ) ⊙ M) V_c)      M[p, s] = λ^(p−s), s ≤ p
    S_c = λ^L S_{c−1} + (K_c ⊙ λ^(L−1−p))ᵀ V_c                          L valid rows of chunk c

with S_{−1} the initial state and S_{n−1} the final one. The work splits into three partitions:

    load   (1 warp)      TMA copies of the q, k, v chunk tiles into a ring of NBUF slots
    state  (4 warps)     the recurrence S_c, fp32 in registers; publishes S_{c−1} as bf16 / fp16
                         into a ring of NS shared buffers before it reads chunk c, so it runs up to
                         NS chunks ahead of the output partition
    output (4 warps,     the default partition: Q·S_{c−1} and the masked QKᵀ·V as three async
            default)     wgmmas into one accumulator, then the output tile by TMA store

Synchronisation (mbarriers; a ring slot's phase flips each time round the ring):

    ld_ready[s]  count 1  the TMA transaction count of slot s reached (q, k, v landed)
    ld_empty[s]  count 2  the output and the state partitions are done with slot s: each arrives
                          only after warpgroup_mma_wait(0) covers every wgmma that reads the slot
                          (never after a wait with outstanding groups: the ring would refill a
                          slot an in-flight wgmma still reads), and after a fence that orders its
                          generic-proxy reads of the slot (register loads) before the TMA rewrite
    s_ready[j]   count 1  state buffer j holds S_{c−1} for chunk c (written, then fenced for the
                          async proxy the output's wgmma reads it through)
    s_empty[j]   count 1  the output's Q·S wgmma on buffer j is complete (waited on)

A fresh mbarrier is in phase 0; waiting for parity 1 returns at once, so producers wait for
``phase ^ 1`` and the first round of every ring starts free.

Layout: q ``[B, T, H, D]``, k ``[B, T, HKV, D]``, v ``[B, T, HKV, E]``, o ``[B, T, H, E]``, moved by
3-D tensor descriptors over ``[B, T, heads·dim]`` with boxes ``[1, BT, D]`` / ``[1, BT, BV]``:
rows past T (the partial chunk: the last one processed, or reversed the first) read as zeros and
are not written, so odd T needs no masks on the tiles; only the decay vectors mask the
rows past the sequence. GQA: query head h reads kv head h // (H / HKV).
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, WS_LIST_FORM, fence_async_shared, gl, gluon, mbarrier, tma, warpgroup_mma
from ...common.gluon_compat import grid_dependency_wait, tma_load, tma_store, warpgroup_mma_wait
from . import configs as _cfg

# the start-state flags and the start factor's cap (-LOG_DECAY_FLOOR) as constexprs the kernels
# read as globals
if IMPORT_ERROR is None:
    H0_NONE, H0_TRANSPOSED, H0_FROM_DST = (gl.constexpr(x) for x in (_cfg.H0_NONE, _cfg.H0_TRANSPOSED,
                                                                     _cfg.H0_FROM_DST))
    START_CAP = gl.constexpr(-_cfg.LOG_DECAY_FLOOR)

if IMPORT_ERROR is None:

    @gluon.jit
    def _chunk_row(c, n_chunks, BT: gl.constexpr, REVERSE: gl.constexpr):
        """First row of the chunk at processing index c. Chunks sit at multiples of BT from row 0
        in both directions, so no TMA box starts below row 0; reversed, the partial chunk (rows
        past T read as zeros) is the first one processed."""
        if REVERSE:
            return (n_chunks - 1 - c) * BT
        else:
            return c * BT

    @gluon.jit
    def _positions(BT: gl.constexpr, layout: gl.constexpr, REVERSE: gl.constexpr):
        """The processing position p of each of the BT rows of a full tile, as fp32 in ``layout``;
        a reversed chunk of L < BT valid rows adds L − BT (rows past T then get p < 0)."""
        r = gl.arange(0, BT, layout=layout)
        if REVERSE:
            r = BT - 1 - r
        return r.to(gl.float32)

    @gluon.jit
    def _decay_mask(gam, scale, BT: gl.constexpr, layout: gl.constexpr, REVERSE: gl.constexpr):
        """[BT, BT] in ``layout``: the intra-chunk decay λ^(p_t − p_s)·scale on the pairs s ≤ t of
        processing positions, 0 elsewhere."""
        p_r = _positions(BT, gl.SliceLayout(1, layout), REVERSE)
        p_c = _positions(BT, gl.SliceLayout(0, layout), REVERSE)
        diff = p_r[:, None] - p_c[None, :]
        return gl.where(diff >= 0.0, gl.exp(gam * gl.maximum(diff, 0.0)), 0.0) * scale

    @gluon.jit
    def _shifted_decay(p, T, t0, gam, scale, BT: gl.constexpr):
        """The carried state's decay per row, λ^(p+1)·scale, of a reversed chunk starting at row t0:
        a partial chunk shifts every position by L − BT, and rows past T get 0."""
        p = p + (gl.minimum(T - t0, BT) - BT).to(gl.float32)
        return gl.where(p >= 0.0, gl.exp(gam * (p + 1.0)), 0.0) * scale

    @gluon.jit
    def _load_partition(descs, bufs, bars, geo, ptrs, flags):
        """One warp: keep the ring of q, k, v chunk tiles full."""
        E: gl.constexpr = flags[0]
        REVERSE: gl.constexpr = flags[1]
        H0_MODE: gl.constexpr = flags[2]
        STORE_HT: gl.constexpr = flags[3]
        q_desc, k_desc, v_desc, o_desc = descs
        q_bufs, k_bufs, v_bufs, s_bufs, o_bufs = bufs
        ld_ready, ld_empty, s_ready, s_empty = bars
        i_b, i_h, i_v, T, H, HKV, n_chunks = geo
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        BV: gl.constexpr = v_desc.block_type.shape[2]
        NBUF: gl.constexpr = q_bufs.type.shape[0]
        nbytes: gl.constexpr = q_desc.block_type.nbytes + k_desc.block_type.nbytes + v_desc.block_type.nbytes
        i_hk = i_h // (H // HKV)
        for c in range(n_chunks):
            slot = c % NBUF
            mbarrier.wait(ld_empty.index(slot), ((c // NBUF) & 1) ^ 1)
            t0 = _chunk_row(c, n_chunks, BT, REVERSE)
            bar = ld_ready.index(slot)
            mbarrier.expect(bar, nbytes)
            tma_load(q_desc, [i_b, t0, i_h * D], bar, q_bufs.index(slot))
            tma_load(k_desc, [i_b, t0, i_hk * D], bar, k_bufs.index(slot))
            tma_load(v_desc, [i_b, t0, i_hk * E + i_v * BV], bar, v_bufs.index(slot))

    @gluon.jit
    def _state_chain(S, x_bufs, y_bufs, s_bufs, bars, gam, T, n_chunks, xa_layout: gl.constexpr,
                     dtype: gl.constexpr, REVERSE: gl.constexpr):
        """The state warpgroup's loop, for the forward's S (X = K, Y = V) and the dk / dv pass's R
        (X = Q, Y = dO): per chunk publish S_{c−1} into the state ring, then
        S ← λ^L·S + (X ⊙ λ^(L−1−p))ᵀ·Y as one wgmma (Xᵀ, decayed per token, the register A
        operand; Y straight from the load ring). Returns the state after the last chunk."""
        ld_ready, ld_empty, s_ready, s_empty = bars
        BT: gl.constexpr = x_bufs.type.shape[2]
        D: gl.constexpr = x_bufs.type.shape[3]
        BV: gl.constexpr = y_bufs.type.shape[3]
        NBUF: gl.constexpr = x_bufs.type.shape[0]
        NS: gl.constexpr = s_bufs.type.shape[0]
        pk = _positions(BT, gl.SliceLayout(0, xa_layout), REVERSE)
        for c in range(n_chunks):
            # publish S_{c-1} for the output partition's chunk c
            sb = c % NS
            mbarrier.wait(s_empty.index(sb), ((c // NS) & 1) ^ 1)
            s_bufs.index(sb).store(S.to(dtype))
            fence_async_shared()
            mbarrier.arrive(s_ready.index(sb), count=1)

            slot = c % NBUF
            mbarrier.wait(ld_ready.index(slot), (c // NBUF) & 1)
            n_valid = gl.minimum(T - _chunk_row(c, n_chunks, BT, REVERSE), BT).to(gl.float32)
            if REVERSE:  # a partial chunk shifts every position by L − BT; rows past T get p < 0
                p = pk + (n_valid - BT)
            else:
                p = pk
            xd = gl.where((p >= 0.0) & (p < n_valid), gl.exp(gam * gl.maximum(n_valid - 1.0 - p, 0.0)), 0.0)
            x_t = x_bufs.index(slot).reshape([BT, D]).permute((1, 0)).load(xa_layout)
            x_t = (x_t.to(gl.float32) * xd[None, :]).to(dtype)
            y_s = y_bufs.index(slot).reshape([BT, BV])
            S = warpgroup_mma(x_t, y_s, S * gl.exp(gam * n_valid), is_async=True)
            S, x_t = warpgroup_mma_wait(num_outstanding=0, deps=[S, x_t])
            # the wgmma on this slot is complete; order the register load of x before the refill
            fence_async_shared()
            mbarrier.arrive(ld_empty.index(slot), count=1)
        return S

    @gluon.jit
    def _state_partition(descs, bufs, bars, geo, ptrs, flags):
        """One warpgroup: the state recurrence. S [D, BV] fp32 is the wgmma accumulator; Kᵀ, decayed
        per token, is the register A operand; V comes straight from the ring."""
        E: gl.constexpr = flags[0]
        REVERSE: gl.constexpr = flags[1]
        H0_MODE: gl.constexpr = flags[2]
        STORE_HT: gl.constexpr = flags[3]
        q_desc, k_desc, v_desc, o_desc = descs
        q_bufs, k_bufs, v_bufs, s_bufs, o_bufs = bufs
        i_b, i_h, i_v, T, H, HKV, n_chunks = geo
        h0_ptr, ht_ptr, g_ptr, scale = ptrs
        D: gl.constexpr = q_desc.block_type.shape[2]
        BV: gl.constexpr = v_desc.block_type.shape[2]
        dtype: gl.constexpr = q_desc.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BV, 16])
        ka_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=st_layout, k_width=2)

        gam = gl.load(g_ptr + i_h).to(gl.float32)
        d_rows = gl.arange(0, D, layout=gl.SliceLayout(1, st_layout))
        e_cols = i_v * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, st_layout))
        state_off = (i_b * H + i_h).to(gl.int64) * (D * E)
        s_idx = d_rows[:, None] * E + e_cols[None, :]
        if H0_MODE != H0_NONE:
            if (H0_MODE & H0_TRANSPOSED) != 0:  # h0 holds the state's transpose, [BV·, D]
                S = gl.load(h0_ptr + state_off + e_cols[None, :] * D + d_rows[:, None])
            else:
                S = gl.load(h0_ptr + state_off + s_idx)
            if (H0_MODE & H0_FROM_DST) != 0:  # h0 is dS_T: a reversed backward pass starts from c·dS_T
                S = S * (gl.exp(gl.minimum(-gam, START_CAP)) / scale)
        else:
            S = gl.full([D, BV], 0.0, gl.float32, st_layout)
        S = _state_chain(S, k_bufs, v_bufs, s_bufs, bars, gam, T, n_chunks, ka_layout, dtype, REVERSE)
        if STORE_HT:
            gl.store(ht_ptr + state_off + s_idx, S)

    @gluon.jit
    def _output_partition(descs, bufs, bars, geo, ptrs, flags):
        """The default warpgroup: per chunk three async wgmmas into one [BT, BV] accumulator,
        QKᵀ (its wait deferred past the issue of Q·S), Q·S_{c−1}, then (QKᵀ⊙M)·V; the output tile
        leaves by TMA store, NO tiles in flight."""
        E: gl.constexpr = flags[0]
        REVERSE: gl.constexpr = flags[1]
        H0_MODE: gl.constexpr = flags[2]
        STORE_HT: gl.constexpr = flags[3]
        q_desc, k_desc, v_desc, o_desc = descs
        q_bufs, k_bufs, v_bufs, s_bufs, o_bufs = bufs
        ld_ready, ld_empty, s_ready, s_empty = bars
        i_b, i_h, i_v, T, H, HKV, n_chunks = geo
        h0_ptr, ht_ptr, g_ptr, scale = ptrs
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        BV: gl.constexpr = v_desc.block_type.shape[2]
        NBUF: gl.constexpr = q_bufs.type.shape[0]
        NS: gl.constexpr = s_bufs.type.shape[0]
        NO: gl.constexpr = o_bufs.type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        qk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BT, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BV, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)

        gam = gl.load(g_ptr + i_h).to(gl.float32)
        # loop invariants: the intra-chunk decay mask (scale folded in) and the carried state's
        # decay per row, λ^(p+1)·scale, put on Q in registers before Q·S
        mask = _decay_mask(gam, scale, BT, qk_layout, REVERSE)
        p_a = _positions(BT, gl.SliceLayout(1, a_layout), REVERSE)
        qd = gl.exp(gam * (p_a + 1.0)) * scale
        zero_qk = gl.full([BT, BT], 0.0, gl.float32, qk_layout)
        zero_o = gl.full([BT, BV], 0.0, gl.float32, o_layout)

        for c in range(n_chunks):
            slot = c % NBUF
            mbarrier.wait(ld_ready.index(slot), (c // NBUF) & 1)
            q_s = q_bufs.index(slot).reshape([BT, D])
            k_s = k_bufs.index(slot).reshape([BT, D])
            v_s = v_bufs.index(slot).reshape([BT, BV])
            qk = warpgroup_mma(q_s, k_s.permute((1, 0)), zero_qk, use_acc=False, is_async=True)
            t0 = _chunk_row(c, n_chunks, BT, REVERSE)
            if REVERSE:
                qd = _shifted_decay(p_a, T, t0, gam, scale, BT)
            q_a = (q_s.load(a_layout).to(gl.float32) * qd[:, None]).to(dtype)
            sb = c % NS
            mbarrier.wait(s_ready.index(sb), (c // NS) & 1)
            acc = warpgroup_mma(q_a, s_bufs.index(sb), zero_o, use_acc=False, is_async=True)
            # QKᵀ done, Q·S still in flight (its register operand q_a kept alive through deps)
            qk, q_a = warpgroup_mma_wait(num_outstanding=1, deps=[qk, q_a])
            p = gl.convert_layout((qk * mask).to(dtype), a_layout)
            acc = warpgroup_mma(p, v_s, acc, is_async=True)
            acc, q_a, p = warpgroup_mma_wait(num_outstanding=0, deps=[acc, q_a, p])
            # every wgmma reading the slot and the state buffer is complete: hand both back
            fence_async_shared()
            mbarrier.arrive(ld_empty.index(slot), count=1)
            mbarrier.arrive(s_empty.index(sb), count=1)

            ob = c % NO
            tma.store_wait(NO - 1)  # the store that last used buffer ob has read it
            o_bufs.index(ob).reshape([BT, BV]).store(acc.to(dtype))
            fence_async_shared()
            tma_store(o_desc, [i_b, t0, i_h * E + i_v * BV], o_bufs.index(ob))
        tma.store_wait(0)

    @gluon.jit
    def lightning_fwd_kernel(
        q_desc, k_desc, v_desc, o_desc, h0, ht, g,
        T, H, HKV, scale,
        E: gl.constexpr, S_LAYOUT: gl.constexpr, REVERSE: gl.constexpr, H0_MODE: gl.constexpr,
        STORE_HT: gl.constexpr, NBUF: gl.constexpr, NS: gl.constexpr, NO: gl.constexpr,
        LOAD_WARPS: gl.constexpr, STATE_WARPS: gl.constexpr, LOAD_REGS: gl.constexpr, STATE_REGS: gl.constexpr,
        PDL_WAIT: gl.constexpr = False,
    ):
        """The forward; grid (E // BV, B·H). h0 / ht: fp32 [B, H, D, E] (any pointer when unused);
        H0_MODE (``configs.H0_*``): whether h0 is given, as the state or its transpose, and whether
        it is dS_T to be scaled into a reversed backward pass's start state; g: fp32 [H] log decay;
        S_LAYOUT: the shared layout of a [D, BV] state buffer. PDL_WAIT: launched programmatically
        after a kernel whose outputs it does not read (the dq pass after ``dkdv``), each program
        waits for that kernel to complete before it exits, so the stream order after this one
        holds."""
        BT: gl.constexpr = q_desc.block_type.shape[1]
        D: gl.constexpr = q_desc.block_type.shape[2]
        BV: gl.constexpr = v_desc.block_type.shape[2]
        dtype: gl.constexpr = q_desc.dtype
        i_v = gl.program_id(0)
        i_nh = gl.program_id(1)
        i_b = i_nh // H
        i_h = i_nh % H

        q_bufs = gl.allocate_shared_memory(dtype, [NBUF] + q_desc.block_type.shape, q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [NBUF] + k_desc.block_type.shape, k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [NBUF] + v_desc.block_type.shape, v_desc.layout)
        s_bufs = gl.allocate_shared_memory(dtype, [NS, D, BV], S_LAYOUT)
        o_bufs = gl.allocate_shared_memory(dtype, [NO] + o_desc.block_type.shape, o_desc.layout)
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

        # plain arithmetic, not gl.cdiv / gl.zeros: those are jitted helpers, which become interpreter
        # functions when TRITON_INTERPRET is set at import (the CPU tests) and then cannot compile
        n_chunks = (T + BT - 1) // BT
        descs = (q_desc, k_desc, v_desc, o_desc)
        bufs = (q_bufs, k_bufs, v_bufs, s_bufs, o_bufs)
        bars = (ld_ready, ld_empty, s_ready, s_empty)
        geo = (i_b, i_h, i_v, T, H, HKV, n_chunks)
        ptrs = (h0, ht, g, scale)
        # the flags as one constexpr tuple: passed alone, a constexpr reaches a worker partition as a
        # runtime value (Triton 3.6), and every `if REVERSE:` there would be a branch
        args = (descs, bufs, bars, geo, ptrs, gl.constexpr((E, REVERSE, H0_MODE, STORE_HT)))
        if WS_LIST_FORM:
            gl.warp_specialize([(_output_partition, args), (_load_partition, args), (_state_partition, args)],
                               [LOAD_WARPS, STATE_WARPS], [LOAD_REGS, STATE_REGS])
        else:
            gl.warp_specialize(args, _output_partition, args, [_load_partition, _state_partition],
                               [LOAD_WARPS, STATE_WARPS], [LOAD_REGS, STATE_REGS])
        if PDL_WAIT:
            grid_dependency_wait()
