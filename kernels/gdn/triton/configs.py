"""Launch configs of the GDN Triton kernels: the chunk, the parallel launch's fixed config, the
sweep's autotune list and the interpreter's fixed configs.

Both launches run at one chunk length: u and w are the solutions of each chunk's own triangular
system, so the sweep must cut the sequence where the parallel launch did. Only the sweep is
autotuned, over its value-column slice, warps and stages.
"""
from __future__ import annotations

import os

import triton

# ops takes the launch arithmetic from here
from ...common.arith import AUTOTUNE, cdiv, chunk_slots, narrow_configs, pow2, shape_bucket  # noqa: F401

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

CHUNK = 64
# The interpreter cannot autotune ("0 active drivers"): a small chunk and slice, so that tests
# cross chunks and split E over several programs.
INTERP_CHUNK = 16
INTERP_BV = 16
# The parallel launch (gdn_prep_kernel): key and value columns per step (the K Kᵀ sums, the w and
# u products), warps, and the most programs per (sequence, head) row, each striding its chunks.
# It holds the inverse's ten [16, 16] blocks; at D = 128 bf16 ptxas for sm_90 fits BD = BV = 64
# at 8 warps without spilling (4 warps spill 16 bytes).
PREP_BD = 64
PREP_BV = 64
PREP_WARPS = 8
PREP_MAX_PROGRAMS = 64
# The sweep (gdn_fwd_kernel): (BV, num_warps, num_stages). It holds the fp32 state slice
# S [BK, BV] beside the chunk's q, k, w [BT, BK] tiles; at D = 128 bf16 ptxas for sm_90 fits
# BV = 32 without spilling, while BV = 64 spills 300-340 bytes at 4 and 8 warps
# (``lattnbench static``), so only BV = 32 is tuned.
FWD_CONFIGS = [(32, 4, 2), (32, 8, 2)]
# The backward's launches, one fixed config each. The reverse sweep (gdn_bwd_state_kernel) carries
# dS [BK, BV] fp32 beside the chunk's q, k, w tiles; its value slice is 64 at 8 warps, the one
# config that Triton 3.6 compiles correctly for sm_90 at 16-bit inputs: slices of 16 and 32, at 4 or
# 8 warps, run into out-of-range shared-memory reads or garbage on the H200 (compute-sanitizer),
# while fp32 inputs (FMA products) run right at any slice. The other two launches take the least
# spilling config at D = E = 128 bf16 for sm_90 (``lattnbench static``): the chunk launch
# (gdn_bwd_chunk_kernel) holds two [BT, BT] fp32 matrices and three [BT, BD] accumulators (about
# 800 bytes at any slice and warps tried); the WY launch (gdn_bwd_wy_kernel) holds six [BT, BT] fp32
# matrices (A, its inverse, K Kᵀ, the decays, dA and P): slices of 16 at 8 warps spill 840 bytes,
# of 32 3.3 KB.
BWD_BV = 64
BWD_WARPS = 8
CHUNK_BD = 32
CHUNK_BV = 32
CHUNK_WARPS = 4
WY_BD = 16
WY_BV = 16
WY_WARPS = 8


def prep_grid(t: int, rows: int) -> tuple[int, int]:
    """Grid of ``gdn_prep_kernel`` for t rows of tokens and ``rows`` (sequence, head) rows: up to
    PREP_MAX_PROGRAMS programs a row, each striding its chunks; under the interpreter two, so that
    the stride is exercised at small T."""
    return (2 if INTERPRET else min(cdiv(t, CHUNK), PREP_MAX_PROGRAMS), rows)


def prep_meta(d: int, e: int, bt: int, dot_prec: str) -> dict:
    """The launch keywords of ``gdn_prep_kernel`` at chunk bt and head dims d, e."""
    return dict(BT=bt, BD=min(PREP_BD, pow2(d)), BV=min(PREP_BV, pow2(e)), DOT_PREC=dot_prec,
                num_warps=PREP_WARPS, num_stages=1)


def bwd_meta(bt: int, bv_interp: int, dot_prec: str) -> dict:
    """The launch keywords of ``gdn_bwd_state_kernel`` at chunk bt (under the interpreter its
    slice is the forward's, bv_interp)."""
    return dict(BT=bt, BV=bv_interp if INTERPRET else BWD_BV, DOT_PREC=dot_prec, num_warps=BWD_WARPS,
                num_stages=1)


def chunk_meta(d: int, e: int, bt: int, dot_prec: str) -> dict:
    """The launch keywords of ``gdn_bwd_chunk_kernel`` at chunk bt and head dims d, e."""
    return dict(BT=bt, BD=min(CHUNK_BD, pow2(d)), BV=min(CHUNK_BV, pow2(e)), DOT_PREC=dot_prec,
                num_warps=CHUNK_WARPS, num_stages=1)


def wy_meta(d: int, e: int, bt: int, dot_prec: str) -> dict:
    """The launch keywords of ``gdn_bwd_wy_kernel`` at chunk bt and head dims d, e."""
    return dict(BT=bt, BD=min(WY_BD, pow2(d)), BV=min(WY_BV, pow2(e)), DOT_PREC=dot_prec, num_warps=WY_WARPS,
                num_stages=1)


def autotune_configs(table) -> list[triton.Config]:
    """The sweep's autotune list at CHUNK; the first only when autotuning is off
    (``LIGHTNING_TRITON_AUTOTUNE=0``)."""
    if not AUTOTUNE:
        table = table[:1]
    return [triton.Config({"BT": CHUNK, "BV": bv}, num_warps=w, num_stages=s) for bv, w, s in table]


def prune_configs(configs, named_args, **kwargs):
    """Configs whose slice is no wider than E needs (the rest duplicate one)."""
    return narrow_configs(configs, {**named_args, **kwargs}, "BV", "VD")
