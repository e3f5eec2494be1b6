"""Launch configs of the GLA Triton kernels: the autotune lists, their key, the interpreter's and
jax-triton's fixed configs, and the bound that picks the intra-chunk path.

A config is (BT, BS, num_warps, num_stages): BT the chunk length, BS the width of the slice of
the split dimension one program owns (E for the forward and the dv pass, D for the dq/dk/dg
pass). Why these, and what the GPU must still show: docs/design/gla-triton.md.
"""
from __future__ import annotations

import os

import triton

from ..lightning.configs import AUTOTUNE, cdiv, pow2, shape_bucket  # noqa: F401 — the same host arithmetic

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Every pass holds its fp32 state slice with the slice as the M dimension of the big products:
# Sᵀ / dSᵀ [BS, D] (forward, dv: E-slices), S / dS [BS, E] (dq/dk/dg: D-slices, the chunk's q, k,
# g transposed). BS = 128 at 8 warps is a whole head dim per program (the warpgroups split it);
# BS = 64 doubles the programs for grids that leave SMs idle.
# The forward and the dv pass sweep the decayed operands that one parallel launch
# (``gla_prep_kernel``) writes per chunk of PRE_CHUNK rows, so their chunk is that one.
PRE_CHUNK = 64
FWD_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
# The dq pass writes and the dk pass reads back the state entering every chunk (E·2/BT bytes per
# key element each way in bf16, for dg), in slots of BT rows: both passes run at BT = 64 (BT = 32
# would double that traffic), the only chunk length in their lists.
BWD_Q_CONFIGS = [(64, 64, 8, 2), (64, 32, 8, 2), (64, 128, 8, 2), (64, 64, 8, 1)]
BWD_K_CONFIGS = [(64, 64, 8, 2), (64, 32, 8, 2), (64, 128, 8, 2), (64, 64, 8, 1)]
BWD_V_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 8, 2)]
# The chunk of the exact sweep that a PATH "both" launch of the forward or the dv pass (the JAX
# bridge's) runs in flagged rows (kernels.BOTH_EXACT_CHUNK).
BOTH_EXACT_CHUNK = 16
# The longest chunk of any pass: the forward flags a row for the exact rerun when one of its chunks
# is deeper than SAFE_DEPTH·BT/MAX_CHUNK, so no chunk of an unflagged row is deeper than SAFE_DEPTH
# at any pass's chunk length.
MAX_CHUNK = max(c[0] for c in FWD_CONFIGS + BWD_Q_CONFIGS + BWD_K_CONFIGS + BWD_V_CONFIGS)
# The exact reruns (configs' EXACT variants) run only flagged rows: one small config each, the dq
# and dk passes at their lists' BT (the chunk entry states' slots follow it).
EXACT_FWD_CONFIG = (32, 64, 4, 1)
EXACT_BWD_QK_CONFIG = (64, 32, 4, 1)
EXACT_BWD_V_CONFIG = (32, 64, 4, 1)
# The interpreter cannot autotune ("0 active drivers"): small chunks, so that tests cross chunks.
INTERP_CONFIG = (16, 16, 4, 1)
# jax-triton launches the plain kernels with one fixed config per pass (jax_config): the dk pass's
# the fastest of its list at B4 T8192 H32 D=E=128 bf16 on the H200 (every config timed alone), the
# others the configs the torch path's autotuner picks at n = 8192 and 32768. The bridge's dq pass,
# its exact sweep compiled in, spills at BS = 128 and is still faster there than at 64
# (docs/design/gla-triton.md).
JAX_FWD_CONFIG = (64, 128, 8, 3)
JAX_BWD_Q_CONFIG = (64, 128, 8, 2)
JAX_BWD_K_CONFIG = (64, 64, 8, 1)
JAX_BWD_V_CONFIG = (64, 128, 8, 3)
# gla_prep_kernel: key channels per program, warps, and the most programs per (sequence, head) row
# (each walks every P-th chunk of its row)
PREP_BD = 64
PREP_WARPS = 4
PREP_MAX_PROGRAMS = 64

# The intra-chunk products reuse the chunk's decayed operands q⊙e^B and k⊙e^{Bl − B}, one of them
# rescaled by e^{−Bl}: while every channel's chunk total Bl is at least −SAFE_DEPTH they are normal
# fp32 / bf16 numbers (e^{−60} ≈ 8.8e-27) and no factor, nor a masked-out product summed over a
# head dim, overflows (e^{60} ≈ 1.1e26); a deeper chunk takes the exact token-by-token path.
SAFE_DEPTH = 60.0


def jax_config(config: tuple, d: int, e: int, dtype: str) -> tuple:
    """A jax-triton pass's fixed config for head dims d, e and inputs of ``dtype`` (bf16, fp16,
    fp32): one pipeline stage where the chunk's gate operands are fp32 (fp16, fp32 inputs) and a
    head dim pads past 128, and for fp32 inputs: two stages of [64, 256] fp32 tiles need 280-340 KB
    of shared memory (ptxas, sm_90), one 136-192 KB; the fp32 dv pass, its exact sweep compiled in
    (PATH "both"), needs 228 KB at D = E = 128 with two, 116 KB with one."""
    bt, bs, w, s = config
    one_stage = dtype == "fp32" or (dtype == "fp16" and pow2(max(d, e)) > 128)
    return (bt, bs, w, 1) if one_stage else config


def prep_grid(t: int, rows: int, d: int, bt: int) -> tuple[tuple[int, int, int], int]:
    """(grid, BD) of ``gla_prep_kernel`` for t rows of tokens (all sequences' under varlen), ``rows``
    (sequence, head) rows and head dim d at chunk bt: up to PREP_MAX_PROGRAMS programs a row, each
    striding its chunks; under the interpreter two, so that the stride is exercised at small T."""
    bd = min(PREP_BD, pow2(d))
    programs = 2 if INTERPRET else min(cdiv(t, bt), PREP_MAX_PROGRAMS)
    return (programs, rows, cdiv(d, bd)), bd


def autotune_configs(table) -> list[triton.Config]:
    """The autotune list; the interpreter's one config, or the first when autotuning is off
    (``LIGHTNING_TRITON_AUTOTUNE=0``, the Lightning kernels' knob)."""
    if INTERPRET:
        table = [INTERP_CONFIG]
    elif not AUTOTUNE:
        table = table[:1]
    return [triton.Config({"BT": bt, "BS": bs}, num_warps=w, num_stages=s) for bt, bs, w, s in table]


def exact_configs(config: tuple) -> list[triton.Config]:
    """The one config of an exact rerun (one config: Triton's autotuner then times nothing)."""
    bt, bs, w, s = INTERP_CONFIG if INTERPRET else config
    return [triton.Config({"BT": bt, "BS": bs}, num_warps=w, num_stages=s)]


def prune_configs(configs, named_args, **kwargs):
    """Configs whose slice is no wider than the split dimension needs (the rest duplicate one)."""
    allargs = {**named_args, **kwargs}
    if "SPLIT" not in allargs:
        return configs
    keep = [c for c in configs if c.kwargs["BS"] <= pow2(allargs["SPLIT"])]
    return keep or configs[:1]
