"""The Gluon emulator (``gluon_emulator``) keeps the GPU's arithmetic where a kernel's numerics depend
on it: Triton's dtype promotion, C integer division, bit casts, exp2's flush, tf32 operands, and
loads and stores that refuse unmasked addresses outside their buffer; warp-specialized partitions
hand tiles over through mbarriers, and a wait that never ends fails as a deadlock."""
from __future__ import annotations

import pytest
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

import gluon_emulator as emu


def _t(values, dtype) -> emu.Tensor:
    return emu.Tensor(torch.tensor(values).to(emu._TORCH[dtype]), dtype)


def test_dtype_promotion_follows_triton():
    half, brain = _t([1.0, 2.0], gl.float16), _t([1.0, 2.0], gl.bfloat16)
    assert (half * 1.5).dt == gl.float16            # a Python float does not widen a float tile
    assert (_t([1, 2], gl.int32) * 1.5).dt == gl.float32  # but widens an integer one
    assert (brain + brain).dt == gl.bfloat16
    assert (brain + half).dt == gl.float16
    assert (brain + _t([1.0, 2.0], gl.float32)).dt == gl.float32
    assert (_t([1, 2], gl.int32) + _t(3, gl.int64)).dt == gl.int64
    assert (_t([1, 2], gl.int32) < 2).dt == gl.int1


def test_integer_division_truncates_as_c_does():
    a = _t([-7, 7, -7], gl.int32)
    assert (a // 2).v.tolist() == [-3, 3, -3]
    assert (a % 2).v.tolist() == [-1, 1, -1]
    big = _t([2**31 - 1], gl.int32)
    assert (big + 1).v.tolist() == [-2**31]  # int32 wraps


def test_bit_casts_and_the_tf32_mask():
    x = _t([1.0 + 2**-11 + 2**-20, -3.5], gl.float32)
    assert torch.equal(x.to(gl.int32, bitcast=True).to(gl.float32, bitcast=True).v, x.v)
    cut = (x.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)
    assert cut.v.tolist() == [1.0, -3.5]


def test_exp2_flushes_below_the_normal_range():
    y = emu._GL.exp2(_t([-126.0, -126.5, -200.0, 1.0], gl.float32))
    assert y.v.tolist() == [2.0**-126, 0.0, 0.0, 2.0]


def test_unmasked_addresses_must_lie_in_the_buffer():
    buf = torch.arange(8, dtype=torch.float32)
    ptr = emu._argument(buf) + _t([6, 7, 8, 9], gl.int32)
    got = emu.load(ptr, mask=_t([True, True, False, False], gl.int1), other=-1.0)
    assert got.v.tolist() == [6.0, 7.0, -1.0, -1.0]
    with pytest.raises(IndexError, match="outside a buffer of 8"):
        emu.load(ptr)
    with pytest.raises(IndexError):
        emu.store(ptr, _t([0.0] * 4, gl.float32), mask=_t([False, False, True, False], gl.int1))


def test_shared_memory_takes_only_its_dtype_and_products_read_tf32():
    smem = emu._GL.allocate_shared_memory(gl.float16, [2, 2])
    with pytest.raises(TypeError, match="fp16 shared buffer stored a fp32"):
        smem.store(_t([[1.0, 2.0], [3.0, 4.0]], gl.float32))
    a = _t([[1.0 + 2**-12, 0.0], [0.0, 1.0]], gl.float32)
    b = emu.SharedMemory(torch.eye(2), gl.float32)
    prod = emu.warpgroup_mma(a, b, _t([[0.0, 0.0], [0.0, 0.0]], gl.float32), use_acc=False)
    assert prod.v[0, 0].item() == 1.0  # 2^-12 is past tf32's 10 mantissa bits


@gluon.jit
def _suffix_sums(x, y, n, N: gl.constexpr):
    """Row r of y [R, N]: the suffix sums of x's row r over its first n columns (0 past them), plus r."""
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    col = gl.arange(0, N, layout=L)
    r = gl.program_id(0)
    row = gl.load(x + r * N + col, mask=col < n, other=0.0)
    gl.store(y + r * N + col, gl.associative_scan(row, 0, _plus, reverse=True) + r.to(gl.float32))


@gluon.jit
def _plus(a, b):
    return a + b


def test_a_kernel_runs_every_program_of_its_grid():
    x = torch.randn(3, 8)
    y = torch.full((3, 8), float("nan"))
    emu.run(_suffix_sums, (3,), x, y, 5, N=8, num_warps=1)
    want = torch.where(torch.arange(8) < 5, x, 0.0).flip(1).cumsum(1).flip(1) + torch.arange(3)[:, None]
    assert torch.allclose(y, want, rtol=0, atol=1e-6)


@gluon.jit
def _producer(buf, bar, x, out, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    buf.store(gl.load(x + gl.arange(0, N, layout=L)) * 2.0)
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _consumer(buf, bar, x, out, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    mbarrier.wait(bar, 0)
    gl.store(out + gl.arange(0, N, layout=L), buf.load(L) + 1.0)


@gluon.jit
def _handoff(x, out, N: gl.constexpr, COUNT: gl.constexpr):
    """A producer partition doubles x into shared memory and arrives once; the consumer waits for the
    barrier's first phase, which takes COUNT arrivals (2: it never completes), and stores buf + 1."""
    buf = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bars = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=COUNT)
    args = (buf, bars.index(0), x, out, N)
    gl.warp_specialize([(_consumer, args), (_producer, args)], [1], [24])


def test_partitions_run_as_threads_on_mbarriers_and_a_wait_that_never_ends_is_a_deadlock(monkeypatch):
    x = torch.randn(32)
    out = torch.full((32,), float("nan"))
    emu.run(_handoff, (1,), x, out, N=32, COUNT=1)
    assert torch.equal(out, x * 2.0 + 1.0)
    monkeypatch.setattr(emu, "DEADLOCK_S", 0.3)
    with pytest.raises(emu.Deadlock, match="waited 0.3 s for parity 0 .phase 0, 1 arrivals"):
        emu.run(_handoff, (1,), x, out, N=32, COUNT=2)
