"""Launch configs of the GLA Triton kernels: the autotune lists, their key, the interpreter's and
jax-triton's fixed configs, the chunk length and the parallel launches' levels.

A config is (BT, BS, num_warps, num_stages): BT the chunk length, BS the width of the slice of
the split dimension one program owns (E for the forward and the dv pass, D for the backward's two
state passes). Why these, and what the GPU must still show: docs/design/gla-triton.md.
"""
from __future__ import annotations

import os

import triton

# ops and jax_bridge take the launch arithmetic from here
from ...common.arith import AUTOTUNE, cdiv, chunk_slots, narrow_configs, pow2, shape_bucket  # noqa: F401

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Every sweep holds its fp32 state slice with the slice as the M dimension of the big products:
# Sᵀ / dSᵀ [BS, D] (forward, dv: E-slices), S / dS [BS, E] (the backward's state passes: D-slices,
# the chunk's tiles transposed). BS = 128 at 8 warps is a whole head dim per program (the
# warpgroups split it); BS = 64 doubles the programs for grids that leave SMs idle.
# Every launch runs at one chunk length, CHUNK: the parallel launches write per-chunk operands
# (the scores A, the totals Bl) that the sweeps read at their own chunk, and the backward's state
# passes write each chunk's states in slots of CHUNK rows that the in-chunk launch reads.
CHUNK = 64
# The parallel launches pair a chunk's rows through a binary tree over its positions: every pair
# s < t factorises at the boundary of the one level where t and s fall in the two halves of a
# group, one tensor-core product per level (log2 CHUNK of them) and one exponential per element.
FWD_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
BWD_H_CONFIGS = [(64, 128, 8, 2), (64, 64, 4, 2), (64, 64, 8, 2), (64, 128, 8, 3)]
BWD_DH_CONFIGS = [(64, 128, 8, 2), (64, 64, 4, 2), (64, 64, 8, 2), (64, 128, 8, 3)]
BWD_V_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
# The interpreter cannot autotune ("0 active drivers"): small chunks, so that tests cross chunks.
INTERP_CONFIG = (16, 16, 4, 1)
# jax-triton launches the plain kernels with one fixed config per sweep (jax_config): for the forward
# and the dv pass the config the H200's autotuner picks at the seed shape (B4 H32 D = E = 128 bf16,
# n 8192 and 32768), for the backward's two state passes the same form (docs/design/gla-triton.md).
JAX_FWD_CONFIG = (64, 64, 4, 2)
JAX_BWD_H_CONFIG = (64, 64, 4, 2)
JAX_BWD_DH_CONFIG = (64, 64, 4, 2)
JAX_BWD_V_CONFIG = (64, 64, 4, 2)
# The parallel launches (gla_prep_kernel, gla_bwd_intra_kernel): key channels per step of a
# program, warps, and the most programs per (sequence, head) row (each walks every P-th chunk of
# its row); the backward's value-column slice of do·vᵀ.
PREP_BD = 32
PREP_WARPS = 4
INTRA_BD = 32
INTRA_WARPS = 4
INTRA_BV = 64
# the in-chunk launch takes the tree's upper INTRA_TREE levels as tensor-core products (the pairs
# across blocks of CHUNK >> INTRA_TREE rows) and the pairs inside each block in fp32 registers, a
# thread holding a channel's rows of one block; levels(CHUNK), the default until the H200 times the
# register form against it, takes every level through the tree
INTRA_TREE = int(os.environ.get("GLA_INTRA_TREE", "6"))
# the exit launch (gla_bwd_exit_kernel): key channels per step, warps
EXIT_BD = 32
EXIT_WARPS = 4
PREP_MAX_PROGRAMS = 64


def levels(bt: int) -> int:
    """Levels of the parallel launches' binary tree over a chunk of bt rows: log2(bt)."""
    return bt.bit_length() - 1


def jax_config(config: tuple, d: int, e: int, dtype: str) -> tuple:
    """A jax-triton sweep's fixed config for head dims d, e and inputs of ``dtype`` (bf16, fp16,
    fp32): one pipeline stage for fp32 inputs (two stages of [64, 256] fp32 tiles need 280-340 KB
    of shared memory on sm_90, one 136-192 KB) and for fp16 inputs whose head dim pads past 128
    (their decayed operands are fp32)."""
    bt, bs, w, s = config
    one_stage = dtype == "fp32" or (dtype == "fp16" and pow2(max(d, e)) > 128)
    return (bt, bs, w, 1) if one_stage else config


def prep_grid(t: int, rows: int) -> tuple[int, int]:
    """Grid of the parallel launches (``gla_prep_kernel``, ``gla_bwd_intra_kernel``) for t rows of
    tokens (all sequences' under varlen) and ``rows`` (sequence, head) rows: up to
    PREP_MAX_PROGRAMS programs a row, each striding its chunks; under the interpreter two, so that
    the stride is exercised at small T."""
    return (2 if INTERPRET else min(cdiv(t, CHUNK), PREP_MAX_PROGRAMS), rows)


def prep_meta(d: int, bt: int, dot_prec: str) -> dict:
    """The launch keywords of ``gla_prep_kernel`` at chunk bt and head dim d: the key-channel slice
    BD, the levels, the dots' precision, warps and one stage."""
    return dict(BT=bt, BD=min(PREP_BD, pow2(d)), LEVELS=levels(bt), DOT_PREC=dot_prec,
                num_warps=PREP_WARPS, num_stages=1)


def intra_meta(d: int, e: int, bt: int) -> dict:
    """The launch keywords of ``gla_bwd_intra_kernel`` at chunk bt and head dims d, e (its flags,
    DOT_PREC included, come from the caller): the key-channel slice BD, the value-column slice BV
    of do·vᵀ, the levels, warps and one stage."""
    return dict(BT=bt, BD=intra_bd(d), BV=min(INTRA_BV, pow2(e)), LEVELS=min(INTRA_TREE, levels(bt)),
                PAIRS=intra_pairs(bt), num_warps=INTRA_WARPS, num_stages=1)


def intra_bd(d: int) -> int:
    """The in-chunk launch's key-channel slice at head dim d."""
    return min(INTRA_BD, pow2(d))


def intra_pairs(bt: int) -> int:
    """The rows of the in-chunk launch's blocks whose pairs run in registers at chunk bt (0: none)."""
    return 0 if INTRA_TREE >= levels(bt) else bt >> INTRA_TREE


def intra_scratch(grid: tuple[int, int], d: int, bt: int) -> int:
    """fp32 elements of the in-chunk launch's scratch: each program's copy of its chunk's in-block
    pairs of W, [bt / C, C, C], and its slice's in-block dq and dk, [2, bt, BD] (one element when no
    pairs run in registers)."""
    pairs = intra_pairs(bt)
    if not pairs:
        return 1
    return grid[0] * grid[1] * bt * (pairs + 2 * intra_bd(d))


def exit_meta(d: int, e: int, bt: int) -> dict:
    """The launch keywords of ``gla_bwd_exit_kernel`` at chunk bt and head dims d, e (its flags,
    DOT_PREC included, come from the caller): the key-channel slice BD, the value-column slice BV
    of the state product, warps and one stage."""
    return dict(BT=bt, BD=min(EXIT_BD, pow2(d)), BV=min(INTRA_BV, pow2(e)), num_warps=EXIT_WARPS, num_stages=1)


def autotune_configs(table) -> list[triton.Config]:
    """The autotune list; the interpreter's one config, or the first when autotuning is off
    (``LIGHTNING_TRITON_AUTOTUNE=0``, the Lightning kernels' knob)."""
    if INTERPRET:
        table = [INTERP_CONFIG]
    elif not AUTOTUNE:
        table = table[:1]
    return [triton.Config({"BT": bt, "BS": bs}, num_warps=w, num_stages=s) for bt, bs, w, s in table]


def prune_configs(configs, named_args, **kwargs):
    """Configs whose slice is no wider than the split dimension needs (the rest duplicate one)."""
    return narrow_configs(configs, {**named_args, **kwargs}, "BS", "SPLIT")
