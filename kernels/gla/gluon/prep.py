"""The GLA prep launch in Gluon for sm_90: the binary tree's factors without leaving the thread.

Why: ``gla_prep_kernel`` (Triton) spends most of its time moving a chunk's cumulative gate between
threads: its tiles spread a column's rows over threads and warps, so every level's boundary value R
goes through shared memory with a barrier, per level and key slice. Here a chunk's [BT, D] tiles
use a layout in which ROW_LANES adjacent lanes hold one key channel's rows (BT / ROW_LANES each):
every level's factors are register arithmetic and a shuffle or two, and they are products of the
last level's (``_level_scores``), so a chunk takes one exponential an element, not one a level.
Only the level products leave the registers: q⊙F and k⊙G go to shared memory once per level and
meet in one wgmma over all of D.

Same arguments, outputs and numerics as ``triton.kernels.gla_prep_kernel``: qd = q⊙e^B,
kd = k⊙e^{Bl − B}, the totals Bl, and the scores A, every exponent ≤ 0 at any gate. Rows in the
tiles are processing positions (reversed rows under REVERSE), so one code path serves both orders.
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, cta_barrier, fence_async_shared, gl, gluon, warpgroup_mma
from ...common.gluon_compat import copy_commit, copy_to_shared, copy_wait

if IMPORT_ERROR is None:

    @gluon.jit
    def _add(a, b):
        return a + b

    @gluon.jit
    def _sequence(cu, T, H, HKV, IS_VARLEN: gl.constexpr):
        """(sequence, query head, kv head, first row, length) of the program row N·H + h."""
        i_nh = gl.program_id(1)
        i_n = i_nh // H
        i_h = i_nh % H
        if IS_VARLEN:
            bos = gl.load(cu + i_n).to(gl.int64)
            seq_len = (gl.load(cu + i_n + 1).to(gl.int64) - bos).to(gl.int32)
        else:
            bos = i_n.to(gl.int64) * T
            seq_len = T
        return i_n, i_h, i_h // (H // HKV), bos, seq_len

    @gluon.jit
    def _chunk_start(seq_len, i_c, BT: gl.constexpr, REVERSE: gl.constexpr):
        """First row of the chunk at processing index i_c; reversed, a last partial chunk starts
        below row 0 (its rows there are masked)."""
        if REVERSE:
            return seq_len - i_c * BT - BT
        else:
            return i_c * BT

    @gluon.jit
    def _stage_gqk(g, q, k, x_base, k_base, x_off, k_off, m, g_s, q_s, k_s, BT: gl.constexpr, LD: gl.constexpr,
                   SCALED: gl.constexpr, BARRIER: gl.constexpr = True):
        """A chunk's gates (fp32, zero past the end: no decay there), q and k (scaled per row by
        ``_row_scale`` under SCALED) into g_s, q_s and k_s, for the column layout to read back: the
        layout change goes through shared memory behind one barrier, where a ``convert_layout`` of
        the gates alone takes several. Loads go through the row-major layout LD of the offsets (in
        the column layout every element of a thread is another row, an address of its own). The last
        chunk read these buffers before its levels, whose barriers order those reads before the
        stores here: no barrier of their own.

        Returns (the rows' inverse scales, ones without SCALED; the diagonal pairs' weights
        Σ_d q_td k_td of the staged values), both in LD's rows: a row is one warp there, so its sum
        is a few shuffles, where the column layout's spans every warp. BARRIER=False leaves the
        barrier to the compiler (inside a warp-specialized partition its barrier pass places one)."""
        g_in = gl.load(g + x_base + x_off, mask=m, other=0.0).to(gl.float32)
        q_in, k_in, q_inv, k_inv, own = _scaled_rows(gl.load(q + x_base + x_off, mask=m, other=0.0),
                                                     gl.load(k + k_base + k_off, mask=m, other=0.0), BT, LD, SCALED)
        g_s.store(g_in)
        q_s.store(q_in)
        k_s.store(k_in)
        if BARRIER:
            cta_barrier()
        return q_inv, k_inv, own

    @gluon.jit
    def _own_from_ring(q_s, k_s, BT: gl.constexpr, LD: gl.constexpr, SCALED: gl.constexpr):
        """``_stage_gqk``'s scales and diagonal weights for a ring slot the copies filled: q and k read
        in LD, scaled per row in place under SCALED (each element written back by the thread that
        read it; the caller's barrier then publishes them)."""
        q_x, k_x, q_inv, k_inv, own = _scaled_rows(q_s.load(LD), k_s.load(LD), BT, LD, SCALED)
        if SCALED:
            q_s.store(q_x)
            k_s.store(k_x)
        return q_inv, k_inv, own

    @gluon.jit
    def _scaled_rows(q_x, k_x, BT: gl.constexpr, LD: gl.constexpr, SCALED: gl.constexpr):
        """q and k tiles [BT, ·] in LD scaled per row under SCALED (``_row_scale``), the rows' inverse
        scales (ones without SCALED) and the diagonal weights Σ_d q_td k_td of the scaled values."""
        if SCALED:
            q_x, q_inv = _row_scale(q_x)
            k_x, k_inv = _row_scale(k_x)
        else:
            q_inv = gl.full([BT], 1.0, gl.float32, gl.SliceLayout(1, LD))
            k_inv = q_inv
        return q_x, k_x, q_inv, k_inv, gl.sum(q_x.to(gl.float32) * k_x.to(gl.float32), axis=1)

    @gluon.jit
    def _chunk_tile(bos, seq_len, i_c, i_h, i_hk, H, HKV, off_ld, col_ld, pos_ld, KD: gl.constexpr,
                    BT: gl.constexpr, REVERSE: gl.constexpr):
        """Where chunk i_c's [BT, KD] tiles sit: (its first row, the scalar int64 bases of a query-head
        and a kv-head tensor at that row, their int32 offsets inside the tile in the row-major layout
        of off_ld / col_ld, the mask of the rows inside the sequence); tile rows in processing order."""
        row0 = bos + _chunk_start(seq_len, i_c, BT, REVERSE)
        x_base = row0 * (H * KD) + i_h * KD
        k_base = row0 * (HKV * KD) + i_hk * KD
        x_off = off_ld[:, None] * (H * KD) + col_ld[None, :]
        k_off = off_ld[:, None] * (HKV * KD) + col_ld[None, :]
        return row0, x_base, k_base, x_off, k_off, (pos_ld < seq_len - i_c * BT)[:, None]

    @gluon.jit
    def _issue_chunk(g, q, k, bos, seq_len, i_c, i_h, i_hk, H, HKV, off_ld, col_ld, pos_ld, g_s, q_s, k_s,
                     KD: gl.constexpr, BT: gl.constexpr, REVERSE: gl.constexpr):
        """Chunk i_c's gates, q and k copied into g_s, q_s, k_s (one slot of the prefetch ring) by
        asynchronous per-thread copies, one commit group; rows past the sequence, and every row of a
        chunk past the last, are zero-filled without a read (no decay there, no score)."""
        _, x_base, k_base, x_off, k_off, m = _chunk_tile(bos, seq_len, i_c, i_h, i_hk, H, HKV, off_ld, col_ld, pos_ld,
                                                         KD, BT, REVERSE)
        copy_to_shared(g_s, g + x_base + x_off, mask=m)
        copy_to_shared(q_s, q + x_base + x_off, mask=m)
        copy_to_shared(k_s, k + k_base + k_off, mask=m)
        copy_commit()

    @gluon.jit
    def _exp_flush(x):
        """e^x as 2^(x·log2 e): ``gl.exp2`` is one MUFU.EX2 that flushes a result below fp32's normal
        range (x < −87.3) to 0, where ``gl.exp`` is the non-flushing form, which ptxas wraps in a
        compare and two multiplies. Every factor here is ≤ 1 and multiplies q, k or their 16-bit
        level operands, so a flushed one is below 1e-38 of the value it scales."""
        return gl.exp2(x * 1.4426950408889634)

    @gluon.jit
    def _chain_start(gg, qq, kk):
        """F, Qc and Kc of the level with groups of 2 positions (``_level_scores``): a later row's
        half-group is itself, so F = e^g and Qc = q⊙e^g; an earlier row's ends at itself, so Kc = k."""
        F = _exp_flush(gg)
        return F, qq * F, kk

    @gluon.jit
    def _chain_decays(F, BT: gl.constexpr, KD: gl.constexpr, LVL: gl.constexpr):
        """F [BT, KD] as groups of 2 << LVL positions, [BT / (2 << LVL), 2 << LVL, KD], with what a
        chain step takes from it: the later halves' rows, and each group's two decays, F at its
        halves' last rows (the earlier half's decay, then the later half's), found in registers by a
        reshape (a shuffle where a group spans two lanes)."""
        SPAN: gl.constexpr = 2 << LVL
        HALF: gl.constexpr = SPAN // 2
        F3 = gl.reshape(F, [BT // SPAN, SPAN, KD])
        L3: gl.constexpr = F3.type.layout
        i3 = gl.arange(0, SPAN, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))[None, :, None]
        # -0.0 elsewhere: x + (-0.0) is x, so the sums fold to the one row
        d_earlier = gl.expand_dims(gl.sum(gl.where(i3 == HALF - 1, F3, -0.0), axis=1), 1)
        d_later = gl.expand_dims(gl.sum(gl.where(i3 == SPAN - 1, F3, -0.0), axis=1), 1)
        return F3, i3 >= HALF, d_earlier, d_later

    @gluon.jit
    def _chain_step(F, Qc, Kc, L: gl.constexpr, BT: gl.constexpr, KD: gl.constexpr, LVL: gl.constexpr):
        """F, Qc and Kc of the level with groups of 4 << LVL positions from those of 2 << LVL
        (``_level_scores``): in each group of 2 << LVL, the later half's rows take the decay of the
        earlier half, the earlier half's rows that of the later half (``_chain_decays``); every
        factor stays ≤ 1."""
        SPAN: gl.constexpr = 2 << LVL
        F3, later, d_earlier, d_later = _chain_decays(F, BT, KD, LVL)
        F3 = gl.where(later, F3 * d_earlier, F3)
        Q3 = gl.reshape(Qc, [BT // SPAN, SPAN, KD])
        Q3 = gl.where(later, Q3 * d_earlier, Q3)
        K3 = gl.reshape(Kc, [BT // SPAN, SPAN, KD])
        K3 = gl.where(later, K3, K3 * d_later)
        return (gl.convert_layout(gl.reshape(F3, [BT, KD]), L), gl.convert_layout(gl.reshape(Q3, [BT, KD]), L),
                gl.convert_layout(gl.reshape(K3, [BT, KD]), L))

    @gluon.jit
    def _stage_level(qe, ke, qe_s, ke_s, OP16: gl.constexpr, FIRST: gl.constexpr):
        """A level's operands into its buffers: fp16 ones channel-major (a thread's rows of one channel
        are contiguous there, so its stores are vectors, and the wgmma reads both operands M/N-major,
        which 16-bit types allow and tf32 does not), tf32 ones row-major. FIRST: the first level, whose
        buffers' last readers (the last chunk's or slice's final product) are behind the staging's
        barrier already."""
        if not FIRST:
            cta_barrier()  # every warpgroup's product that last read these buffers is complete
        if OP16:
            qe_s.store(gl.permute(qe, (1, 0)))
            ke_s.store(gl.permute(ke, (1, 0)))
        else:
            qe_s.store(qe)
            ke_s.store(ke)
        fence_async_shared()
        cta_barrier()

    @gluon.jit
    def _level_operands(Qc, Kc, pos, LVL: gl.constexpr, OP16: gl.constexpr):
        """The operands of the level with groups of 2 << LVL positions: Qc on the later halves' rows, Kc
        on the earlier ones', zeros elsewhere; fp16 under OP16."""
        later = ((pos >> LVL) % 2 == 1)[:, None]
        qe = gl.where(later, Qc, 0.0)
        ke = gl.where(later, 0.0, Kc)
        if OP16:
            qe = qe.to(gl.float16)
            ke = ke.to(gl.float16)
        return qe, ke

    @gluon.jit
    def _level_product(qe_s, ke_s, zero, pos_r, pos_c, LVL: gl.constexpr, OP16: gl.constexpr):
        """The staged level's product over all of D (fp16 or tf32, the default precision of fp32
        operands), masked to the pairs of one group of 2 << LVL positions."""
        if OP16:
            s = warpgroup_mma(qe_s.permute((1, 0)), ke_s, zero, use_acc=False)
        else:
            s = warpgroup_mma(qe_s, ke_s.permute((1, 0)), zero, use_acc=False)
        return _group_mask(s, pos_r, pos_c, 2 << LVL)

    @gluon.jit
    def _row_scales(x):
        """Per row of x [BT, KD] (16-bit, row-major layout), a power of two 2^j that takes its largest
        entry into [0.5, 1), and 2^-j: fp16 level operands then hold any bf16 input, exactly (a 16-bit
        value times 2^j). The power comes from the exponent bits of the row's largest |x|; a row
        spans one warp in the row-major layout, so its max is a warp shuffle."""
        e = (gl.max(gl.abs(x.to(gl.float32)), axis=1).to(gl.int32, bitcast=True) >> 23) & 0xFF
        e = gl.minimum(e, 252)  # the scale's exponent stays normal (a row past 2^125 keeps up to 8)
        return ((253 - e) << 23).to(gl.float32, bitcast=True), ((e + 1) << 23).to(gl.float32, bitcast=True)

    @gluon.jit
    def _row_scale(x):
        """x scaled per row by its ``_row_scales`` power of two, in x's dtype (exact), and the rows'
        inverse scales."""
        scale, inv = _row_scales(x)
        return (x.to(gl.float32) * scale[:, None]).to(x.dtype), inv

    @gluon.jit
    def _store_decayed(qd, kd, qd_s, kd_s, inv_s, x_off, m, LD: gl.constexpr, SCALED: gl.constexpr):
        """qd and kd from their staging buffers (written in the column layout) read back row-major and
        stored at x_off past the chunk's bases qd, kd; under SCALED back to the inputs' scale by the
        rows' inverse scales in inv_s (exact, powers of two)."""
        qd_t = qd_s.load(LD)
        kd_t = kd_s.load(LD)
        if SCALED:
            qd_t = (qd_t.to(gl.float32) * inv_s.index(0).load(gl.SliceLayout(1, LD))[:, None]).to(qd.dtype.element_ty)
            kd_t = (kd_t.to(gl.float32) * inv_s.index(1).load(gl.SliceLayout(1, LD))[:, None]).to(kd.dtype.element_ty)
        gl.store(qd + x_off, qd_t, mask=m)
        gl.store(kd + x_off, kd_t, mask=m)

    @gluon.jit
    def _level_buffers(KW: gl.constexpr, BT: gl.constexpr, OP16: gl.constexpr):
        """The levels' operand buffers over KW key channels: fp16 ones stored channel-major [KW, BT],
        or tf32 ones row-major [BT, KW]; (qe, ke)."""
        if OP16:
            OPT: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KW, BT], gl.float16)
            qe_s = gl.allocate_shared_memory(gl.float16, [KW, BT], OPT)
            ke_s = gl.allocate_shared_memory(gl.float16, [KW, BT], OPT)
        else:
            OP: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, KW], gl.float32)
            qe_s = gl.allocate_shared_memory(gl.float32, [BT, KW], OP)
            ke_s = gl.allocate_shared_memory(gl.float32, [BT, KW], OP)
        return qe_s, ke_s

    @gluon.jit
    def _group_mask(s, pos_r, pos_c, SPAN: gl.constexpr):
        """A level's products kept to the pairs of one group of SPAN positions."""
        return gl.where((pos_r[:, None] // SPAN) == (pos_c[None, :] // SPAN), s, 0.0)

    @gluon.jit
    def _level_scores(lv, gg, qq, kk, pos, pos_r, pos_c, qe_s, ke_s, qd_s, kd_s, zero, L: gl.constexpr,
                      BT: gl.constexpr, KD: gl.constexpr, OP16: gl.constexpr):
        """lv plus the six levels' scores of BT = 64 over KD key channels (groups of 2 up to 64
        positions), added level by level into lv; qd = q⊙e^B and kd = k⊙e^{Bl − B} into qd_s and kd_s
        before the last level's barrier, which publishes them.

        The level factors are products, not exponentials. At the level with groups of S positions a
        row's half-group is the S/2 positions it shares a half with; F = e^{B − B⁻}, B⁻ the cumulative
        gate just before the row's half-group, G = e^{B⁺ − B}, B⁺ the cumulative gate at its last row.
        The level pairs Qc = q⊙F on the later halves' rows with Kc = k⊙G on the earlier ones': an
        earlier half's end is its later half's start, so their product is e^{B_t − B_s}. Doubling S
        multiplies each later row by its group's earlier half's decay and each earlier row by the
        later half's (``_chain_step``): every factor is ≤ 1, e^g a row is the only exponential, and
        a factor over n positions is their n values e^g multiplied with n − 1 fp32 roundings (far
        inside the operands' 2^-11). After the widest level F = e^B and
        G = e^{Bl − B}: Qc and Kc are qd and kd. Operands are fp16 (of qq, kk at the rows' scales),
        or fp32 for tf32 products.
        """
        F, Qc, Kc = _chain_start(gg, qq, kk)
        for lvl in gl.static_range(6):  # groups of 2 << lvl positions
            qe, ke = _level_operands(Qc, Kc, pos, lvl, OP16)
            F, Qc, Kc = _chain_step(F, Qc, Kc, L, BT, KD, lvl)
            if lvl == 5:
                qd_s.store(Qc.to(qd_s.dtype))
                kd_s.store(Kc.to(kd_s.dtype))
            _stage_level(qe, ke, qe_s, ke_s, OP16, lvl == 0)
            lv += _level_product(qe_s, ke_s, zero, pos_r, pos_c, lvl, OP16)
        return lv

    @gluon.jit
    def gla_prep_gluon_kernel(
        q, k, g, cu,
        T, H, HKV,
        qd, kd, bl, A,
        KD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        ROW_LANES: gl.constexpr, OP16: gl.constexpr = False,
        PREFETCH: gl.constexpr = False,
    ):
        """Grid (P, N·H): program (j, row) takes the row's chunks j, j + P, …; KD // 16 warps;
        BT = 64 (six levels), KD 64 or 128. PREFETCH: each chunk's g, q and k arrive by asynchronous
        copies into a two-slot shared ring, the next chunk's issued before this one's levels, so the
        loads' latency overlaps them (one program an SM has nothing else to overlap it with)."""
        WARPS: gl.constexpr = KD * ROW_LANES // 32
        # fp16 level operands take bf16 inputs scaled per row (fp16 inputs fit as they are)
        SCALED: gl.constexpr = OP16 and q.dtype.element_ty == gl.bfloat16
        # a thread holds BT / ROW_LANES rows of one key channel; ROW_LANES lanes a column
        L: gl.constexpr = gl.BlockedLayout([BT // ROW_LANES, 1], [ROW_LANES, 32 // ROW_LANES], [1, WARPS], [0, 1])
        # global loads and stores go through a row-major layout (4 contiguous channels a thread):
        # in L every element of a thread is another row, an address of its own
        LD: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // KD, KD // 4], [WARPS, 1], [1, 0])
        # the wgmma's k step: 8 for tf32 operands, 16 for fp16 ones
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                      instr_shape=[16, BT // (WARPS // 4), 16 if OP16 else 8])
        qe_s, ke_s = _level_buffers(KD, BT, OP16)
        RAW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        if PREFETCH:  # the ring: slot i % 2 holds the program's i-th chunk
            g_r = gl.allocate_shared_memory(g.dtype.element_ty, [2, BT, KD], RAW)
            q_r = gl.allocate_shared_memory(q.dtype.element_ty, [2, BT, KD], RAW)
            k_r = gl.allocate_shared_memory(k.dtype.element_ty, [2, BT, KD], RAW)
        else:
            g_s = gl.allocate_shared_memory(gl.float32, [BT, KD], RAW)
            q_s = gl.allocate_shared_memory(q.dtype.element_ty, [BT, KD], RAW)
            k_s = gl.allocate_shared_memory(k.dtype.element_ty, [BT, KD], RAW)
        # qd and kd on their way from the column layout to the row-major one; the rows' inverse scales
        # of q and k and the diagonal weights until the levels are done
        qd_s = gl.allocate_shared_memory(qd.dtype.element_ty, [BT, KD], RAW)
        kd_s = gl.allocate_shared_memory(kd.dtype.element_ty, [BT, KD], RAW)
        inv_s = gl.allocate_shared_memory(gl.float32, [3, BT], gl.SwizzledSharedLayout(1, 1, 1, [0]))

        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)
        slot0 = bos // BT + i_n  # chunk slots of this sequence in bl (``tiles.chunk_slot``)

        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, L))        # processing position of a tile row
        col = gl.arange(0, KD, layout=gl.SliceLayout(0, L))
        pos_ld = gl.arange(0, BT, layout=gl.SliceLayout(1, LD))
        col_ld = gl.arange(0, KD, layout=gl.SliceLayout(0, LD))
        pos_r = gl.arange(0, BT, layout=gl.SliceLayout(1, MMA))
        pos_c = gl.arange(0, BT, layout=gl.SliceLayout(0, MMA))
        if REVERSE:
            off_ld, off_c = BT - 1 - pos_ld, BT - 1 - pos_c
            off_r = BT - 1 - pos_r
        else:
            off_ld, off_c, off_r = pos_ld, pos_c, pos_r
        zero = gl.zeros([BT, BT], gl.float32, MMA)
        diag = pos_r[:, None] == pos_c[None, :]

        n_chunks = (seq_len + BT - 1) // BT
        if PREFETCH:
            _issue_chunk(g, q, k, bos, seq_len, gl.program_id(0), i_h, i_hk, H, HKV, off_ld, col_ld, pos_ld,
                         g_r.index(0), q_r.index(0), k_r.index(0), KD, BT, REVERSE)
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            row0, x_base, k_base, x_off, k_off, m = _chunk_tile(bos, seq_len, i_c, i_h, i_hk, H, HKV, off_ld, col_ld,
                                                                pos_ld, KD, BT, REVERSE)
            if PREFETCH:
                slot = ((i_c - gl.program_id(0)) // gl.num_programs(0)) % 2
                q_s, k_s = q_r.index(slot), k_r.index(slot)
                # the next chunk's copies into the other slot, which the last chunk read before its
                # levels' barriers; then this chunk's group (all but the newest) and every thread's
                # copies visible
                _issue_chunk(g, q, k, bos, seq_len, i_c + gl.num_programs(0), i_h, i_hk, H, HKV, off_ld, col_ld,
                             pos_ld, g_r.index(1 - slot), q_r.index(1 - slot), k_r.index(1 - slot), KD, BT, REVERSE)
                copy_wait(1)
                cta_barrier()
                gg = g_r.index(slot).load(L).to(gl.float32)
                q_inv, k_inv, own = _own_from_ring(q_s, k_s, BT, LD, SCALED)
                if SCALED:
                    cta_barrier()
            else:
                q_inv, k_inv, own = _stage_gqk(g, q, k, x_base, k_base, x_off, k_off, m, g_s, q_s, k_s, BT, LD, SCALED)
                gg = g_s.load(L)
            # the diagonal and the rows' inverse scales wait in shared memory, not in registers across
            # the levels, whose barriers publish them; each is read back in the layout that takes it
            inv_s.index(2).store(own)
            if SCALED:
                inv_s.index(0).store(q_inv)
                inv_s.index(1).store(k_inv)
            qq = q_s.load(L).to(gl.float32)
            kk = k_s.load(L).to(gl.float32)
            gl.store(bl + ((slot0 + i_c) * H + i_h) * KD + col, gl.sum(gg, axis=0))
            # the six levels of BT = 64, at the rows' scales, undone once (exact: powers of two); qd and
            # kd leave through shared memory in the row-major layout, read back after the levels
            scores = _level_scores(zero, gg, qq, kk, pos, pos_r, pos_c, qe_s, ke_s, qd_s, kd_s, zero, L, BT, KD,
                                   OP16)
            # the diagonal pairs (weight Σ_d q·k, at the rows' scales like the levels' products), where
            # the levels give exact zeros (a level pairs a row only with rows of the other half)
            scores = gl.where(diag, inv_s.index(2).load(gl.SliceLayout(1, MMA))[:, None], scores)
            if SCALED:
                scores = (scores * inv_s.index(0).load(gl.SliceLayout(1, MMA))[:, None]
                          * inv_s.index(1).load(gl.SliceLayout(0, MMA))[None, :])
            a_ptr = A + (row0 * (H * BT) + i_h * BT) + (off_r[:, None] * (H * BT) + off_c[None, :])
            a_valid = (pos_r < seq_len - i_c * BT)[:, None]  # every column: keys past the end score 0
            gl.store(a_ptr, scores.to(A.dtype.element_ty), mask=a_valid)
            _store_decayed(qd + x_base, kd + x_base, qd_s, kd_s, inv_s, x_off, m, LD, SCALED)
        if PREFETCH:  # the last issue (of a chunk past the end: zeros) lands before the program's memory is freed
            copy_wait(0)
