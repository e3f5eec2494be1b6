"""Triton helpers the chunked kernels of every family share: where a program's sequence lies,
and masked [rows, lanes] tiles (or their transposes) of a contiguous ``[B, T, heads, dim]`` tensor."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sequence_of(cu_ptr, i_nh, T, H, IS_VARLEN: tl.constexpr):
    """(sequence, query head, first row, length) of the program row i_nh = n·H + h: from the packed
    offsets cu under varlen, else sequence n of T rows."""
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int64)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    else:
        bos = i_n.to(tl.int64) * T
        eos = bos + T
    return i_n, i_h, bos, (eos - bos).to(tl.int32)


@triton.jit
def load_tile(base, rows, row_stride, lanes, valid, m_lanes):
    """A [rows, lanes] tile, zero outside the valid rows and lanes."""
    return tl.load(base + rows[:, None] * row_stride + lanes[None, :], mask=valid[:, None] & m_lanes[None, :],
                   other=0.0)


@triton.jit
def load_tile_t(base, rows, row_stride, lanes, valid, m_lanes):
    """The transpose of ``load_tile``'s tile, [lanes, rows] (a chunk transposed), read so from
    memory: an MMA operand without a register transpose (Triton 3.6 on sm_90 miscompiles some
    products of transposed register tiles into out-of-range shared-memory reads)."""
    return tl.load(base + rows[None, :] * row_stride + lanes[:, None], mask=valid[None, :] & m_lanes[:, None],
                   other=0.0)


@triton.jit
def store_tile(base, rows, row_stride, lanes, valid, m_lanes, x):
    """x into the valid rows and lanes of a [rows, lanes] tile, in the buffer's dtype."""
    tl.store(base + rows[:, None] * row_stride + lanes[None, :], x.to(base.dtype.element_ty),
             mask=valid[:, None] & m_lanes[None, :])


@triton.jit
def store_tile_t(base, rows, row_stride, lanes, valid, m_lanes, x):
    """x [lanes, rows] into the valid rows and lanes (``load_tile_t``'s layout), in the buffer's dtype."""
    tl.store(base + rows[None, :] * row_stride + lanes[:, None], x.to(base.dtype.element_ty),
             mask=valid[None, :] & m_lanes[:, None])


@triton.jit
def chunk_slot(bos, i_n, i_c, BT: tl.constexpr):
    """Slot of chunk i_c of sequence i_n (first row bos) in a per-chunk buffer: bos // BT + i_n + i_c.
    A sequence of L rows uses cdiv(L, BT) ≤ (bos + L) // BT + 1 − bos // BT slots, so the
    sequences' slots never overlap and all fit in (total rows) // BT + N."""
    return (bos // BT + i_n + i_c).to(tl.int64)
