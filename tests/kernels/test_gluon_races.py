"""The emulator's race tracker (``gluon_races``): each hazard a missing barrier, fence or wait leaves
in a hand-off through shared memory (or a global buffer the program wrote) fails the run, naming
both accesses, and the same hand-off with its barrier, fence or wait passes with the same numbers."""
from __future__ import annotations

import pytest
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import gluon_emulator as emu
import gluon_races as races
from lattnbench.kernels.common.gluon_compat import (copy_commit, copy_to_shared, copy_wait, cta_barrier,
                                                   fence_async_shared, warpgroup_mma, warpgroup_mma_wait)

N = 16


@gluon.jit
def _handoff(x, y, BARRIER: gl.constexpr, SAME: gl.constexpr, REWRITE: gl.constexpr):
    """x [N, N] → y through a shared tile stored row-major and read back column-major (SAME: row-major
    again); REWRITE: the tile is then overwritten row-major, read back after one more barrier."""
    R: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [2, 1], [1, 0])
    C: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, 2], [0, 1])
    row = gl.arange(0, 16, layout=gl.SliceLayout(1, R))
    col = gl.arange(0, 16, layout=gl.SliceLayout(0, R))
    off = row[:, None] * 16 + col[None, :]
    s = gl.allocate_shared_memory(gl.float32, [16, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    s.store(gl.load(x + off))
    if BARRIER:
        cta_barrier()
    if SAME:
        gl.store(y + off, s.load(R))
    else:
        rc = gl.arange(0, 16, layout=gl.SliceLayout(1, C))
        cc = gl.arange(0, 16, layout=gl.SliceLayout(0, C))
        gl.store(y + rc[:, None] * 16 + cc[None, :], s.load(C))
    if REWRITE:
        s.store(gl.load(x + off) * 2.0)
        cta_barrier()
        gl.store(y + off, s.load(R))


@gluon.jit
def _product(x, y, FENCE: gl.constexpr, ASYNC: gl.constexpr, WAIT: gl.constexpr):
    """y = x·x (fp16 [N, N] operands from one shared tile, fp32 out), then the tile overwritten: with
    ASYNC the product runs until a wait (WAIT: before the overwrite, else after it)."""
    R: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
    row = gl.arange(0, 16, layout=gl.SliceLayout(1, R))
    col = gl.arange(0, 16, layout=gl.SliceLayout(0, R))
    off = row[:, None] * 16 + col[None, :]
    s = gl.allocate_shared_memory(gl.float16, [16, 16], gl.NVMMASharedLayout.get_default_for([16, 16], gl.float16))
    s.store(gl.load(x + off))
    if FENCE:
        fence_async_shared()
    cta_barrier()
    acc = gl.zeros([16, 16], gl.float32, MMA)
    acc = warpgroup_mma(s, s, acc, use_acc=False, is_async=ASYNC)
    if ASYNC and WAIT:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    cta_barrier()
    s.store(gl.zeros([16, 16], gl.float16, R))
    if ASYNC and not WAIT:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    rm = gl.arange(0, 16, layout=gl.SliceLayout(1, MMA))
    cm = gl.arange(0, 16, layout=gl.SliceLayout(0, MMA))
    gl.store(y + rm[:, None] * 16 + cm[None, :], acc)


@gluon.jit
def _copied(x, y, WAIT: gl.constexpr):
    """x → y through an asynchronous copy into shared memory, read back column-major after a barrier,
    with (WAIT) or without the copy's wait before it."""
    R: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [2, 1], [1, 0])
    C: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, 2], [0, 1])
    row = gl.arange(0, 16, layout=gl.SliceLayout(1, R))
    col = gl.arange(0, 16, layout=gl.SliceLayout(0, R))
    s = gl.allocate_shared_memory(gl.float32, [16, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    copy_to_shared(s, x + row[:, None] * 16 + col[None, :])
    copy_commit()
    if WAIT:
        copy_wait(0)
    cta_barrier()
    rc = gl.arange(0, 16, layout=gl.SliceLayout(1, C))
    cc = gl.arange(0, 16, layout=gl.SliceLayout(0, C))
    gl.store(y + rc[:, None] * 16 + cc[None, :], s.load(C))
    copy_wait(0)


@gluon.jit
def _scratch(x, w, y, BARRIER: gl.constexpr):
    """x → w (a global scratch) row-major, read back column-major into y."""
    R: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [2, 1], [1, 0])
    C: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, 2], [0, 1])
    row = gl.arange(0, 16, layout=gl.SliceLayout(1, R))
    col = gl.arange(0, 16, layout=gl.SliceLayout(0, R))
    gl.store(w + row[:, None] * 16 + col[None, :], gl.load(x + row[:, None] * 16 + col[None, :]))
    if BARRIER:
        cta_barrier()
    rc = gl.arange(0, 16, layout=gl.SliceLayout(1, C))
    cc = gl.arange(0, 16, layout=gl.SliceLayout(0, C))
    off = rc[:, None] * 16 + cc[None, :]
    gl.store(y + off, gl.load(w + off))


def _x() -> torch.Tensor:
    return torch.randn(N, N)


def test_a_layout_change_through_shared_memory_needs_a_barrier():
    x, y = _x(), torch.full((N, N), float("nan"))
    with pytest.raises(races.Race, match=r"test_gluon_races.py:\d+ reads 256 elements of a shared \[16, 16\] fp32 "
                                         r"buffer that test_gluon_races.py:\d+ wrote in another layout"):
        emu.run(_handoff, (1,), x, y, BARRIER=False, SAME=False, REWRITE=False)
    emu.run(_handoff, (1,), x, y, BARRIER=True, SAME=False, REWRITE=False)
    assert torch.equal(y, x)


def test_a_round_trip_in_one_layout_needs_none():
    x, y = _x(), torch.full((N, N), float("nan"))
    emu.run(_handoff, (1,), x, y, BARRIER=False, SAME=True, REWRITE=False)
    assert torch.equal(y, x)


def test_rewriting_a_tile_another_layout_read_needs_a_barrier():
    x, y = _x(), torch.full((N, N), float("nan"))
    with pytest.raises(races.Race, match="writes 256 elements .* read in another layout with no barrier between"):
        emu.run(_handoff, (1,), x, y, BARRIER=True, SAME=False, REWRITE=True)
    emu.run(_handoff, (1,), x, y, BARRIER=True, SAME=True, REWRITE=True)
    assert torch.equal(y, 2 * x)


def test_a_wgmma_operand_needs_a_proxy_fence_and_an_async_one_its_wait():
    x = _x().to(torch.float16)
    y = torch.full((N, N), float("nan"))
    with pytest.raises(races.Race, match="gives a wgmma 256 elements .* no fence_async_shared"):
        emu.run(_product, (1,), x, y, FENCE=False, ASYNC=False, WAIT=False)
    with pytest.raises(races.Race, match=r"test_gluon_races.py:\d+ writes 256 elements .* that test_gluon_races.py:\d+ gave an asynchronous "
                                         r"read not yet waited on"):
        emu.run(_product, (1,), x, y, FENCE=True, ASYNC=True, WAIT=False)
    for asynchronous in (False, True):
        y.fill_(float("nan"))
        emu.run(_product, (1,), x, y, FENCE=True, ASYNC=asynchronous, WAIT=True)
        assert torch.allclose(y, x.double().matmul(x.double()).float(), rtol=1e-6, atol=1e-5)


def test_an_asynchronous_copy_lands_at_its_wait():
    x, y = _x(), torch.full((N, N), float("nan"))
    with pytest.raises(races.Race, match="reads 256 elements .* is still copying into"):
        emu.run(_copied, (1,), x, y, WAIT=False)
    emu.run(_copied, (1,), x, y, WAIT=True)
    assert torch.equal(y, x)


def test_a_global_scratch_read_back_in_another_layout_needs_a_barrier():
    x, w, y = _x(), torch.full((N, N), float("nan")), torch.full((N, N), float("nan"))
    with pytest.raises(races.Race, match="a global fp32 buffer of 256 elements"):
        emu.run(_scratch, (1,), x, w, y, BARRIER=False)
    emu.run(_scratch, (1,), x, w, y, BARRIER=True)
    assert torch.equal(y, x)


def test_the_tracker_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(emu, "CHECK_RACES", False)
    x, y = _x(), torch.full((N, N), float("nan"))
    emu.run(_handoff, (1,), x, y, BARRIER=False, SAME=False, REWRITE=False)
    assert torch.equal(y, x)  # the emulator's arithmetic sees no race: only the tracker does
