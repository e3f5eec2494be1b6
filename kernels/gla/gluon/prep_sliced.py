"""The GLA prep launch in Gluon, over the head dim in key slices: two programs an SM.

Why: ``prep.gla_prep_gluon_kernel`` holds all of D in one program of D / 16 warps at 255 registers,
so one program fills an SM, and each level's chain (exponentials, the operands' shared-memory
stores, two barriers, the wgmma) runs with nothing of another program to overlap it. Here a
program takes a chunk's key channels KS at a time (KS·ROW_LANES / 32 warps): the registers a
thread holds are the same, the threads a program fewer, so two programs share an SM. The slices'
level products add up in one [BT, BT] accumulator, and bf16 rows take their fp16 scales from whole
rows, read once a chunk, so every slice's products share them.

Same arguments, outputs and numerics as ``prep.gla_prep_gluon_kernel`` (whose helpers it uses).
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, cta_barrier, gl, gluon

if IMPORT_ERROR is None:
    from .prep import (_chunk_start, _level_buffers, _level_scores, _row_scales, _sequence,
                       _store_decayed)

    @gluon.jit
    def _stage_slice(g, q, k, x_base, k_base, x_off, k_off, m, g_s, q_s, k_s, q_sc, k_sc, own,
                     SCALED: gl.constexpr, OWN: gl.constexpr):
        """A key slice of a chunk: its gates (fp32, zero past the end: no decay there), q and k tiles
        (times their rows' scales q_sc, k_sc under SCALED) into g_s, q_s and k_s for the column layout
        to read back, behind one barrier (the last slice's readers of the buffers are behind its
        levels' barriers); returns ``own`` plus, under OWN, the slice's part of the diagonal weights
        Σ_d q_td k_td, summed in the loads' row-major layout (a row within one warp: shuffles, no
        barrier). Loads go through that layout too (in the column layout every element of a thread is
        another row, an address of its own)."""
        g_in = gl.load(g + x_base + x_off, mask=m, other=0.0).to(gl.float32)
        q_in = gl.load(q + x_base + x_off, mask=m, other=0.0)
        k_in = gl.load(k + k_base + k_off, mask=m, other=0.0)
        if SCALED:
            q_in = (q_in.to(gl.float32) * q_sc[:, None]).to(q_in.dtype)
            k_in = (k_in.to(gl.float32) * k_sc[:, None]).to(k_in.dtype)
        if OWN:
            own += gl.sum(q_in.to(gl.float32) * k_in.to(gl.float32), axis=1)
        g_s.store(g_in)
        q_s.store(q_in)
        k_s.store(k_in)
        cta_barrier()
        return own

    @gluon.jit
    def _chunk_row_scales(q, k, x_base, k_base, H, HKV, rows, BT: gl.constexpr, KD: gl.constexpr,
                          REVERSE: gl.constexpr, LF: gl.constexpr, LD: gl.constexpr):
        """The row scales of a chunk's q and k over all of D (``_row_scales``: the scale in LD's rows,
        its inverse in LF's) and the diagonal pairs' weights Σ_d q_td k_td of the scaled rows (LF's
        rows), from whole rows read in LF; ``rows`` valid rows."""
        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, LF))
        col = gl.arange(0, KD, layout=gl.SliceLayout(0, LF))
        off = (BT - 1 - pos) if REVERSE else pos
        m = (pos < rows)[:, None]
        q_in = gl.load(q + x_base + off[:, None] * (H * KD) + col[None, :], mask=m, other=0.0)
        k_in = gl.load(k + k_base + off[:, None] * (HKV * KD) + col[None, :], mask=m, other=0.0)
        q_sc, q_inv = _row_scales(q_in)
        k_sc, k_inv = _row_scales(k_in)
        # the staged values: a 16-bit value times its row's power of two, exact
        qs = (q_in.to(gl.float32) * q_sc[:, None]).to(q_in.dtype).to(gl.float32)
        ks = (k_in.to(gl.float32) * k_sc[:, None]).to(k_in.dtype).to(gl.float32)
        return (gl.convert_layout(q_sc, gl.SliceLayout(1, LD)), q_inv,
                gl.convert_layout(k_sc, gl.SliceLayout(1, LD)), k_inv, gl.sum(qs * ks, axis=1))

    @gluon.jit
    def gla_prep_sliced_gluon_kernel(
        q, k, g, cu,
        T, H, HKV,
        qd, kd, bl, A,
        KD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        ROW_LANES: gl.constexpr, OP16: gl.constexpr, KS: gl.constexpr,
    ):
        """Grid (P, N·H): program (j, row) takes the row's chunks j, j + P, …; BT = 64 (six levels),
        KD 64 or 128, in slices of KS < KD key channels with KS·ROW_LANES / 32 warps. The slices'
        level products add up in one accumulator: a narrower slice is fewer warps a program, so more
        programs share an SM and overlap each other's level chains (all of D is
        ``prep.gla_prep_gluon_kernel``'s)."""
        gl.static_assert(0 < KS and KS < KD, "KS: a slice narrower than the head dim")
        WARPS: gl.constexpr = KS * ROW_LANES // 32
        # fp16 level operands take bf16 inputs scaled per row (fp16 inputs fit as they are)
        SCALED: gl.constexpr = OP16 and q.dtype.element_ty == gl.bfloat16
        # a thread holds BT / ROW_LANES rows of one key channel; ROW_LANES lanes a column
        L: gl.constexpr = gl.BlockedLayout([BT // ROW_LANES, 1], [ROW_LANES, 32 // ROW_LANES], [1, WARPS], [0, 1])
        # global loads and stores go through a row-major layout (4 contiguous channels a thread):
        # in L every element of a thread is another row, an address of its own
        LD: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // KS, KS // 4], [WARPS, 1], [1, 0])
        # the same over all of D: the rows' scales come from whole rows, so that every slice's level
        # products share them and the scores are scaled back once
        LF: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // KD, KD // 4], [WARPS, 1], [1, 0])
        # the wgmma's k step: 8 for tf32 operands, 16 for fp16 ones
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                      instr_shape=[16, BT // (WARPS // 4), 16 if OP16 else 8])
        qe_s, ke_s = _level_buffers(KS, BT, OP16)
        RAW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        g_s = gl.allocate_shared_memory(gl.float32, [BT, KS], RAW)
        q_s = gl.allocate_shared_memory(q.dtype.element_ty, [BT, KS], RAW)
        k_s = gl.allocate_shared_memory(k.dtype.element_ty, [BT, KS], RAW)
        # a slice's qd and kd on their way from the column layout to the row-major one; a chunk's
        # inverse row scales and diagonal weights
        qd_s = gl.allocate_shared_memory(qd.dtype.element_ty, [BT, KS], RAW)
        kd_s = gl.allocate_shared_memory(kd.dtype.element_ty, [BT, KS], RAW)
        inv_s = gl.allocate_shared_memory(gl.float32, [3, BT], gl.SwizzledSharedLayout(1, 1, 1, [0]))

        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)
        slot0 = bos // BT + i_n  # chunk slots of this sequence in bl (``tiles.chunk_slot``)

        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, L))        # processing position of a tile row
        col = gl.arange(0, KS, layout=gl.SliceLayout(0, L))
        pos_ld = gl.arange(0, BT, layout=gl.SliceLayout(1, LD))
        col_ld = gl.arange(0, KS, layout=gl.SliceLayout(0, LD))
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
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            start = _chunk_start(seq_len, i_c, BT, REVERSE)
            m = (pos_ld < seq_len - i_c * BT)[:, None]
            # scalar int64 bases at the chunk's first row, int32 offsets inside it; tile rows in
            # processing order
            row0 = bos + start
            if SCALED:
                q_sc, q_inv, k_sc, k_inv, own_f = _chunk_row_scales(
                    q, k, row0 * (H * KD) + i_h * KD, row0 * (HKV * KD) + i_hk * KD, H, HKV, seq_len - i_c * BT, BT, KD,
                    REVERSE, LF, LD)
            else:  # fp16 inputs, or tf32 products: no scales; the diagonal summed slice by slice
                q_sc = gl.full([BT], 1.0, gl.float32, gl.SliceLayout(1, LD))
                k_sc, q_inv, k_inv = q_sc, q_sc, q_sc
            own = gl.zeros([BT], gl.float32, gl.SliceLayout(1, LD))
            scores = zero
            # a loop, not unrolled: unrolled, the next slice's loads are hoisted over this one's
            # levels and both slices' tiles live at once
            for c0 in range(0, KD, KS):
                x_base = row0 * (H * KD) + i_h * KD
                k_base = row0 * (HKV * KD) + i_hk * KD
                x_off = off_ld[:, None] * (H * KD) + (c0 + col_ld)[None, :]
                k_off = off_ld[:, None] * (HKV * KD) + (c0 + col_ld)[None, :]
                own = _stage_slice(g, q, k, x_base, k_base, x_off, k_off, m, g_s, q_s, k_s, q_sc, k_sc, own,
                                   SCALED, not SCALED)
                if SCALED and c0 == 0:
                    # the inverse scales and the diagonal wait in shared memory, not in registers across
                    # the slices' levels (the last chunk's readers are past the staging's barriers)
                    inv_s.index(0).store(q_inv)
                    inv_s.index(1).store(k_inv)
                    inv_s.index(2).store(own_f)
                gg = g_s.load(L)
                qq = q_s.load(L).to(gl.float32)
                kk = k_s.load(L).to(gl.float32)
                gl.store(bl + ((slot0 + i_c) * H + i_h) * KD + c0 + col, gl.sum(gg, axis=0))
                # the six levels of BT = 64, into the chunk's scores; qd and kd leave row-major through
                # shared memory, published by the last level's barrier
                scores = _level_scores(scores, gg, qq, kk, pos, pos_r, pos_c, qe_s, ke_s, qd_s, kd_s, zero,
                                       L, BT, KS, OP16)
                _store_decayed(qd + x_base, kd + x_base, qd_s, kd_s, inv_s, x_off, m, LD, SCALED)
            # the levels pair no position with itself
            if SCALED:
                scores = gl.where(diag, inv_s.index(2).load(gl.SliceLayout(1, MMA))[:, None], scores)
                # back to the inputs' scale: exact, powers of two
                scores = (scores * inv_s.index(0).load(gl.SliceLayout(1, MMA))[:, None]
                          * inv_s.index(1).load(gl.SliceLayout(0, MMA))[None, :])
            else:
                scores = gl.where(diag, gl.convert_layout(own, gl.SliceLayout(1, MMA))[:, None], scores)
            a_ptr = A + (row0 * (H * BT) + i_h * BT) + (off_r[:, None] * (H * BT) + off_c[None, :])
            a_valid = (pos_r < seq_len - i_c * BT)[:, None]  # every column: keys past the end score 0
            gl.store(a_ptr, scores.to(A.dtype.element_ty), mask=a_valid)
