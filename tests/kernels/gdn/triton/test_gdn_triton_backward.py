"""The Triton GDN backward against autograd through the fp64 token-by-token reference ``gdn_naive``.

dq, dk, dv, dg, dβ and dh0 for random cotangents of o and S_T, within the dtype's tolerance, on
the same dtype-rounded inputs as the forward's tests (fp32, fp16 and bf16 in the interpreter, bf16
as on the GPU through ``interpreter_bf16``; on the H200 through ``lattnbench check-grad -k gdn/triton``). Every buffer the kernels must fully
write is NaN-poisoned first (the fixture of test_gdn_triton.py). The interpreter's chunk is 16
tokens and its value slice 16 columns, so E = 40 splits the reverse sweep into three slices, and
D = 40 makes the parallel launches take two key slices. Inputs are drawn afresh
every run; a failure names the seed, and GDN_TEST_SEED=<seed> replays it.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gdn.naive import gdn_naive
from lattnbench.kernels.gdn.triton import backward as gdn_backward
from lattnbench.kernels.gdn.triton import gdn_triton
from lattnbench.kernels.gdn.triton import kernels as gdn_kernels
from lattnbench.kernels.gdn.triton import ops as gdn_ops
from lattnbench.measure.tolerance import err_ratio
from test_gdn_triton import DEV, inputs, poison, seed, within_tolerance  # noqa: F401 — fixtures
from triton_testutil import record_launches

GRADS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def check_grad(seed, scale=0.3, cu_seqlens=None, final_state=True, **kw):
    """Gradients of the kernel and of the fp64 reference for the same cotangents; assert each within
    the dtype's tolerance and return the errors."""
    dtype = kw.get("dtype", torch.float32)
    q, k, v, g, beta, s0 = inputs(seed, cu_seqlens=cu_seqlens, **kw)
    leaves = [x.to(DEV).requires_grad_() for x in (q, k, v, g, beta)]
    if s0 is not None:
        leaves.append(s0.to(DEV).requires_grad_())
    o, st = gdn_triton(*leaves[:5], scale=scale, initial_state=leaves[5] if s0 is not None else None,
                       output_final_state=final_state, cu_seqlens=cu_seqlens)
    gen = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(o.shape, generator=gen)
    dst = torch.randn(st.shape, generator=gen) if final_state else None
    loss = (o.float() * do.to(DEV)).sum() + ((st * dst.to(DEV)).sum() if final_state else 0.0)
    got = torch.autograd.grad(loss, leaves)
    refs = [x.detach().cpu().double().requires_grad_() for x in leaves]
    ro, rst = gdn_naive(*refs[:5], scale=scale, initial_state=refs[5] if s0 is not None else None,
                        cu_seqlens=cu_seqlens)
    rloss = (ro * do.double()).sum() + ((rst * dst.double()).sum() if final_state else 0.0)
    want = torch.autograd.grad(rloss, refs)
    for x, gx in zip(leaves, got):
        assert gx.dtype == x.dtype and gx.shape == x.shape
    return within_tolerance({name: err_ratio(a.cpu(), b) for name, a, b in zip(GRADS, got, want)}, dtype, seed)


@pytest.mark.parametrize("dtype, h0", [(torch.float32, False), (torch.float16, True), (torch.bfloat16, True)])
def test_gqa_odd_t_non_pow2_dims(seed, dtype, h0):
    # a GQA group's two query heads gate one kv head their own ways: dk and dv sum over them
    check_grad(seed, h=4, hkv=2, d=24, e=40, dtype=dtype, h0=h0)


def test_d_larger_than_e_many_chunks(seed):
    check_grad(seed, t=99, h=1, d=40, e=12)


@pytest.mark.parametrize("dtype, norm", [(torch.float32, 16.0), (torch.float16, 1.0), (torch.float32, 0.1),
                                         (torch.float16, 0.1)])
def test_gate_strengths(seed, dtype, norm):
    # fla's recipes: log σ(x)/norm at 16, 1 and 0.1 (about −7 per token, −100 over a chunk of 16)
    check_grad(seed, t=37, h=2, hkv=1, d=24, e=40, dtype=dtype, norm=norm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_varlen_with_a_length_one_sequence(seed, dtype):
    # dh0 per sequence; the state's cotangent restarts at every sequence end
    check_grad(seed, t=30, h=2, hkv=1, d=16, e=24, dtype=dtype, cu_seqlens=[0, 12, 13, 30])


def test_strong_gates_at_the_gpu_chunk(seed, monkeypatch):
    # the GPU's chunk of 64 and value slice of 32: dg is the suffix sum of terms as large as the
    # decays allow, which must cancel in fp32
    monkeypatch.setitem(gdn_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gdn_ops._INTERP_META, "BV", 32)
    check_grad(seed, t=150, h=1, d=32, e=48, norm=0.1)


def test_without_a_final_state(seed):
    # no S_T cotangent: the sweep starts from zero
    check_grad(seed, t=37, h=2, d=16, e=24, final_state=False)


def test_the_backward_launches_and_their_grids(monkeypatch, seed):
    # forward: prep, sweep (keeping the chunk-entry states); backward: prep again, the reverse sweep
    # over E-slices and (sequence, head) rows, the chunk and WY launches striding the chunks
    log = record_launches(monkeypatch, gdn_kernels, ("gdn_prep_kernel", "gdn_fwd_kernel"))
    log_b = record_launches(monkeypatch, gdn_backward,
                            ("gdn_bwd_state_kernel", "gdn_bwd_chunk_kernel", "gdn_bwd_wy_kernel"))
    check_grad(seed, b=2, t=37, h=2, hkv=1, d=24, e=40)
    assert [(name, grid) for name, grid, _ in log] == [("gdn_prep_kernel", (2, 4)), ("gdn_fwd_kernel", (3, 4)),
                                                      ("gdn_prep_kernel", (2, 4))]
    assert [(name, grid) for name, grid, _ in log_b] == [("gdn_bwd_state_kernel", (3, 4)),
                                                        ("gdn_bwd_chunk_kernel", (2, 4)),
                                                        ("gdn_bwd_wy_kernel", (2, 4))]
    assert dict(log[1][2])["STORE_HC"] is True


def test_no_states_kept_without_a_gradient(monkeypatch, seed):
    log = record_launches(monkeypatch, gdn_kernels, ("gdn_fwd_kernel",))
    q, k, v, g, beta, s0 = inputs(seed, t=20, d=16, e=16)
    gdn_triton(q, k, v, g, beta, initial_state=s0)
    assert dict(log[0][2])["STORE_HC"] is False


def test_the_registry_entry_gives_every_gradient(seed):
    from lattnbench.registry import default_registry

    fn = default_registry()["gdn/triton"].load()
    q, k, v, g, beta, s0 = inputs(seed, t=20, d=16, e=16)
    leaves = [x.requires_grad_(True) for x in (q, k, v, g, beta, s0)]
    o, st = fn(*leaves[:5], None, leaves[5], False, None)
    grads = torch.autograd.grad((o, st), leaves, (torch.randn_like(o), torch.randn_like(st)))
    assert all(torch.isfinite(x).all() and x.abs().sum() > 0 for x in grads)
