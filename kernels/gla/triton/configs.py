"""Launch configs of the GLA Triton kernels: the autotune lists, their key, the interpreter's and
jax-triton's fixed configs, the chunk and sub-chunk lengths.

A config is (BT, BS, num_warps, num_stages): BT the chunk length, BS the width of the slice of
the split dimension one program owns (E for the forward and the dv pass, D for the dq and the
dk/dg pass). Why these, and what the GPU must still show: docs/design/gla-triton.md.
"""
from __future__ import annotations

import os

import triton

from ...common.arith import AUTOTUNE, cdiv, pow2, shape_bucket  # noqa: F401 — ops and jax_bridge take them from here

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Every sweep holds its fp32 state slice with the slice as the M dimension of the big products:
# Sᵀ / dSᵀ [BS, D] (forward, dv: E-slices), S / dS [BS, E] (dq and dk/dg passes: D-slices,
# the chunk's tiles transposed). BS = 128 at 8 warps is a whole head dim per program (the
# warpgroups split it); BS = 64 doubles the programs for grids that leave SMs idle.
# Every launch runs at one chunk length, CHUNK: the parallel launches write per-chunk operands
# (the scores A, the totals Bl, the in-chunk parts of dq, dk, dg) that the sweeps read at their
# own chunk, and the dq pass writes the state entering each chunk in slots of CHUNK rows.
CHUNK = 64
# Sub-chunk of the parallel launches: pairs inside one take their exponent whole, one key row at
# a time; pairs across two factorise at the boundary between them (tensor-core products).
SUB_CHUNK = 16
FWD_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
BWD_Q_CONFIGS = [(64, 64, 8, 2), (64, 32, 8, 2), (64, 128, 8, 2), (64, 64, 8, 1)]
BWD_K_CONFIGS = [(64, 64, 8, 2), (64, 32, 8, 2), (64, 128, 8, 2), (64, 64, 8, 1)]
BWD_V_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
# The interpreter cannot autotune ("0 active drivers"): small chunks, so that tests cross chunks
# (and, at sub-chunks of half a chunk, sub-chunks).
INTERP_CONFIG = (16, 16, 4, 1)
# jax-triton launches the plain kernels with one fixed config per sweep (jax_config): for each, a
# config of its list that ptxas for sm_90 compiles without spilling (docs/design/gla-triton.md).
JAX_FWD_CONFIG = (64, 128, 8, 3)
JAX_BWD_Q_CONFIG = (64, 64, 8, 2)
JAX_BWD_K_CONFIG = (64, 64, 8, 1)
JAX_BWD_V_CONFIG = (64, 128, 8, 3)
# The parallel launches (gla_prep_kernel, gla_bwd_intra_kernel): key channels and value columns
# per step of a program, warps, and the most programs per (sequence, head) row (each walks every
# P-th chunk of its row).
PREP_BD = 64
PREP_BV = 64
# the backward's in-chunk launch holds W [BT, BT], its per-position columns and twice the prep
# launch's [BT, BD] tiles (dq and dk sides): ptxas for sm_90 spills there at BD = 64, not at 32
INTRA_BD = 32
PREP_WARPS = 8
PREP_MAX_PROGRAMS = 64


# The diagonal sub-chunk launches (gla_diag_scores_kernel, gla_bwd_diag_kernel): [BC, BD] tiles,
# one key row at a time, few registers, so that many programs share an SM and hide the row loads.
# ptxas for sm_90 at 4 warps, BD = 32: the scores 48 registers, the backward's (two exponentials
# and two accumulators a step) 93 (Triton 3.9) / 80 (3.6), no spills. The scores at BD = 64 take
# 72 (3.9) but Triton 3.6 spills 16 B there; at 128, 115 / 109.
DIAG_BD = 32
BWD_DIAG_BD = 32
DIAG_WARPS = 4
DIAG_MAX_PROGRAMS = 1024


def sub_chunk(bt: int) -> int:
    """The sub-chunk at chunk bt: SUB_CHUNK, or half the chunk when that is shorter (the
    interpreter's 16-row chunks), so that a chunk always has pairs across sub-chunks."""
    return min(SUB_CHUNK, bt // 2)


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


def prep_meta(d: int, bt: int, dot_prec: str, bd: int = PREP_BD) -> dict:
    """The launch keywords of the parallel launches at chunk bt and head dim d: the key-channel
    slice BD, the sub-chunk, the dots' precision, warps and one stage (the backward's adds BV,
    ``intra_bv``, and its narrower BD, INTRA_BD)."""
    return dict(BT=bt, BC=sub_chunk(bt), BD=min(bd, pow2(d)), DOT_PREC=dot_prec, num_warps=PREP_WARPS,
                num_stages=1)


def diag_grid(t: int, rows: int, bt: int) -> tuple[int, int]:
    """Grid of the diagonal launches: up to DIAG_MAX_PROGRAMS programs a (sequence, head) row, each
    striding its sub-chunks; under the interpreter two, as ``prep_grid``."""
    return (2 if INTERPRET else min(cdiv(t, sub_chunk(bt)), DIAG_MAX_PROGRAMS), rows)


def diag_meta(d: int, bt: int, bd: int = DIAG_BD) -> dict:
    """The launch keywords of the diagonal launches at chunk bt and head dim d (the backward's adds
    BV, ``intra_bv``, DOT_PREC and its narrower BD, BWD_DIAG_BD)."""
    return dict(BT=bt, BC=sub_chunk(bt), BD=min(bd, pow2(d)), num_warps=DIAG_WARPS, num_stages=1)


def intra_bv(e: int) -> int:
    """The value-column slice of ``gla_bwd_intra_kernel``'s do·vᵀ at head dim e."""
    return min(PREP_BV, pow2(e))


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
    allargs = {**named_args, **kwargs}
    if "SPLIT" not in allargs:
        return configs
    keep = [c for c in configs if c.kwargs["BS"] <= pow2(allargs["SPLIT"])]
    return keep or configs[:1]
