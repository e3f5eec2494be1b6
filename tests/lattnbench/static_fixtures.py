"""Deliberate regressions for the static gate's tests (never product code).

``chunk_loop``: a small Triton kernel with the shape of a chunk pass: a loop over chunks that
loads a tile, multiplies it into a block-wide fp32 accumulator with ``tl.dot`` and stores the
result once. ``chunk_loop_double`` is the same with a second, independent load inside the loop
(the doubled load). ``BN`` sizes the accumulator: a huge one cannot live in registers and spills.

``lightning_extra_tt``: the Lightning chunked JAX kernel plus a materialised [T, T] score matrix
folded into the output (what an accidental quadratic path looks like to XLA).
"""
from __future__ import annotations

import triton
import triton.language as tl

from lattnbench.static.triton_aot import Job


@triton.jit
def chunk_loop(x, y, o, T, BM: tl.constexpr, BN: tl.constexpr):
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    for i in range(0, T // BM):
        a = tl.load(x + (i * BM + rows)[:, None] * BM + rows[None, :])
        b = tl.load(y + rows[:, None] * BN + cols[None, :])
        acc = acc * 0.5 + tl.dot(a, b)
    tl.store(o + rows[:, None] * BN + cols[None, :], acc)


@triton.jit
def chunk_loop_double(x, y, o, T, BM: tl.constexpr, BN: tl.constexpr):
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    for i in range(0, T // BM):
        a = tl.load(x + (i * BM + rows)[:, None] * BM + rows[None, :])
        a2 = tl.load(x + T * BM + (i * BM + rows)[:, None] * BM + rows[None, :])  # the doubled load
        b = tl.load(y + rows[:, None] * BN + cols[None, :])
        acc = acc * 0.5 + tl.dot(a + a2, b)
    tl.store(o + rows[:, None] * BN + cols[None, :], acc)


def fixture_job(function: str = "chunk_loop", bn: int = 64, warps: int = 4) -> Job:
    """A job of a fixture kernel, always under the same row name and config label, so a baseline
    of one fixture and a current run of another compare as the same kernel changed."""
    return Job(kernel="fixture/triton", config="fixture", module=__name__, function=function,
               types=dict(x="*bf16", y="*bf16", o="*fp32", T="i32"), constexprs=dict(BM=64, BN=bn),
               num_warps=warps, num_stages=2, aligned=("T",), shape="BM=64")


def lightning_extra_tt(q, k, v, g):
    """lightning/jax-chunked with an extra [B, H, T, T] tensor materialised and used."""
    import jax.numpy as jnp

    from lattnbench.static.xla import KERNELS

    o, s = KERNELS["lightning/jax-chunked"](q, k, v, g)
    scores = jnp.einsum("bthd,bshd->bhts", q, k)  # [B, H, T, T]
    return o + 1e-6 * jnp.einsum("bhts,bshd->bthd", scores, v).astype(o.dtype), s
