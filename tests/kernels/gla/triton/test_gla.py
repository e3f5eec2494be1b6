"""The Triton GLA kernels against the fp64 token-by-token reference.

On a machine without a GPU the kernels run in the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), where bf16 computes as on the GPU (``interpreter_bf16``). Outputs and every
gradient (q, k, v, g, initial_state) are checked with random ``do`` and ``dS_T``; every buffer the kernels must fully
write is NaN-poisoned first. The interpreter's chunk is 16 tokens, so T = 37 crosses two chunk
boundaries and ends in a partial chunk.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gla.triton import gla_triton
from lattnbench.kernels.gla.triton import ops as gla_ops
from lattnbench.kernels.gla.triton.naive import gla_naive
from lattnbench.measure.tolerance import FLA_TOLERANCE, TOLERANCE, err_ratio
from gla_testutil import check, gates
from triton_testutil import record_launches


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """NaN-fill every output buffer the kernels allocate, so an unwritten element shows (the int32
    row flags get -7, which no launch writes)."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan") if dtype.is_floating_point else -7, dtype=dtype, device=device)

    monkeypatch.setattr(gla_ops, "_empty", nan_empty)


@pytest.mark.parametrize("reverse", [False, True])
def test_gqa_initial_state_odd_t_non_pow2_dims(reverse):
    check(seed=1, h=2, hkv=1, d=24, e=40, reverse=reverse, scale=0.3)


def test_fp16_batch_d_smaller_than_e():
    check(seed=2, b=2, h=1, d=16, e=40, dtype=torch.float16, normaliser=8.0)


@pytest.mark.parametrize("reverse, normaliser", [(False, 16.0), (True, 16.0), (False, 0.1), (True, 1.0)])
def test_varlen_with_a_length_one_sequence(reverse, normaliser):
    check(seed=3, t=30, h=2, hkv=1, d=16, e=24, reverse=reverse, cu_seqlens=[0, 12, 13, 30], normaliser=normaliser)


@pytest.mark.parametrize("normaliser", [16.0, 1.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_any_gate_norm(dtype, normaliser):
    # fla's recipes (log σ(x)/1 and /0.1, about −0.8 and −8 per token: a chunk's cumulative gate
    # reaches −500, far past e^{±88}) beside the GLA paper's /16, with an initial state, GQA, odd T,
    # reverse; every tensor within the dtype's tolerance (fp16: 2e-3, under fla's 0.005)
    check(seed=12, t=37, h=2, hkv=1, d=24, e=40, dtype=dtype, normaliser=normaliser, reverse=normaliser == 1.0)


@pytest.mark.parametrize("normaliser", [16.0, 1.0, 0.1])
def test_bf16_at_any_gate_norm_within_flas_rule(normaliser):
    # bf16 inputs (q, k, v and do; g in fp32) at fla's recipes' gate norms, with an initial state,
    # GQA, odd T, reverse: every tensor, dg included, within fla's 0.005 of fp64
    check(seed=12, t=37, h=2, hkv=1, d=24, e=40, dtype=torch.bfloat16, normaliser=normaliser,
          reverse=normaliser == 1.0, tol=FLA_TOLERANCE)


def test_gates_deeper_than_fp32_exponents_at_the_gpu_chunk(monkeypatch):
    # the GPU's chunk (64 rows, six levels) at fla's strongest gates in fp32 and at gates of about
    # −80 per token in fp16 (every state wiped at each token): a chunk's cumulative gate reaches
    # −500 and −5000, far past e^{±88}. There dh0, about e^{−8000}, is below fp32's range: finite only
    monkeypatch.setitem(gla_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gla_ops._INTERP_META, "BS", 32)
    check(seed=13, t=100, h=1, d=16, e=16, normaliser=0.1)
    check(seed=14, t=100, h=1, d=16, e=16, normaliser=0.01, dtype=torch.float16, reverse=True, skip=("dh0",))


def test_g_in_bf16_and_fp16_is_cumulated_in_fp32():
    # the kernels load g in its own dtype and cumulate it in fp32 (no fp32 copy on the host); dg
    # comes back in g's dtype. The reference takes the same rounded gates
    gen = torch.Generator().manual_seed(15)
    b, t, h, d, e = 1, 37, 2, 16, 24
    q, k = torch.randn(b, t, h, d, generator=gen), torch.randn(b, t, h, d, generator=gen)
    v, do = torch.randn(b, t, h, e, generator=gen), torch.randn(b, t, h, e, generator=gen)
    for gdt in (torch.bfloat16, torch.float16):
        g = gates(gen, (b, t, h, d), 1.0).to(gdt).requires_grad_(True)
        o, _ = gla_triton(q, k, v, g, output_final_state=False)
        (dg,) = torch.autograd.grad(o, g, do)
        gr = g.detach().double().requires_grad_(True)
        ro, _ = gla_naive(q.double(), k.double(), v.double(), gr)
        (rdg,) = torch.autograd.grad(ro, gr, do.double())
        assert dg.dtype == gdt
        assert err_ratio(o, ro) <= TOLERANCE["fp32"]
        assert err_ratio(dg.float(), rdg) <= 2 * torch.finfo(gdt).eps  # dg's own rounding to g's dtype


def _record_launches(monkeypatch) -> list:
    """Replace every GLA kernel with a spy that logs (kernel, grid, keyword arguments) and runs it."""
    from lattnbench.kernels.gla.triton import kernels as gla_kernels
    from lattnbench.kernels.common.launch import forget_tuning

    log = record_launches(monkeypatch, gla_kernels, ("gla_prep_kernel", "gla_fwd_kernel", "gla_bwd_h_kernel",
                                                     "gla_bwd_dh_kernel", "gla_bwd_intra_kernel", "gla_bwd_exit_kernel",
                                                     "gla_bwd_v_kernel"))
    forget_tuning()
    return log


def test_the_launches_do_not_depend_on_the_gates(monkeypatch):
    # one code path: the same kernels, grids and configs at the GLA paper's gates and at gates of
    # about −80 per token, and no launch reads a flag computed from the gates
    log = _record_launches(monkeypatch)
    runs = []
    for normaliser in (16.0, 0.01):
        del log[:]
        check(seed=16, t=37, h=2, hkv=1, d=24, e=40, normaliser=normaliser)
        runs.append(list(log))
    assert [name for name, _, _ in runs[0]] == ["gla_prep_kernel", "gla_fwd_kernel", "gla_bwd_h_kernel",
                                               "gla_bwd_dh_kernel", "gla_bwd_intra_kernel", "gla_bwd_exit_kernel",
                                               "gla_bwd_v_kernel"]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("reverse, every", [(False, 2), (True, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_only_the_deepest_levels(dtype, reverse, every):
    # walls of −30 every 2 or 4 rows leave only the pairs inside those blocks (the launches' last
    # one or two levels and the self terms) in o, dq, dk, dv, dg: a wrong level, column or partial
    # shows in full. Varlen with sequences ending inside a block, GQA, an initial state. dh0, about
    # e^{−30}, rounds to nothing in the fp16 sweeps' products: finite only there
    skip = ("dh0",) if dtype == torch.float16 else ()
    check(seed=21, t=45, h=2, hkv=1, d=24, e=40, dtype=dtype, reverse=reverse, cu_seqlens=[0, 13, 14, 45],
          normaliser=1.0, wall=-30.0, every=every, skip=skip)


def test_only_the_pairs_inside_blocks_at_the_gpu_chunk(monkeypatch):
    # the GPU's chunk (64 rows, six levels), walls every 16 rows: the four deepest levels alone,
    # a partial last chunk
    monkeypatch.setitem(gla_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gla_ops._INTERP_META, "BS", 32)
    check(seed=22, t=91, h=1, d=16, e=16, normaliser=4.0, wall=-30.0, every=16)
    check(seed=23, t=91, h=1, d=16, e=16, normaliser=4.0, wall=-30.0, every=16, reverse=True, dtype=torch.float16,
          skip=("dh0",))


@pytest.mark.parametrize("tree, normaliser, dtype, reverse", [(1, 1.0, torch.float32, True),
                                                              (2, 0.1, torch.float16, False)])
def test_in_block_pairs_in_registers(monkeypatch, tree, normaliser, dtype, reverse):
    # the in-chunk launch's upper tree levels through tensor-core products, the pairs inside blocks
    # of 8 or 4 rows in registers (GLA_INTRA_TREE); varlen with sequences ending inside a block, GQA,
    # an initial state, two programs a row striding the chunks (the scratch reused across chunks)
    monkeypatch.setattr(gla_ops._cfg, "INTRA_TREE", tree)
    check(seed=24, t=61, h=2, hkv=1, d=24, e=40, dtype=dtype, reverse=reverse, cu_seqlens=[0, 13, 14, 61],
          normaliser=normaliser)


def test_in_block_pairs_in_registers_alone_at_the_gpu_chunk(monkeypatch):
    # the GPU's chunk, blocks of 16 rows in registers, walls every 16 rows: o, dq, dk, dv, dg are the
    # pairs inside blocks alone, the in-chunk launch's from registers only
    monkeypatch.setattr(gla_ops._cfg, "INTRA_TREE", 2)
    monkeypatch.setitem(gla_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gla_ops._INTERP_META, "BS", 32)
    check(seed=25, t=91, h=1, d=16, e=16, normaliser=4.0, wall=-30.0, every=16)
    check(seed=26, t=91, h=1, d=16, e=16, normaliser=1.0, wall=-30.0, every=16, reverse=True, dtype=torch.float16,
          skip=("dh0",))


def test_no_state_gradient_and_no_initial_state():
    check(seed=6, t=17, h=1, d=16, e=16, h0=False, dst=False)


def test_no_final_state_returned():
    gen = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 9, 1, 16, generator=gen), torch.randn(1, 9, 1, 16, generator=gen)
    v, g = torch.randn(1, 9, 1, 16, generator=gen), gates(gen, (1, 9, 1, 16), 16.0)
    o, st = gla_triton(q, k, v, g, output_final_state=False)
    ro, _ = gla_naive(q.double(), k.double(), v.double(), g.double())
    assert st is None and err_ratio(o, ro) <= TOLERANCE["fp32"]


@pytest.mark.parametrize("change, needle", [
    (dict(g=torch.zeros(1, 5, 2, 16)), "g must be [B, T, H, D]"),
    (dict(g=torch.zeros(1, 5, 1, 16, dtype=torch.float64)), "g must be float32"),
    (dict(k=torch.zeros(1, 5, 1, 8)), "shape mismatch"),
    (dict(initial_state=torch.zeros(2, 1, 16, 16)), "initial_state must be"),
    (dict(cu_seqlens=[0, 3]), "cu_seqlens must rise"),
    (dict(scale=float("inf")), "scale must be finite"),
])
def test_bad_input_is_a_value_error_before_any_launch(monkeypatch, change, needle):
    launched = []
    for name in ("_PREP", "_FWD", "_BWD_H", "_BWD_DH", "_BWD_INTRA", "_BWD_EXIT", "_BWD_V"):
        monkeypatch.setattr(gla_ops, name, lambda *a, **kw: launched.append(a))
    args = dict(q=torch.zeros(1, 5, 1, 16), k=torch.zeros(1, 5, 1, 16), v=torch.zeros(1, 5, 1, 16),
                g=torch.zeros(1, 5, 1, 16))
    args.update(change)
    with pytest.raises(ValueError, match=needle.replace("[", r"\[")):
        gla_triton(**args)
    assert not launched


def test_fp16_dg_does_not_drift_over_a_long_sequence(monkeypatch):
    # dg's per-row terms q⊙dq − k⊙dk nearly cancel over a sequence: summed from S_T alone their
    # rounding drifts like a random walk (fp16 dg 2.8e-3 at this T, over the tolerance), so each
    # chunk's dg is pinned at both ends from its entry state. At the qk launch's GPU chunk
    # (BT = 64), one slice per head (fewer interpreted programs)
    monkeypatch.setitem(gla_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gla_ops._INTERP_META, "BS", 32)
    check(seed=8, t=2000, h=1, d=32, e=32, dtype=torch.float16)


def test_every_launch_runs_at_one_chunk():
    # the parallel launches write per-chunk operands (scores, totals, in-chunk gradient parts) that
    # the sweeps read at their own chunk, and the state pass writes entry states in slots of its
    # chunk: every config, jax-triton's included, must run at configs.CHUNK
    from lattnbench.kernels.gla.triton import configs as C

    lengths = {c[0] for c in C.FWD_CONFIGS + C.BWD_H_CONFIGS + C.BWD_DH_CONFIGS + C.BWD_V_CONFIGS}
    lengths |= {C.JAX_FWD_CONFIG[0], C.JAX_BWD_H_CONFIG[0], C.JAX_BWD_DH_CONFIG[0], C.JAX_BWD_V_CONFIG[0]}
    assert lengths == {C.CHUNK}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("normaliser", [4.0, 0.1])
def test_prep_writes_every_chunks_operands_and_scores(reverse, normaliser):
    # varlen with a one-row sequence and partial chunks, GQA, two programs a row striding the
    # chunks; the scores A exact at gates whose chunk depth is far past fp32's exponent range
    from lattnbench.kernels.common import checks

    gen = torch.Generator().manual_seed(11)
    cu, h, hkv, d = [0, 21, 22, 50], 2, 1, 24
    t = cu[-1]
    q, k = torch.randn(1, t, h, d, generator=gen), torch.randn(1, t, hkv, d, generator=gen)
    g = gates(gen, (1, t, h, d), normaliser)
    qd, kd, bl, scores = gla_ops.gla_prep(q, k, g, reverse, checks.cu_tensor(cu, t, q.device), len(cu) - 1)
    bt = gla_ops._chunk()
    kq = k.double().repeat_interleave(h // hkv, 2)
    for i_n, (bos, eos) in enumerate(zip(cu[:-1], cu[1:])):
        order = torch.arange(bos, eos).flip(0) if reverse else torch.arange(bos, eos)
        for i_c, rows in enumerate(order.split(bt)):
            start = eos - (i_c + 1) * bt if reverse else bos + i_c * bt
            gc = g[0, rows].double()
            B, Bl = gc.cumsum(0), gc.sum(0)
            want_q = q[0, rows].double() * B.exp()
            want_k = kq[0, rows] * (Bl - B).exp()
            torch.testing.assert_close(qd[0, rows].double(), want_q, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(kd[0, rows].double(), want_k, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(bl[bos // bt + i_n + i_c].double(), Bl, rtol=1e-5, atol=1e-6)
            # A[t, h, offset of s] = Σ_d q_td k_sd e^{B_td − B_sd} for s at or before t, else 0
            n = len(rows)
            lower = (torch.arange(n)[None, :] <= torch.arange(n)[:, None])[:, :, None, None]
            expo = torch.where(lower, B[:, None] - B[None, :], torch.tensor(float("-inf"), dtype=torch.float64))
            pairs = (q[0, rows].double()[:, None] * kq[0, rows][None, :] * expo.exp()).sum(-1)  # [t, s, H]
            want = torch.zeros(n, h, bt, dtype=torch.float64)
            want[:, :, rows - start] = pairs.permute(0, 2, 1)
            # fp32 inputs cumulate the gates in fp64, so the pairs' exponents keep fp32's digits
            torch.testing.assert_close(scores[0, rows].double(), want, rtol=1e-5, atol=1e-5)
