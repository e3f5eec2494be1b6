"""The look-back forward (lookback.py) against the fp64 quadratic reference.

Under the interpreter (CPU) the programs run one after another in ticket order, so the chained
scan never waits; what is checked here is the arithmetic (segment states, their chaining, the
per-segment chunk pass) and the bookkeeping (tickets → segment/chain, scratch slots, flags).
The GPU's scheduling and memory ordering are for bench/triton_lookback_dev.py.
Small segments (SEG = 2 chunks of 16 tokens by default) give several segments at small T.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.triton.lightning import lightning_attn_triton
from lattnbench.kernels.triton.lightning import lookback as LB
from lattnbench.kernels.triton.lightning import ops as tl_ops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio
from triton_testutil import LaunchSpy

NAMES = {torch.float32: "fp32", torch.float16: "fp16"}


def nan_empty(*shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """NaN-fill every output buffer (ops._empty is what the hook passes as the allocator)."""
    monkeypatch.setattr(tl_ops, "_empty", nan_empty)


def run(seed=0, b=2, t=100, h=3, hkv=None, d=32, e=32, dtype=torch.float32, gamma="mixed", scale=0.4,
        h0=True, reverse=False, store_ht=True, config=(32, 16, 32, 4, 1), ring=2):
    """Launch the look-back forward directly; assert o and S_T within the dtype's tolerance."""
    hkv = hkv or h
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=gen).to(dtype)
    k = torch.randn(b, t, hkv, d, generator=gen).to(dtype)
    v = torch.randn(b, t, hkv, e, generator=gen).to(dtype)
    s0 = torch.randn(b, h, d, e, generator=gen) if h0 else None
    if isinstance(gamma, str):
        # mild decays (the carried state still matters after a 32-token segment), one zero, one strong
        gam = -torch.rand(h, generator=gen) * 0.1
        gam[0] = 0.0
        if h > 2:
            gam[-1] = -6.0
    else:
        gam = torch.as_tensor(np.asarray(gamma, dtype=np.float32))
    o, st = LB.lightning_fwd_lookback(q, k, v, gam.float().contiguous(), scale, s0, reverse, store_ht,
                                      config=config, alloc=nan_empty, ring=ring)
    ro, rs = lightning_naive(q.double(), k.double(), v.double(), gamma=gam.double(), scale=scale,
                             initial_state=None if s0 is None else s0.double(), reverse=reverse)
    tol = TOLERANCE[NAMES[dtype]]
    assert o.dtype == dtype and o.shape == (b, t, h, e)
    errs = {"o": err_ratio(o, ro)}
    if store_ht:
        assert st.dtype == torch.float32 and st.shape == (b, h, d, e)
        errs["final_state"] = err_ratio(st, rs)
    else:
        assert st is None
    bad = {k_: x for k_, x in errs.items() if not x <= tol}
    assert not bad, f"errors above {tol}: {bad} (all: {errs})"
    return errs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_segments_partial_last_h0(dtype):
    # T=100, SEG=32: 4 segments, the last one 4 tokens (one partial chunk); scratch ring of 2 wraps
    run(seed=1, dtype=dtype)


@pytest.mark.parametrize("ring", [0, 3])
def test_scratch_slots(ring):
    # ring 0: one scratch slot per segment; 3: a wider ring; 7 segments
    run(seed=13, b=1, t=200, h=2, ring=ring)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reverse(dtype):
    # T=120: the last segment (in processing order) is one full chunk + a partial one
    run(seed=2, b=1, t=120, h=2, dtype=dtype, reverse=True)


@pytest.mark.parametrize("t", [1, 20, 32])
def test_t_up_to_one_segment(t):
    # T < SEG and T = SEG: one segment, no scan
    run(seed=3, b=2, t=t, h=2)


def test_no_h0_no_final_state():
    run(seed=4, b=1, t=70, h=2, h0=False, store_ht=False)


def test_final_state_without_h0():
    run(seed=5, b=1, t=70, h=2, h0=False)


@pytest.mark.parametrize("reverse", [False, True])
def test_gqa(reverse):
    run(seed=6, b=1, t=66, h=4, hkv=2, d=32, e=48, reverse=reverse)


def test_d96_e48_several_e_slices():
    # non-power-of-two dims; E=48 with BV=16 -> 3 E-slices = 3 chains per head
    run(seed=7, b=1, t=80, h=2, d=96, e=48, config=(32, 16, 16, 4, 1))


def test_d48_e96_fp16():
    run(seed=8, b=1, t=75, h=2, d=48, e=96, dtype=torch.float16, reverse=True)


def test_strong_and_zero_decay():
    run(seed=9, b=1, t=90, h=3, gamma=[0.0, -20.0, -80.0])


def test_no_decay_long_segments():
    # gamma None-equivalent (all zero), SEG = 4 chunks
    run(seed=10, b=1, t=150, h=2, gamma=[0.0, 0.0], config=(64, 16, 32, 4, 1))


def test_bad_config():
    q = torch.randn(1, 8, 1, 16)
    with pytest.raises(ValueError):
        LB.lightning_fwd_lookback(q, q, q, torch.zeros(1), 1.0, None, False, True, config=(40, 16, 16, 4, 1))
    with pytest.raises(ValueError):
        LB.lightning_fwd_lookback(q, q, q, torch.zeros(1), 1.0, None, False, True, config=(32, 16, 16, 4, 1), ring=1)


def test_fwd_path_env_var(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FWD", raising=False)
    assert tl_ops.fwd_path() == "chunk"
    monkeypatch.setenv("LIGHTNING_TRITON_FWD", "lookback")
    assert tl_ops.fwd_path() == "lookback"
    monkeypatch.setenv("LIGHTNING_TRITON_FWD", "bogus")
    with pytest.raises(ValueError):
        tl_ops.fwd_path()


@pytest.mark.parametrize("reverse", [False, True])
def test_env_var_routes_forward_and_gradients_match(monkeypatch, reverse):
    """LIGHTNING_TRITON_FWD=lookback: lightning_attn_triton's forward runs the look-back kernel
    (spied), the existing backward gives the gradients; all against the fp64 reference."""
    monkeypatch.setenv("LIGHTNING_TRITON_FWD", "lookback")
    spy = LaunchSpy(LB._lookback_fwd_kernel)
    monkeypatch.setattr(LB, "_lookback_fwd_kernel", spy)
    gen = torch.Generator().manual_seed(11)
    b, t, h, hkv, d, e = 1, 70, 2, 1, 32, 48
    q, k = torch.randn(b, t, h, d, generator=gen), torch.randn(b, t, hkv, d, generator=gen)
    v, s0 = torch.randn(b, t, hkv, e, generator=gen), torch.randn(b, h, d, e, generator=gen)
    gam = [-0.3, 0.0]
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
    o, st = lightning_attn_triton(*leaves[:3], gamma=gam, initial_state=leaves[3], reverse=reverse)
    assert len(spy.grids) == 1
    do, ds = torch.randn(o.shape, generator=gen), torch.randn(st.shape, generator=gen)
    ((o * do).sum() + (st * ds).sum()).backward()
    ref = [x.double().requires_grad_(True) for x in (q, k, v, s0)]
    ro, rs = lightning_naive(*ref[:3], gamma=torch.tensor(gam, dtype=torch.float64), initial_state=ref[3],
                             reverse=reverse)
    ((ro * do.double()).sum() + (rs * ds.double()).sum()).backward()
    pairs = {"o": (o, ro), "final_state": (st, rs)}
    pairs.update({"d" + n: (m.grad, r.grad) for n, m, r in zip(("q", "k", "v", "h0"), leaves, ref)})
    errs = {n: err_ratio(x, r) for n, (x, r) in pairs.items()}
    assert all(x <= TOLERANCE["fp32"] for x in errs.values()), errs


def test_env_var_varlen_keeps_chunk_pass(monkeypatch):
    monkeypatch.setenv("LIGHTNING_TRITON_FWD", "lookback")
    spy = LaunchSpy(LB._lookback_fwd_kernel)
    monkeypatch.setattr(LB, "_lookback_fwd_kernel", spy)
    gen = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 50, 2, 32, generator=gen) for _ in range(3))
    cu = [0, 20, 50]
    o, st = lightning_attn_triton(q, k, v, gamma=[-0.2, -0.5], cu_seqlens=cu)
    assert not spy.grids
    ro, rs = lightning_naive(q.double(), k.double(), v.double(), gamma=torch.tensor([-0.2, -0.5], dtype=torch.float64),
                             cu_seqlens=cu)
    assert err_ratio(o, ro) <= TOLERANCE["fp32"] and err_ratio(st, rs) <= TOLERANCE["fp32"]


def test_default_is_chunk_pass(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FWD", raising=False)
    spy = LaunchSpy(LB._lookback_fwd_kernel)
    monkeypatch.setattr(LB, "_lookback_fwd_kernel", spy)
    q = torch.randn(1, 40, 2, 32)
    lightning_attn_triton(q, q, q, gamma=[-0.2, -0.5])
    assert not spy.grids
