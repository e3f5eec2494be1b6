"""lightning/gluon's kernels on the CPU, through the Gluon emulator (``gluon_emulator``): the
warp-specialized forward (a TMA load warp, the state warpgroup, the output warpgroup, their mbarrier
rings) and the Gluon backward (dq by the forward kernel, dk and dv by the one-pass ``dkdv`` kernel or
by two more forward passes) against the fp64 reference, every tensor at fla's 0.005.

The partitions run as threads on the emulator's mbarriers and TMA copies, so a ring whose phases or
counts do not match fails with the barrier named (``Deadlock``) instead of hanging, and the race
tracker (``gluon_races``) fails a hand-off between partitions that no mbarrier orders. The compile
is the sm_90 compile tests' and the GPU tests' (``tests/gpu/test_lightning_gluon.py``)."""
from __future__ import annotations

import collections
import os
import sys

import pytest
import torch

import gluon_emulator as emu
import gluon_races as races
from lattnbench.kernels.lightning.gluon import configs as gcfg
from lattnbench.kernels.lightning.gluon import dkdv, kernels, ops
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.measure.tolerance import FLA_TOLERANCE, err_ratio


@pytest.fixture
def gluon_on_cpu(monkeypatch):
    """The Gluon forward and dk / dv kernels through the emulator (the sm_90 check skipped), the
    Gluon backward at any length, every buffer the kernels write NaN-poisoned first."""
    launches = {"fwd": emu.Launcher(kernels.lightning_fwd_kernel), "dkdv": emu.Launcher(dkdv.lightning_dkdv_kernel)}
    monkeypatch.setattr(ops, "_FWD_LAUNCH", launches["fwd"])
    monkeypatch.setattr(ops, "_DKDV_LAUNCH", launches["dkdv"])
    monkeypatch.setattr(ops, "gluon_path", lambda q, v, cu=None: gcfg.fallback_reason(
        str(q.dtype).removeprefix("torch."), q.shape[3], v.shape[3], cu is not None))
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "1")
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", True)

    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(ops, "_empty", nan_empty)
    return launches


def _inputs(seed, b, t, h, d, e, h0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, t, h, d, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(b, t, h, e, generator=gen).bfloat16()
    s0 = torch.randn(b, h, d, e, generator=gen) if h0 else None
    # per-token decays of 2.5 % to 25 %: every pair's weight differs from its neighbour's by more
    # than the tolerance, and the state carried into a chunk still weighs on its first rows
    gamma = -(0.5 + torch.rand(h, generator=gen)) * torch.tensor([0.05, 0.2] * (h // 2))
    return q, k, v, s0, gamma, gen


@pytest.mark.parametrize("fused", [True, False], ids=["dkdv", "passes"])
@pytest.mark.parametrize("b,t,h,d,e,reverse,h0", [
    (1, 150, 2, 64, 64, False, True),
    (2, 100, 2, 64, 128, True, True),
    (1, 64, 2, 128, 64, False, False),
], ids=["T150-D64", "T100-D64-E128-rev", "T64-D128-E64-noh0"])
def test_the_emulated_gluon_forward_and_backward_meet_fp64(gluon_on_cpu, monkeypatch, fused, b, t, h, d, e,
                                                           reverse, h0):
    """o, S_T, dq, dk, dv and dh0 within fla's 0.005 of fp64, with random dO and dS_T: partial last
    chunks, D ≠ E, both orders, with and without h0; the backward through the dk / dv kernel or
    through two more forward passes."""
    monkeypatch.setattr(gcfg, "FUSED_DKDV", fused)
    q, k, v, s0, gamma, gen = _inputs(7 + t + d, b, t, h, d, e, h0)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)] + ([s0.clone().requires_grad_(True)] if h0 else [])
    o, st = ops.lightning_attn_gluon(*leaves[:3], gamma=gamma, reverse=reverse, initial_state=leaves[3] if h0 else None)
    do, ds = torch.randn(o.shape, generator=gen).bfloat16(), torch.randn(st.shape, generator=gen)
    grads = torch.autograd.grad((o, st), leaves, (do, ds))
    ref = [x.detach().double().requires_grad_(True) for x in leaves]
    ro, rs = lightning_naive(*ref[:3], gamma=gamma.double(), reverse=reverse, initial_state=ref[3] if h0 else None)
    rgrads = torch.autograd.grad((ro, rs), ref, (do.double(), ds.double()))
    errs = {name: err_ratio(x, r) for name, x, r in zip(("o", "S_T", "dq", "dk", "dv", "dh0"),
                                                        (o, st, *grads), (ro, rs, *rgrads))}
    assert all(err <= FLA_TOLERANCE for err in errs.values()), errs
    assert gluon_on_cpu["fwd"].launches == (2 if fused else 4)  # the forward, the dq pass (and dk, dv)
    assert gluon_on_cpu["dkdv"].launches == (1 if fused else 0)


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_the_dq_pass_is_a_programmatic_dependent_launch_only_when_asked(gluon_on_cpu, monkeypatch, pdl):
    """LIGHTNING_GLUON_PDL (``configs.PDL``, read by the forward call for its backward): ``dkdv`` lets
    the next launch start as its programs start, and the dq pass after it is that launch, waiting
    for ``dkdv`` only before its programs end; the forward itself is a plain launch either way, and
    every gradient is the same (a GPU scheduling matter: here each launch runs to its end)."""
    monkeypatch.setattr(gcfg, "PDL", pdl)
    q, k, v, s0, gamma, gen = _inputs(5, 1, 70, 2, 64, 64, True)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
    o, st = ops.lightning_attn_gluon(*leaves[:3], gamma=gamma, initial_state=leaves[3])
    do, ds = torch.randn(o.shape, generator=gen).bfloat16(), torch.randn(st.shape, generator=gen)
    grads = torch.autograd.grad((o, st), leaves, (do, ds))
    ref = [x.detach().double().requires_grad_(True) for x in leaves]
    ro, rs = lightning_naive(*ref[:3], gamma=gamma.double(), initial_state=ref[3])
    rgrads = torch.autograd.grad((ro, rs), ref, (do.double(), ds.double()))
    errs = [err_ratio(x, r) for x, r in zip((o, st, *grads), (ro, rs, *rgrads))]
    assert all(err <= FLA_TOLERANCE for err in errs), errs
    forward, dq_pass = gluon_on_cpu["fwd"].keywords
    (dkdv_pass,) = gluon_on_cpu["dkdv"].keywords
    assert "launch_pdl" not in forward and "PDL_WAIT" not in forward
    assert dq_pass.get("launch_pdl", False) is pdl and dq_pass.get("PDL_WAIT", False) is pdl
    assert dkdv_pass.get("PDL_TRIGGER", False) is pdl


def test_the_emulated_forward_takes_grouped_heads_and_no_gradient(gluon_on_cpu):
    """GQA (k, v with half the heads) in a forward without autograd: o and S_T within fla's 0.005."""
    q, k, v, _, gamma, _ = _inputs(3, 1, 90, 4, 64, 64, False)
    k, v = k[:, :, :2].contiguous(), v[:, :, :2].contiguous()
    with torch.no_grad():
        o, st = ops.lightning_attn_gluon(q, k, v, gamma=gamma)
    ro, rs = lightning_naive(q.double(), k.double(), v.double(), gamma=gamma.double())
    assert err_ratio(o, ro) <= FLA_TOLERANCE and err_ratio(st, rs) <= FLA_TOLERANCE
    assert gluon_on_cpu["fwd"].launches == 1


def test_every_mbarrier_wait_of_the_forward_and_dkdv_kernels_is_needed(gluon_on_cpu, monkeypatch):
    """A fwd+bwd through the forward kernel and ``dkdv`` (three chunks, so each two-slot ring is
    reused), then again with each mbarrier wait site dropped (every wait there returns at once).
    Without a wait on a ring's "ready" barrier the consumer reads a tile its producer has not
    published (or not yet written): the race tracker names it, whatever the threads' order. Without
    one on an "empty" barrier the producer refills a slot its consumers may not have read: a race,
    or, where the producer ran two phases ahead, a consumer's wait that never completes (as it
    would on the GPU), which the emulator fails as a deadlock."""
    monkeypatch.setattr(gcfg, "FUSED_DKDV", True)
    monkeypatch.setattr(emu, "DEADLOCK_S", 2.0)
    real, sites, skip = emu._MBARRIER.wait, {}, [None]

    def wait(bar, phase, pred=True, deps=(), **kw):
        frame = sys._getframe(1)
        here = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        sites[here] = bar.name.split("[")[0]  # "mbarriers N": the kernels allocate ld_ready, ld_empty, s_ready, s_empty
        if here != skip[0]:
            real(bar, phase, pred=pred, deps=deps, **kw)
    monkeypatch.setattr(emu._MBARRIER, "wait", wait)
    q, k, v, s0, gamma, gen = _inputs(11, 1, 150, 2, 64, 64, True)
    do, ds = torch.randn(q.shape, generator=gen).bfloat16(), torch.randn(s0.shape, generator=gen)

    def fwd_bwd():
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
        o, st = ops.lightning_attn_gluon(*leaves[:3], gamma=gamma, initial_state=leaves[3])
        return torch.autograd.grad((o, st), leaves, (do, ds))
    fwd_bwd()
    assert {site.split(":")[0] for site in sites} == {"kernels.py", "dkdv.py"} and len(sites) >= 6
    ready = {site for site, array in sites.items() if array in ("mbarriers 0", "mbarriers 2")}
    assert len(ready) >= 4
    for site in list(sites):
        skip[0] = site
        with pytest.raises(races.Race if site in ready else (races.Race, emu.Deadlock)):
            fwd_bwd()
