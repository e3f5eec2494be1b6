"""The GLA in-chunk backward launch in Gluon for sm_90: the binary tree's factors in registers.

Why: ``gla_bwd_intra_kernel`` (Triton) is the backward's largest launch. Like the Triton prep
launch, it moves a chunk's cumulative gate between threads for every level's boundary value R,
through shared memory with a barrier, per level and key slice. Here a key slice's [BT, KDS] tiles
use the prep launch's column layout (ROW_LANES adjacent lanes hold one key channel's rows), so
every level's factors are register arithmetic and a shuffle or two. They are products of the last
level's, as the prep launch's are (``_chain_step``): the levels run from groups of 2 up to BT, e^g
is a slice's one exponential, and the chain's last step leaves e^B and e^{Bl − B}, the factors of
the entry and exit states' terms, with no cumulative sum of the gates.

Same arguments, outputs and numerics as ``triton.kernels.gla_bwd_intra_kernel``. With
W = scale·do·vᵀ (s ≤ t), per level the two products P = W_L·k_L and Q = W_Lᵀ·q_L are tf32 wgmmas
whose operands are truncated to tf32 before they reach shared memory, so the copies of a pair in
dg's in-chunk sum (q_L⊙P − k_L⊙Q) come from the same rounded values and cancel. Wᵀ is W's own
registers transposed, not a second product, for the same reason. Rows in the tiles are processing
positions (reversed rows under REVERSE), so one code path serves both orders.

With PAIRS = 16 (ROW_LANES = 4) a thread's 16 rows of a key channel are one block, so the pairs
inside blocks are register arithmetic, as the Triton launch's register form takes them
(``_block_pairs``): fp32, a running product of the gate factors, W_ts one broadcast load a pair
from the chunk's slot of the scratch ``wsc``. Only the two levels above the blocks stay products.

``gla_bwd_intra_exit_gluon_kernel`` adds ``triton.kernels.gla_bwd_exit_kernel``'s terms in the same
launch: v is already in shared memory for W and the tiles' column layout keeps a chunk's prefix and
suffix sums in a thread and a few lanes, so the exit state's part of dk is one more wgmma per key
slice and dg's are register sums; dk and dg leave final, and the exit launch is not needed.
"""
from __future__ import annotations

from ...common.gluon_compat import IMPORT_ERROR, cta_barrier, fence_async_shared, gl, gluon, warpgroup_mma
from ...common.gluon_compat import warpgroup_mma_wait

if IMPORT_ERROR is None:
    from triton import constexpr_function

    from .prep import _add, _chain_decays, _chunk_start, _exp_flush, _sequence

    @gluon.jit
    def _tf32(x):
        """x as a tf32 product reads it (10 of fp32's 23 mantissa bits): the value both copies of
        a pair take in dg's sum."""
        return (x.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)

    @gluon.jit
    def _stage_tiles(v, do, v_base, do_base, v_off, do_off, m, v_s, do_s):
        """A chunk's v and do tiles into shared memory for the W products, behind one barrier: the
        last chunk's products read the buffers before its last slice's outputs' barrier, which orders
        them before these stores."""
        v_in = gl.load(v + v_base + v_off, mask=m, other=0.0)
        do_in = gl.load(do + do_base + do_off, mask=m, other=0.0)
        v_s.store(v_in)
        do_s.store(do_in)
        fence_async_shared()
        cta_barrier()

    @gluon.jit
    def _pair_products(F, G, qq, kk, pos, pos_w, pos_wc, ql_t, kl_t, w_all, wt_all, w_s, wt_s, MW: gl.constexpr,
                       SPAN: gl.constexpr, FIRST: gl.constexpr):
        """One tree level of a key slice staged for its two products, P = W_L·k_L and Q = W_Lᵀ·q_L
        (W_L: W, from w_all / wt_all, kept to the pairs of one group): q_L / k_L, the tf32 operands
        (q⊙F on the later halves' rows, k⊙G on the earlier ones', ``_chain_step``), into ql_t / kl_t,
        W_L and W_Lᵀ into w_s / wt_s. Returns (q_L, k_L, the later halves' rows) in F's layout.
        FIRST: the slice's first product level, whose buffers' last readers (the last slice's final
        products) are behind the slice staging's barrier already."""
        later = ((pos // (SPAN // 2)) % 2 == 1)[:, None]
        ql = _tf32(gl.where(later, qq * F, 0.0))
        kl = _tf32(gl.where(later, 0.0, kk * G))
        group = (pos_w[:, None] // SPAN) == (pos_wc[None, :] // SPAN)
        wl = gl.where(group, w_all.load(MW), 0.0)
        wtl = gl.where(group, wt_all.load(MW), 0.0)
        if not FIRST:
            cta_barrier()  # every warpgroup's products of the last level have read the buffers
        ql_t.store(gl.permute(ql, (1, 0)))
        kl_t.store(gl.permute(kl, (1, 0)))
        w_s.store(wl)
        wt_s.store(wtl)
        fence_async_shared()
        cta_barrier()
        return ql, kl, later

    @gluon.jit
    def _pow2_scale(amax, TOP: gl.constexpr):
        """(2^j, 2^-j) that take amax (fp32, ≥ 0) into [2^TOP, 2^(TOP+1)): exact scales for fp16
        operands. amax's exponent is clamped so that both stay normal fp32 numbers."""
        e = (amax.to(gl.int32, bitcast=True) >> 23) & 0xFF
        e = gl.minimum(gl.maximum(e, TOP + 1), 254 - TOP)
        return ((254 + TOP - e) << 23).to(gl.float32, bitcast=True), ((e - TOP) << 23).to(gl.float32, bitcast=True)

    @gluon.jit
    def _operands16(F, G, qq, kk, sq, sk, pos, SPAN: gl.constexpr):
        """A tree level's fp16 operands: (the later halves' rows, q_L and k_L) with q_L = q⊙F on the
        later halves' rows and k_L = k⊙G on the earlier ones' (``_chain_step``), scaled per key
        channel by sq, sk."""
        later = ((pos // (SPAN // 2)) % 2 == 1)[:, None]
        ql16 = (gl.where(later, qq * F, 0.0) * sq[None, :]).to(gl.float16)
        kl16 = (gl.where(later, 0.0, kk * G) * sk[None, :]).to(gl.float16)
        return later, ql16, kl16

    @gluon.jit
    def _stage_level16(F, G, qq, kk, sq, sk, W16, pos, pos_w, pos_wc, ql_t, kl_t, w_s, SPAN: gl.constexpr,
                       FIRST: gl.constexpr):
        """``_pair_products`` with fp16 operands: q_L and k_L scaled per key channel (sq, sk) and W
        per chunk (W16, already scaled and rounded) by powers of two, so that fp16's range holds them
        at any input scale; fp16 keeps tf32's 10 mantissa bits. Q reads W_L transposed from w_s
        (16-bit operands may be M-major), so both copies of a pair take the same W value. Returns
        (q_L, k_L as fp16 values, the later halves' rows) in F's layout. FIRST: as
        ``_pair_products``'."""
        later, ql16, kl16 = _operands16(F, G, qq, kk, sq, sk, pos, SPAN)
        group = (pos_w[:, None] // SPAN) == (pos_wc[None, :] // SPAN)
        if not FIRST:
            cta_barrier()  # every warpgroup's products of the last level have read the buffers
        ql_t.store(gl.permute(ql16, (1, 0)))
        kl_t.store(gl.permute(kl16, (1, 0)))
        w_s.store(gl.where(group, W16, 0.0))
        fence_async_shared()
        cta_barrier()
        return ql16.to(gl.float32), kl16.to(gl.float32), later

    @gluon.jit
    def _level16_in_mma_layout(F, G, qq, kk, sq, sk, W16, pos, pos_w, pos_wc, pos_m, ql_t, kl_t, w_s, e_t, q_inv,
                               k_inv, w_inv, dq_acc, dk_acc, terms, zero16, MP16: gl.constexpr, SPAN: gl.constexpr):
        """One tree level with fp16 operands whose results stay in the MMA layout: q_L, k_L, W_L and E
        go to this level's buffers (the previous level's are the other set, so no barrier waits for
        its products), both products run at once, and the accumulators (dq, dk and dg's terms, in the
        MMA layout) take them with q_L, k_L and E read back from shared memory: no product changes
        layout. q_inv, k_inv: the channels' undoing scales in the MMA layout's columns; w_inv W's.
        E is the level's factor of each row: F on the later halves' rows, G on the earlier ones'."""
        later, ql16, kl16 = _operands16(F, G, qq, kk, sq, sk, pos, SPAN)
        group = (pos_w[:, None] // SPAN) == (pos_wc[None, :] // SPAN)
        ql_t.store(gl.permute(ql16, (1, 0)))
        kl_t.store(gl.permute(kl16, (1, 0)))
        w_s.store(gl.where(group, W16, 0.0))
        e_t.store(gl.permute(gl.where(later, F, G), (1, 0)))
        fence_async_shared()
        cta_barrier()
        P = warpgroup_mma(w_s, kl_t.permute((1, 0)), zero16, use_acc=False, is_async=True)
        Q = warpgroup_mma(w_s.permute((1, 0)), ql_t.permute((1, 0)), zero16, use_acc=False, is_async=True)
        # the operands as the products took them, back at the inputs' scale (exact: powers of two)
        qm = ql_t.permute((1, 0)).load(MP16).to(gl.float32) * q_inv[None, :]
        km = kl_t.permute((1, 0)).load(MP16).to(gl.float32) * k_inv[None, :]
        Em = e_t.permute((1, 0)).load(MP16)
        later_m = ((pos_m // (SPAN // 2)) % 2 == 1)[:, None]
        P = warpgroup_mma_wait(num_outstanding=1, deps=[P]) * (k_inv * w_inv)[None, :]
        dq_acc += gl.where(later_m, Em, 0.0) * P
        terms += qm * P
        Q = warpgroup_mma_wait(num_outstanding=0, deps=[Q]) * (q_inv * w_inv)[None, :]
        dk_acc += gl.where(later_m, 0.0, Em) * Q
        terms -= km * Q
        return dq_acc, dk_acc, terms

    @constexpr_function
    def _levels(bt):
        """The tree's levels over a chunk of bt positions: log2(bt)."""
        return bt.bit_length() - 1

    @constexpr_function
    def _first_product_level(pairs):
        """The chain level (groups of 2 << level positions) of the tree's first product: 0, or with
        pairs inside blocks of ``pairs`` rows taken in registers the first whose groups span more
        than a block."""
        return (pairs or 1).bit_length() - 1

    @gluon.jit
    def _chain_step(F, G, L: gl.constexpr, BT: gl.constexpr, KDS: gl.constexpr, LVL: gl.constexpr):
        """F and G of the level with groups of 4 << LVL positions from those of 2 << LVL: F_t is
        e^{B_t − B⁻}, B⁻ the cumulative gate before t's half-group, and G_s is e^{B⁺ − B_s}, B⁺ the
        cumulative gate at the end of s's half-group, so a level's factor is F on the later halves'
        rows and G on the earlier ones'. In each group of 2 << LVL the later half's F takes the
        earlier half's decay and the earlier half's G the later half's (``prep._chain_decays``, as
        the prep launch's chain); every factor stays ≤ 1. They start at (e^g, 1), and after the
        step of groups of BT they are (e^B, e^{Bl − B}), the state terms' factors."""
        SPAN: gl.constexpr = 2 << LVL
        F3, later, d_earlier, d_later = _chain_decays(F, BT, KDS, LVL)
        F3 = gl.where(later, F3 * d_earlier, F3)
        G3 = gl.reshape(G, [BT // SPAN, SPAN, KDS])
        G3 = gl.where(later, G3, G3 * d_later)
        return gl.convert_layout(gl.reshape(F3, [BT, KDS]), L), gl.convert_layout(gl.reshape(G3, [BT, KDS]), L)

    @gluon.jit
    def _store_block_pairs(W, wslot, pos_w, pos_wc, C: gl.constexpr):
        """W's strict pairs inside each block of C rows (fp32, as the product left them) into the
        program's scratch slot [NB, C, C] (block, row t, column s; processing positions), where
        ``_block_pairs`` reads each pair's weight for all of a block's channels at once."""
        blk = ((pos_w[:, None] // C) == (pos_wc[None, :] // C)) & (pos_wc[None, :] < pos_w[:, None])
        off = (pos_w[:, None] // C) * (C * C) + (pos_w[:, None] % C) * C + pos_wc[None, :] % C
        gl.store(wslot + off, W, mask=blk)

    @gluon.jit
    def _block_rows(X, BT: gl.constexpr, KDS: gl.constexpr, C: gl.constexpr):
        """X [BT, KDS] (column layout, a thread's rows one block of C) as a tuple of C [BT / C, KDS]
        tensors, item r row r of every block: a thread's own registers, so each masked sum folds to
        a pick. The sum runs on the bits as integers, where x + 0 folds away (a float x + 0.0 does
        not: it would turn −0.0 into 0.0)."""
        X3 = gl.reshape(X, [BT // C, C, KDS]).to(gl.int32, bitcast=True)
        L3: gl.constexpr = X3.type.layout
        i3 = gl.arange(0, C, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))[None, :, None]
        rows = ()
        for r in gl.static_range(C):
            rows = rows + (gl.sum(gl.where(i3 == r, X3, 0), axis=1).to(gl.float32, bitcast=True),)
        return rows

    @gluon.jit
    def _block_tile(rows, L: gl.constexpr, BT: gl.constexpr, KDS: gl.constexpr, C: gl.constexpr):
        """The inverse of ``_block_rows``: C [BT / C, KDS] block rows back into one [BT, KDS] tile in
        L, through selects on constant masks (register moves)."""
        L3: gl.constexpr = gl.expand_dims(rows[0], 1).type.layout
        i3 = gl.arange(0, C, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))[None, :, None]
        X3 = gl.where(i3 == 0, gl.expand_dims(rows[0], 1), 0.0)
        for r in gl.static_range(1, C):
            X3 = gl.where(i3 == r, gl.expand_dims(rows[r], 1), X3)
        return gl.convert_layout(gl.reshape(X3, [BT, KDS]), L)

    @gluon.jit
    def _block_pairs(eg, qq, kk, wslot, L: gl.constexpr, BT: gl.constexpr, KDS: gl.constexpr, C: gl.constexpr):
        """dq and dk [BT, KDS] in L of the pairs s < t inside each block of C rows, in fp32 registers,
        as ``triton.kernels._block_pairs`` takes them (the same operations in the same order): a
        thread holds one channel's C rows of one block, and walking s down from t, e^{B_t − B_s} is
        a running product of the gate factors a = e^{g} (eg) of the rows after s up to t, so no exponent
        is positive and no difference of cumulative gates is formed. Each pair's weight W_ts·f feeds
        dq_t and dk_s at once; W_ts, the same for every channel, is one load a pair from the block's
        row of ``wslot`` (``_store_block_pairs``), a broadcast over the channels."""
        NB: gl.constexpr = BT // C
        a = _block_rows(eg, BT, KDS, C)
        q = _block_rows(qq, BT, KDS, C)
        k = _block_rows(kk, BT, KDS, C)
        LR: gl.constexpr = q[0].type.layout
        w_row = wslot + gl.arange(0, NB, layout=gl.SliceLayout(1, LR)) * (C * C)
        zero = gl.zeros([NB, KDS], gl.float32, LR)
        dq = (zero,)  # no pair ends at a block's first row
        dk = ()  # dk_s starts at its first pair, t = s + 1: w·q_t, what 0 + w·q_t is but for a zero's sign
        for t in gl.static_range(1, C):
            f = a[t]
            w = gl.load(w_row + (t * C + t - 1))[:, None] * f
            acc = w * k[t - 1]
            dk = dk + (w * q[t],)
            for j in gl.static_range(2, t + 1):
                f = f * a[t - j + 1]
                w = gl.load(w_row + (t * C + t - j))[:, None] * f
                acc = acc + w * k[t - j]
                dk = dk[:t - j] + (dk[t - j] + w * q[t],) + dk[t - j + 1:]
            dq = dq + (acc,)
        dk = dk + (zero,)  # no pair starts at a block's last row
        return _block_tile(dq, L, BT, KDS, C), _block_tile(dk, L, BT, KDS, C)

    @gluon.jit
    def _state_slice(st, slot, i_d, hrow, col, KD: gl.constexpr, VD: gl.constexpr, KDS: gl.constexpr):
        """Key slice i_d [KDS, VD] of a per-chunk state [slots, H, D, E] at ``slot`` (chunk slot ·
        H + head): the entry state (hc) or the exit state gradient over scale (dhc)."""
        return gl.load(st + slot * (KD * VD) + (i_d * KDS + hrow)[:, None] * VD + col[None, :])

    @gluon.jit
    def _stage_slice(hc, dhc, slot, i_d, hrow, col, hc_s, dhc_s, g_in, q_in, k_in, gi_s, qi_s, ki_s, KD: gl.constexpr,
                     VD: gl.constexpr, KDS: gl.constexpr, EXIT: gl.constexpr):
        """Key slice i_d of the chunk's entry state (hc) and, with the exit terms, of its exit state
        gradient over scale (dhc, the same slot) into shared memory for their products, and the
        slice's gates (fp32), q and k (loaded row-major) for the column layout to read back, behind
        one barrier that makes the stores (and W's copies) visible to every warpgroup. None is
        needed before them: the last slice read the states' buffers before its outputs' barrier, ki_s
        before its levels' barriers, and gi_s and qi_s last as its outputs, row-major, the layout
        these stores take.
        The tiles' layout change rides on the barrier the states need anyway, where a
        ``convert_layout`` of each takes its own."""
        h_in = _state_slice(hc, slot, i_d, hrow, col, KD, VD, KDS)
        if EXIT:
            y_in = _state_slice(dhc, slot, i_d, hrow, col, KD, VD, KDS)
        hc_s.store(h_in)
        if EXIT:
            dhc_s.store(y_in)
        gi_s.store(g_in)
        qi_s.store(q_in)
        ki_s.store(k_in)
        fence_async_shared()
        cta_barrier()

    @gluon.jit
    def _exit_dk(G, v_s, dhc_s, zero_x, scale, L: gl.constexpr):
        """What the state leaving the chunk adds to dk, dk_x = scale·e^{Bl − B}⊙(v·Yᵀ) [BT, KDS] in L,
        Y the key slice of dS_out/scale in dhc_s: one wgmma against the chunk's v, already staged for
        W, and the factor G = e^{Bl − B} ≤ 1 that the levels' chain leaves (``_chain_step``)."""
        y = gl.convert_layout(warpgroup_mma(v_s, dhc_s.permute((1, 0)), zero_x, use_acc=False), L)
        return y * G * scale

    @gluon.jit
    def _before_rows(x):
        """Σ_{s<t} x_s over a chunk's rows (processing order) in L: an in-thread prefix sum and a few
        lanes, minus each row's own term, as the Triton exit launch takes it for 16-bit inputs; it
        rounds at 6e-8 of that term."""
        return gl.associative_scan(x, 0, _add) - x

    @gluon.jit
    def _intra_chunks(
        q, k, v, g, do, hc, dhc, thr, cu,
        T, H, HKV, scale,
        dq, dk, dg, wsc,
        KD: gl.constexpr, VD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        KDS: gl.constexpr, ROW_LANES: gl.constexpr, OP16: gl.constexpr, EPI: gl.constexpr, PAIRS: gl.constexpr,
        EXIT: gl.constexpr,
    ):
        """Both entries' work (``gla_bwd_intra_gluon_kernel``, ``gla_bwd_intra_exit_gluon_kernel``):
        one body, so that the exit terms sit under a constexpr and the plain form compiles to the
        same binary as before they existed. Without EXIT, dk and dg receive dk's in-chunk part and
        dg's in-chunk suffix sum (fp32), and dhc and thr are placeholders."""
        gl.static_assert(PAIRS == 0 or PAIRS * ROW_LANES == BT, "PAIRS: 0 or a thread's rows, BT / ROW_LANES")
        LEVELS: gl.constexpr = _levels(BT)
        LVL0: gl.constexpr = _first_product_level(PAIRS)
        WARPS: gl.constexpr = KDS * ROW_LANES // 32
        # a thread holds BT / ROW_LANES rows of one key channel; ROW_LANES lanes a column
        L: gl.constexpr = gl.BlockedLayout([BT // ROW_LANES, 1], [ROW_LANES, 32 // ROW_LANES], [1, WARPS], [0, 1])
        # global loads and stores go through row-major layouts (4 contiguous channels a thread)
        LD: gl.constexpr = gl.BlockedLayout([1, 4], [32 * 4 // KDS, KDS // 4], [WARPS, 1], [1, 0])
        LV: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // VD, VD // 8], [WARPS, 1], [1, 0])
        # W [BT, BT] from 16-bit do and v; the level products (tf32) and the state product [BT, KDS]
        MW: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                     instr_shape=[16, BT // (WARPS // 4), 16])
        MP: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                     instr_shape=[16, KDS // (WARPS // 4), 8])
        MX: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                     instr_shape=[16, KDS // (WARPS // 4), 16])
        in_ty: gl.constexpr = q.dtype.element_ty
        v_s = gl.allocate_shared_memory(in_ty, [BT, VD], gl.NVMMASharedLayout.get_default_for([BT, VD], in_ty))
        do_s = gl.allocate_shared_memory(in_ty, [BT, VD], gl.NVMMASharedLayout.get_default_for([BT, VD], in_ty))
        hc_s = gl.allocate_shared_memory(in_ty, [KDS, VD], gl.NVMMASharedLayout.get_default_for([KDS, VD], in_ty))
        if EXIT:  # the slice of the exit state gradient, staged with hc's
            dhc_s = gl.allocate_shared_memory(in_ty, [KDS, VD], gl.NVMMASharedLayout.get_default_for([KDS, VD], in_ty))
        else:
            dhc_s = hc_s
        # a key slice's gates, q and k on their way from the loads' row-major layout to the column one,
        # and its dg, dq and dk back (dk in the k buffer where it has k's dtype, fp32 per query head
        # under GQA has its own)
        RAW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        gi_s = gl.allocate_shared_memory(gl.float32, [BT, KDS], RAW)
        qi_s = gl.allocate_shared_memory(in_ty, [BT, KDS], RAW)
        ki_s = gl.allocate_shared_memory(in_ty, [BT, KDS], RAW)
        if dk.dtype.element_ty == in_ty:
            dk_o = ki_s
        else:
            dk_o = gl.allocate_shared_memory(dk.dtype.element_ty, [BT, KDS], RAW)
        if OP16:
            OPT16: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KDS, BT], gl.float16)
            ql_t = gl.allocate_shared_memory(gl.float16, [KDS, BT], OPT16)
            kl_t = gl.allocate_shared_memory(gl.float16, [KDS, BT], OPT16)
            w_s = gl.allocate_shared_memory(gl.float16, [BT, BT],
                                            gl.NVMMASharedLayout.get_default_for([BT, BT], gl.float16))
            MP16: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WARPS // 4],
                                                           instr_shape=[16, KDS // (WARPS // 4), 16])
            zero16 = gl.zeros([BT, KDS], gl.float32, MP16)
            if EPI:  # a second set of level buffers, and E for the epilogue in the MMA layout
                ql2_t = gl.allocate_shared_memory(gl.float16, [KDS, BT], OPT16)
                kl2_t = gl.allocate_shared_memory(gl.float16, [KDS, BT], OPT16)
                w2_s = gl.allocate_shared_memory(gl.float16, [BT, BT],
                                                 gl.NVMMASharedLayout.get_default_for([BT, BT], gl.float16))
                ET: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
                e_t = gl.allocate_shared_memory(gl.float32, [KDS, BT], ET)
                e2_t = gl.allocate_shared_memory(gl.float32, [KDS, BT], ET)
                pos_m = gl.arange(0, BT, layout=gl.SliceLayout(1, MP16))
        else:
            OPT: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KDS, BT], gl.float32)
            ql_t = gl.allocate_shared_memory(gl.float32, [KDS, BT], OPT)
            kl_t = gl.allocate_shared_memory(gl.float32, [KDS, BT], OPT)
            OPW: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BT, BT], gl.float32)
            w_s = gl.allocate_shared_memory(gl.float32, [BT, BT], OPW)
            wt_s = gl.allocate_shared_memory(gl.float32, [BT, BT], OPW)
            # W and Wᵀ of the chunk, tf32-truncated, which every level masks to its groups
            w_all = gl.allocate_shared_memory(gl.float32, [BT, BT], OPW)
            wt_all = gl.allocate_shared_memory(gl.float32, [BT, BT], OPW)

        i_n, i_h, i_hk, bos, seq_len = _sequence(cu, T, H, HKV, IS_VARLEN)
        slot0 = bos // BT + i_n  # chunk slots of this sequence in hc (``tiles.chunk_slot``)
        # the program's two slots of the scratch, each a chunk's in-block pairs of W
        # [BT / PAIRS, PAIRS, PAIRS]
        wslot0 = wsc + (gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)).to(gl.int64) * (2 * BT * PAIRS)

        pos = gl.arange(0, BT, layout=gl.SliceLayout(1, L))      # processing position of a tile row
        pos_ld = gl.arange(0, BT, layout=gl.SliceLayout(1, LD))
        col_ld = gl.arange(0, KDS, layout=gl.SliceLayout(0, LD))
        pos_lv = gl.arange(0, BT, layout=gl.SliceLayout(1, LV))
        col_lv = gl.arange(0, VD, layout=gl.SliceLayout(0, LV))
        hrow_lv = gl.arange(0, KDS, layout=gl.SliceLayout(1, LV))
        pos_w = gl.arange(0, BT, layout=gl.SliceLayout(1, MW))
        pos_wc = gl.arange(0, BT, layout=gl.SliceLayout(0, MW))
        if REVERSE:
            off_ld, off_lv = BT - 1 - pos_ld, BT - 1 - pos_lv
        else:
            off_ld, off_lv = pos_ld, pos_lv
        zero = gl.zeros([BT, KDS], gl.float32, MP)
        zero_x = gl.zeros([BT, KDS], gl.float32, MX)
        zero_w = gl.zeros([BT, BT], gl.float32, MW)
        causal = pos_wc[None, :] <= pos_w[:, None]
        diag = pos_wc[None, :] == pos_w[:, None]

        n_chunks = (seq_len + BT - 1) // BT
        for i_c in range(gl.program_id(0), n_chunks, gl.num_programs(0)):
            start = _chunk_start(seq_len, i_c, BT, REVERSE)
            # a chunk's slot by its parity: the stores' addresses are then formed in the loop, where
            # the compiler hoisted an invariant slot's 64-bit addresses and kept them live (spilled)
            wslot = wslot0 + (i_c % 2) * (BT * PAIRS)
            row0 = bos + start
            m = (pos_ld < seq_len - i_c * BT)[:, None]
            mv = (pos_lv < seq_len - i_c * BT)[:, None]
            # scalar int64 bases at the chunk's first row, int32 offsets inside it; rows in processing order
            x_base = row0 * (H * KD) + i_h * KD
            k_base = row0 * (HKV * KD) + i_hk * KD
            _stage_tiles(v, do, row0 * (HKV * VD) + i_hk * VD, row0 * (H * VD) + i_h * VD,
                         off_lv[:, None] * (HKV * VD) + col_lv[None, :], off_lv[:, None] * (H * VD) + col_lv[None, :],
                         mv, v_s, do_s)
            W = warpgroup_mma(do_s, v_s.permute((1, 0)), zero_w, use_acc=False)
            W = gl.where(causal, W * scale, 0.0)
            w_diag = gl.convert_layout(gl.sum(gl.where(diag, W, 0.0), axis=1), gl.SliceLayout(1, L))
            if PAIRS > 0:
                # the last chunk's readers are behind its levels' barriers; the slice staging's barrier
                # makes these stores visible to every warp before _block_pairs reads them
                _store_block_pairs(W, wslot, pos_w, pos_wc, PAIRS)
            if OP16:
                # one power of two for the chunk's W: its largest entry near 2^14, fp16's range holds the rest
                sw, w_inv = _pow2_scale(gl.max(gl.max(gl.abs(W), axis=1), axis=0), 14)
                W16 = (W * sw).to(gl.float16)
            else:
                W = _tf32(W)
                w_all.store(W)
                wt_all.store(gl.convert_layout(gl.permute(W, (1, 0)), MW))  # the same values, transposed
            hc_base = (slot0 + i_c) * H + i_h
            for i_d in range(KD // KDS):
                x_off = off_ld[:, None] * (H * KD) + (i_d * KDS + col_ld)[None, :]
                k_off = off_ld[:, None] * (HKV * KD) + (i_d * KDS + col_ld)[None, :]
                _stage_slice(hc, dhc, hc_base, i_d, hrow_lv, col_lv, hc_s, dhc_s,
                             gl.load(g + x_base + x_off, mask=m, other=0.0).to(gl.float32),
                             gl.load(q + x_base + x_off, mask=m, other=0.0), gl.load(k + k_base + k_off, mask=m, other=0.0),
                             gi_s, qi_s, ki_s, KD, VD, KDS, EXIT)
                gg = gi_s.load(L)
                qq = qi_s.load(L).to(gl.float32)
                kk = ki_s.load(L).to(gl.float32)
                # the levels' factors from e^g by the chain (``_chain_step``): the slice's one exponential
                F = _exp_flush(gg)
                G = gl.full([BT, KDS], 1.0, gl.float32, L)
                # the diagonal pairs (weight 1) go straight into dq and dk, never into dg's terms
                dq_acc = w_diag[:, None] * kk
                dk_acc = w_diag[:, None] * qq
                if PAIRS > 0:
                    # the pairs inside blocks, fp32 from registers, while few accumulators are live
                    dq_in, dk_in = _block_pairs(F, qq, kk, wslot, L, BT, KDS, PAIRS)
                    dq_acc += dq_in
                    dk_acc += dk_in
                    # dg's terms: q_L⊙P − k_L⊙Q of the strict pairs, then q⊙dq_x
                    terms = qq * dq_in - kk * dk_in
                else:
                    terms = gl.zeros([BT, KDS], gl.float32, L)
                if OP16:
                    # per key channel powers of two: |q⊙F|, |k⊙G| ≤ |q|, |k| (factors ≤ 1) go below 2^15
                    sq, q_inv = _pow2_scale(gl.max(gl.abs(qq), axis=0), 14)
                    sk, k_inv = _pow2_scale(gl.max(gl.abs(kk), axis=0), 14)
                # the chain runs up from groups of 2; a level's products (groups of 2 << lvl) take its
                # factors before the step to the next. With EPI the accumulators stay in the products'
                # layout across the levels.
                if OP16 and EPI:
                    q_inv_m = gl.convert_layout(q_inv, gl.SliceLayout(0, MP16))
                    k_inv_m = gl.convert_layout(k_inv, gl.SliceLayout(0, MP16))
                    dq_m = gl.convert_layout(dq_acc, MP16)
                    dk_m = gl.convert_layout(dk_acc, MP16)
                    terms_m = gl.convert_layout(terms, MP16)
                for lvl in gl.static_range(LEVELS):
                    if lvl >= LVL0:
                        if OP16 and EPI:
                            if (lvl - LVL0) % 2 == 0:
                                dq_m, dk_m, terms_m = _level16_in_mma_layout(
                                    F, G, qq, kk, sq, sk, W16, pos, pos_w, pos_wc, pos_m, ql_t, kl_t, w_s, e_t, q_inv_m,
                                    k_inv_m, w_inv, dq_m, dk_m, terms_m, zero16, MP16, 2 << lvl)
                            else:
                                dq_m, dk_m, terms_m = _level16_in_mma_layout(
                                    F, G, qq, kk, sq, sk, W16, pos, pos_w, pos_wc, pos_m, ql2_t, kl2_t, w2_s, e2_t,
                                    q_inv_m, k_inv_m, w_inv, dq_m, dk_m, terms_m, zero16, MP16, 2 << lvl)
                        elif OP16:
                            ql, kl, later = _stage_level16(F, G, qq, kk, sq, sk, W16, pos, pos_w, pos_wc, ql_t, kl_t,
                                                           w_s, 2 << lvl, lvl == LVL0)
                            # P = W_L·k_L and Q = W_Lᵀ·q_L in the operands' scales, then the scales undone (exact)
                            P = gl.convert_layout(warpgroup_mma(w_s, kl_t.permute((1, 0)), zero16, use_acc=False), L)
                            P = P * (k_inv * w_inv)[None, :]
                            dq_acc += gl.where(later, F, 0.0) * P
                            terms += ql * (P * q_inv[None, :])
                            Q = gl.convert_layout(warpgroup_mma(w_s.permute((1, 0)), ql_t.permute((1, 0)), zero16,
                                                                use_acc=False), L)
                            Q = Q * (q_inv * w_inv)[None, :]
                            dk_acc += gl.where(later, 0.0, G) * Q
                            terms -= kl * (Q * k_inv[None, :])
                        else:
                            ql, kl, later = _pair_products(F, G, qq, kk, pos, pos_w, pos_wc, ql_t, kl_t, w_all, wt_all,
                                                           w_s, wt_s, MW, 2 << lvl, lvl == LVL0)
                            P = gl.convert_layout(warpgroup_mma(w_s, kl_t.permute((1, 0)), zero, use_acc=False), L)
                            dq_acc += gl.where(later, F, 0.0) * P
                            terms += ql * P
                            Q = gl.convert_layout(warpgroup_mma(wt_s, ql_t.permute((1, 0)), zero, use_acc=False), L)
                            dk_acc += gl.where(later, 0.0, G) * Q
                            terms -= kl * Q
                    F, G = _chain_step(F, G, L, BT, KDS, lvl)
                if OP16 and EPI:
                    dq_acc = gl.convert_layout(dq_m, L)
                    dk_acc = gl.convert_layout(dk_m, L)
                    terms = gl.convert_layout(terms_m, L)
                # the state terms, with the factors the chain leaves: F = e^B, G = e^{Bl − B}.
                # dq's state part: scale·e^{B}⊙(do·S_inᵀ)
                x = gl.convert_layout(warpgroup_mma(do_s, hc_s.permute((1, 0)), zero_x, use_acc=False), L)
                dq_x = x * F * scale
                dq_acc += dq_x
                terms += qq * dq_x
                if EXIT:
                    dk_x = _exit_dk(G, v_s, dhc_s, zero_x, scale, L)
                    dk_acc += dk_x
                    col = i_d * KDS + gl.arange(0, KDS, layout=gl.SliceLayout(0, L))
                    exits = _before_rows(kk * dk_x) + gl.load(thr + hc_base * KD + col)[None, :]
                # the outputs leave row-major through the slice's input buffers (read into registers at
                # its start, the levels' barriers since): one barrier for the three tiles
                qi_s.store(dq_acc.to(dq.dtype.element_ty))
                dk_o.store(dk_acc.to(dk.dtype.element_ty))
                # the suffix sum in processing order: dg's pairs that end at or after each row
                dg_t = gl.associative_scan(terms, 0, _add, reverse=True)
                if EXIT:  # dg's pairs from a row before t to the exit state, and from the entry state to it
                    dg_t += exits
                gi_s.store(dg_t)  # fp32 here, rounded to dg's dtype once, as it leaves
                cta_barrier()
                gl.store(dq + x_base + x_off, qi_s.load(LD), mask=m)
                gl.store(dk + x_base + x_off, dk_o.load(LD), mask=m)
                gl.store(dg + x_base + x_off, gi_s.load(LD).to(dg.dtype.element_ty), mask=m)

    @gluon.jit
    def gla_bwd_intra_gluon_kernel(
        q, k, v, g, do, hc, cu,
        T, H, HKV, scale,
        dq, dki, dgq, wsc,
        KD: gl.constexpr, VD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        KDS: gl.constexpr, ROW_LANES: gl.constexpr, OP16: gl.constexpr = False, EPI: gl.constexpr = False,
        PAIRS: gl.constexpr = 0,
    ):
        """Grid (P, N·H): program (j, row) takes the row's chunks j, j + P, …, each over D in slices
        of KDS key channels; KDS·ROW_LANES / 32 warps; BT = 64 (six levels), KD and VD 64 or 128.
        PAIRS = 0 takes every pair through the six levels. PAIRS = BT / ROW_LANES (a thread's rows,
        one block) takes the pairs inside blocks of PAIRS rows in fp32 registers (``_block_pairs``)
        and only the levels above them (the pairs across blocks) as products. wsc: [P·N·H, 2·BT·PAIRS]
        fp32 scratch, two slots a program, each a chunk's in-block pairs of W (unused when PAIRS = 0).
        ``gla_bwd_intra_kernel``'s arguments, so the torch path and the JAX bridge launch either."""
        _intra_chunks(q, k, v, g, do, hc, hc, dgq, cu, T, H, HKV, scale, dq, dki, dgq, wsc,
                      KD, VD, REVERSE, IS_VARLEN, BT, KDS, ROW_LANES, OP16, EPI, PAIRS, False)

    @gluon.jit
    def gla_bwd_intra_exit_gluon_kernel(
        q, k, v, g, do, hc, dhc, thr, cu,
        T, H, HKV, scale,
        dq, dk, dg, wsc,
        KD: gl.constexpr, VD: gl.constexpr, REVERSE: gl.constexpr, IS_VARLEN: gl.constexpr, BT: gl.constexpr,
        KDS: gl.constexpr, ROW_LANES: gl.constexpr, OP16: gl.constexpr = False, EPI: gl.constexpr = False,
        PAIRS: gl.constexpr = 0,
    ):
        """``gla_bwd_intra_gluon_kernel`` with ``gla_bwd_exit_kernel``'s terms too, so dk and dg leave
        the launch final and the exit launch does not run: per key slice, dhc's slice (dS_out/scale,
        input dtype, the slot of hc's) is staged beside hc's, one more wgmma v·Yᵀ gives
        dk_x = scale·e^{Bl − B}⊙(v·Yᵀ), added to dk (stored in dk's dtype: the input's, or fp32 per
        query head under GQA), and dg_t = (its in-chunk suffix sum) + Σ_{s<t}[k⊙dk_x]_s + thr (dg's
        entry-to-exit pairs, [slots, H, D] fp32) is stored in dg's dtype (g's). Every form of the
        kernel takes them (OP16, EPI, PAIRS)."""
        _intra_chunks(q, k, v, g, do, hc, dhc, thr, cu, T, H, HKV, scale, dq, dk, dg, wsc,
                      KD, VD, REVERSE, IS_VARLEN, BT, KDS, ROW_LANES, OP16, EPI, PAIRS, True)
