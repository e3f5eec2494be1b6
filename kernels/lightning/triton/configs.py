"""Launch configs of the Lightning Triton kernels: the autotune lists, their key and pruner, the
interpreter's and jax-triton's fixed configs.

A config is (BT, BV, num_warps, num_stages) for the row-wise chunk pass (TR 0) and
(BT, BV, num_warps, num_stages, TR) for the transposed ones. BT is the chunk length, BV the
width of the slice of the split dimension (E for the forward and the dv pass, D for dq and dk)
one program owns, TR the orientation of ``kernels._chunk_pass``. Why these configs, and what
else was measured: docs/design/lightning-triton.md.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

from ...common.arith import AUTOTUNE, long_sequence, pow2

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Tensor-descriptor configs (TR 3) make descriptors on the device: they need
# tl.make_tensor_descriptor and Triton's global-scratch allocator (ops.ensure_allocator sets one).
# LIGHTNING_TRITON_TMA=0 (read at import) prunes them from every autotune list.
try:
    from triton.runtime import _allocation as triton_allocation
except ImportError:  # an older Triton
    triton_allocation = None
TMA_OK = (hasattr(tl, "make_tensor_descriptor") and triton_allocation is not None
          and hasattr(triton_allocation, "_allocator") and hasattr(triton_allocation, "NullAllocator")
          and os.environ.get("LIGHTNING_TRITON_TMA", "1").strip() != "0")

# The row-wise pass: BT 64 at 4 warps (at 8 warps both warpgroups compute the chained 64-row
# products); BV 32 / 64 keep the fp32 state slice in registers without a spill.
FWD_CONFIGS = [(64, 32, 4, 3), (64, 64, 4, 2)]
BWD_CONFIGS = [(64, 32, 4, 2), (64, 32, 4, 3), (64, 64, 4, 2)]
# The transposed pass: BV 128 at 8 warps (the two warpgroups split the value rows of every big
# product) with 3 or 4 stages; TR 2 moves the state update's decay onto b; TR 3 moves the tiles
# by tensor descriptors (long sequences only, see prune_configs); (64, 64, 4, 2) puts two
# programs on an SM.
FWD_CONFIGS_T = [(64, 128, 8, 3, 1), (64, 128, 8, 4, 1), (64, 128, 8, 3, 2), (64, 64, 4, 2, 1),
                 (64, 128, 8, 3, 3), (64, 128, 8, 4, 3)]
BWD_CONFIGS_T = [(64, 128, 8, 3, 1), (64, 128, 8, 3, 2), (64, 64, 4, 2, 1), (64, 128, 8, 3, 3)]
# The interpreter cannot autotune ("0 active drivers"): one small row-wise config (tests set TR).
INTERP_CONFIG = (32, 32, 4, 1)
# fp32 inputs take IEEE dots, which Triton lowers to unrolled FMA loops: one config of the big
# tables compiles in 15-40 s for sm_90 and a first fp32 call would try them all (minutes, for a
# check that times nothing). The small row-wise config compiles in about 4 s per kernel.
FP32_CONFIG = (32, 32, 4, 1, 0)
# jax-triton launches the plain kernels (it refuses autotuned kernels whose key lacks a scalar
# argument): the transposed pass with all of E per program for head dims up to 128; wider padded
# head dims take the row-wise config (a [BV, 256] fp32 state does not fit the transposed pass's
# registers).
JAX_CONFIG = (64, 128, 8, 3, 1)
JAX_WIDE_CONFIG = (64, 64, 4, 2, 0)


def autotune_configs(table, table_t=()) -> list[triton.Config]:
    """Autotune configs of the row-wise table (TR 0) and the transposed one (TR from the tuple)."""
    if INTERPRET:
        table, table_t = [INTERP_CONFIG], ()
    elif not AUTOTUNE:
        table, table_t = table[:1], ()
    rows = [(bt, bv, w, s, 0) for bt, bv, w, s in table] + list(table_t)
    configs = [triton.Config({"BT": bt, "BV": bv, "TR": tr}, num_warps=w, num_stages=s) for bt, bv, w, s, tr in rows]
    if not INTERPRET:
        bt, bv, w, s, tr = FP32_CONFIG
        fp32 = triton.Config({"BT": bt, "BV": bv, "TR": tr}, num_warps=w, num_stages=s)
        _FP32_ONLY.add(id(fp32))
        _KEEP.append(fp32)
        configs.append(fp32)
    return configs


# the fp32 configs of the autotune lists, by identity (a config carries no tag a kernel would not
# receive as an argument); _KEEP holds them so no id is reused
_FP32_ONLY: set[int] = set()
_KEEP: list = []


def _fp32_only(config) -> bool:
    return id(config) in _FP32_ONLY


def descriptors_pay(allargs) -> bool:
    """Whether the tensor-descriptor configs may run for these launch arguments: descriptors need
    16-byte-aligned bases, and up to 4096 tokens a torch call is host-bound, where descriptor
    launches measured slower (docs/design/lightning-triton.md, "TR 3 only beyond 4096 tokens")."""
    tensors = [a for a in allargs.values() if hasattr(a, "data_ptr")]
    return (TMA_OK and long_sequence(allargs.get("SHAPE_BUCKET", 2))
            and not any(a.data_ptr() % 16 for a in tensors))


def prune_configs(configs, named_args, **kwargs):
    """The configs worth timing for one launch: none whose BV is wider than the split dimension
    needs (duplicates), and the descriptor ones only where descriptors_pay.

    The constexprs arrive in kwargs (Triton 3.6) or in named_args, depending on the version.
    """
    allargs = {**named_args, **kwargs}
    if allargs.get("DOT_PREC") == "ieee":
        return [c for c in configs if _fp32_only(c)] or configs[:1]
    configs = [c for c in configs if not _fp32_only(c)]
    if "VD" not in allargs or "KD" not in allargs:
        return configs
    split = allargs["KD"] if allargs.get("ROLE", 2) in (0, 1) else allargs["VD"]  # dq, dk split D
    keep = [c for c in configs if c.kwargs["BV"] <= pow2(split)]
    if not descriptors_pay(allargs):
        keep = [c for c in keep if c.kwargs.get("TR") != 3]
    return keep or configs[:1]
