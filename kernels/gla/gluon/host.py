"""When ``gla/triton`` and ``gla/jax-triton`` take the Gluon prep launch (``prep``), when
``gla/triton`` takes the Gluon in-chunk backward launch (``intra``), and their launches.

The rule: the switch (``GLA_GLUON_PREP``, on unless set to 0: timed 0.55× the Triton prep launch
on the H200; read at import), Gluon's Hopper API importable, a CUDA sm_90 device, bf16 or fp16
inputs, D 64 or 128, and chunks of 64 (six levels). The in-chunk backward launch follows the same
rule behind its own switch (``GLA_GLUON_INTRA=1``), with E 64 or 128 too. Every other call runs the
Triton launch, with the same outputs.
"""
from __future__ import annotations

import os

import torch

from ...common.launch import LazyLauncher
from ...common import gluon_compat as compat

PREP_ON = os.environ.get("GLA_GLUON_PREP", "1").strip() != "0"
# the in-chunk backward launch in Gluon (``intra``): off unless GLA_GLUON_INTRA=1
INTRA_ON = os.environ.get("GLA_GLUON_INTRA", "0").strip() == "1"
# gla/jax-triton's prep launch in Gluon, through jax-triton (``common.jax_gluon``): on unless
# GLA_JAX_GLUON_PREP=0, as the torch path's
JAX_PREP_ON = os.environ.get("GLA_JAX_GLUON_PREP", "1").strip() != "0"
HEAD_DIMS = (64, 128)
CHUNK = 64
# the in-chunk backward's key slice and the lanes sharing a key channel's rows: 64 and 4 are 16 rows
# a thread and 8 warps
INTRA_KDS = int(os.environ.get("GLA_GLUON_INTRA_KDS", "64"))
INTRA_ROW_LANES = int(os.environ.get("GLA_GLUON_INTRA_ROW_LANES", "4"))
# the in-chunk level products on fp16 operands (powers of two keep them in range) instead of tf32
INTRA_OP16 = os.environ.get("GLA_GLUON_INTRA_OP16", "0").strip() == "1"
# with fp16 operands: the level products' results stay in the MMA layout (the operands read back
# from shared memory, two buffer sets, both products in flight) instead of moving to the column layout
INTRA_EPI = os.environ.get("GLA_GLUON_INTRA_EPI", "0").strip() == "1"
# the in-chunk pairs inside blocks of this many rows in fp32 registers, only the levels above them as
# products (0: every level a product); a block is a thread's rows, CHUNK / INTRA_ROW_LANES (16 at 4)
INTRA_PAIRS = int(os.environ.get("GLA_GLUON_INTRA_PAIRS", "0"))
# the exit state's terms (``gla_bwd_exit_kernel``'s) in the Gluon in-chunk launch itself: dk and dg
# leave that launch final and the exit launch does not run (gla/triton and gla/jax-triton alike)
INTRA_EXIT = os.environ.get("GLA_GLUON_INTRA_EXIT", "0").strip() == "1"
# a register cap per thread for the torch path's in-chunk launch (0: none): 128 at 8 warps lets two
# programs share an SM
INTRA_MAXNREG = int(os.environ.get("GLA_GLUON_INTRA_MAXNREG", "0"))
# lanes sharing a key channel's rows in the prep launch: each thread holds CHUNK / ROW_LANES of them
ROW_LANES = int(os.environ.get("GLA_GLUON_PREP_ROW_LANES", "2"))
# the prep launch's level products: fp16 operands stored channel-major (vector stores, twice the
# tensor-core rate) instead of tf32 ones stored row-major (GLA_GLUON_PREP_OP16=0). fp16 keeps tf32's
# mantissa; bf16 inputs are scaled per row by a power of two as they are staged, so fp16's range
# holds q⊙E and k⊙E for any input
PREP_OP16 = os.environ.get("GLA_GLUON_PREP_OP16", "1").strip() != "0"
# the prep launch's g, q and k through a two-slot shared ring of asynchronous copies, the next chunk's
# in flight while this one's levels run (GLA_GLUON_PREP_PREFETCH=1; off until timed on the H200)
PREP_PREFETCH = os.environ.get("GLA_GLUON_PREP_PREFETCH", "0").strip() == "1"
# key channels a prep program takes at a time (GLA_GLUON_PREP_KS; 0, the default: all of D): a
# narrower slice is fewer warps a program at the same registers a thread, so two programs share an SM
# (``prep_sliced``; off until timed on the H200)
PREP_KS = int(os.environ.get("GLA_GLUON_PREP_KS", "0"))
# the prep launch warp-specialized (``prep_specialized``): one partition makes each level's operands
# while a warpgroup runs the last level's product (GLA_GLUON_PREP_WS=1; off until timed on the H200),
# that warpgroup at PREP_WS_REGS registers a thread, at most PREP_WS_PROGRAMS programs a row (each then
# takes more of the row's chunks: a longer pipeline a program, one program an SM)
PREP_WS = os.environ.get("GLA_GLUON_PREP_WS", "0").strip() == "1"
PREP_WS_REGS = int(os.environ.get("GLA_GLUON_PREP_WS_REGS", "96"))
PREP_WS_PROGRAMS = int(os.environ.get("GLA_GLUON_PREP_WS_PROGRAMS", "16"))


def warps(d: int, row_lanes: int | None = None) -> int:
    """Warps of a launch over d key channels at a time: one thread per (key channel, row share);
    the prep launch's lanes a channel (ROW_LANES, read at the call) unless given."""
    return d * (ROW_LANES if row_lanes is None else row_lanes) // 32


# CUDA devices the sm_90 check accepted: later calls skip its device query
_SM90_READY: set[int] = set()


def prep_reason(q: torch.Tensor, bt: int) -> str | None:
    """None when the prep launch of a call on ``q`` runs in Gluon, else why the Triton one runs."""
    if not PREP_ON:
        return "the Gluon prep launch is off (GLA_GLUON_PREP=0)"
    return _reason(q, bt)


def jax_prep_reason(dtype_name: str, d: int, bt: int, device) -> str | None:
    """None when gla/jax-triton's prep launch runs in Gluon, else why the Triton one runs: the
    switch, the torch path's rule (bf16 / fp16, D 64 or 128, chunks of 64), Gluon's API and an
    sm_90 JAX ``device``."""
    if not JAX_PREP_ON:
        return "the Gluon prep launch of gla/jax-triton is off (GLA_JAX_GLUON_PREP=0)"
    return _jax_device_reason(dtype_name, d, bt, device)


def _shape_reason(dtype_name: str, d: int, bt: int) -> str | None:
    """The dtype, D and chunk every Gluon launch takes (torch and JAX callers alike)."""
    if dtype_name not in ("bfloat16", "float16"):
        return f"dtype {dtype_name} (the Gluon launches are bf16 / fp16 only)"
    if d not in HEAD_DIMS or bt != CHUNK:
        return f"D={d}, chunk {bt} (the Gluon launches take D in {HEAD_DIMS}, chunk {CHUNK})"
    return None


def _reason(q: torch.Tensor, bt: int) -> str | None:
    """The torch launch's rule: the dtype, D and the chunk, then the API and an sm_90 device."""
    reason = _shape_reason(str(q.dtype).removeprefix("torch."), q.shape[3], bt)
    if reason is not None:
        return reason
    if q.get_device() in _SM90_READY:
        return None
    reason = compat.sm90_reason(q.device, "a Gluon GLA launch")
    if reason is None:
        _SM90_READY.add(q.get_device())
    return reason


def intra_reason(q: torch.Tensor, v: torch.Tensor, bt: int) -> str | None:
    """None when the in-chunk backward launch of a call runs in Gluon, else why the Triton one runs:
    the switch, the prep launch's rule, and E 64 or 128."""
    return _intra_switch_reason(v.shape[3]) or _reason(q, bt)


def jax_intra_reason(dtype_name: str, d: int, e: int, bt: int, device) -> str | None:
    """None when gla/jax-triton's in-chunk backward launch runs in Gluon, else why the Triton one
    runs: the torch path's switch and rule (``intra_reason``) and an sm_90 JAX ``device``."""
    return _intra_switch_reason(e) or _jax_device_reason(dtype_name, d, bt, device)


def _intra_switch_reason(e: int) -> str | None:
    """What the in-chunk launch asks beyond the prep launch's rule: its switch, and E 64 or 128."""
    if not INTRA_ON:
        return "the Gluon in-chunk backward launch is off (GLA_GLUON_INTRA unset or not 1)"
    if e not in HEAD_DIMS:
        return f"E={e} (the Gluon in-chunk backward takes E in {HEAD_DIMS})"
    return None


def _jax_device_reason(dtype_name: str, d: int, bt: int, device) -> str | None:
    """The JAX launches' rule: the dtype, D and the chunk, then the API and an sm_90 ``device``."""
    reason = _shape_reason(dtype_name, d, bt)
    if reason is not None:
        return reason
    if compat.IMPORT_ERROR is not None:
        return compat.unavailable_reason()
    if getattr(device, "platform", None) != "gpu" or str(getattr(device, "compute_capability", "")) != "9.0":
        return f"device {device} (the Gluon launches need an sm_90 GPU)"
    return None


_LAUNCH = LazyLauncher(".prep", __package__, "gla_prep_gluon_kernel")
_LAUNCH_SLICED = LazyLauncher(".prep_sliced", __package__, "gla_prep_sliced_gluon_kernel")
_LAUNCH_SPECIALIZED = LazyLauncher(".prep_specialized", __package__, "gla_prep_specialized_gluon_kernel")
_LAUNCH_INTRA = LazyLauncher(".intra", __package__, "gla_bwd_intra_gluon_kernel")
_LAUNCH_INTRA_EXIT = LazyLauncher(".intra", __package__, "gla_bwd_intra_exit_gluon_kernel")


def intra_constexprs() -> dict:
    """The in-chunk kernel's layout keywords beyond gla_bwd_intra_kernel's flags."""
    return dict(BT=CHUNK, KDS=INTRA_KDS, ROW_LANES=INTRA_ROW_LANES, OP16=INTRA_OP16 or INTRA_EPI, EPI=INTRA_EPI,
                PAIRS=intra_pairs())


def intra_pairs() -> int:
    """The rows of the blocks whose pairs the in-chunk kernel takes in registers (0: none). A block
    must be a thread's rows of one key channel, so any other value is refused here, before a compile."""
    if INTRA_PAIRS not in (0, CHUNK // INTRA_ROW_LANES):
        raise ValueError(f"GLA_GLUON_INTRA_PAIRS={INTRA_PAIRS}: 0 or a thread's rows, CHUNK / "
                         f"GLA_GLUON_INTRA_ROW_LANES = {CHUNK // INTRA_ROW_LANES}")
    return INTRA_PAIRS


def intra_scratch(grid: tuple[int, int]) -> int:
    """fp32 elements of the in-chunk kernel's scratch for ``grid``: two slots a program, each a copy of
    a chunk's in-block pairs of W, [CHUNK / PAIRS, PAIRS, PAIRS] (one element when no pairs run in
    registers)."""
    pairs = intra_pairs()
    return 2 * grid[0] * grid[1] * CHUNK * pairs if pairs else 1


def intra_meta(d: int, e: int, reverse: bool, varlen: bool) -> dict:
    """The in-chunk kernel's launch keywords (torch and JAX alike): its flags, layout and warps."""
    return dict(KD=d, VD=e, REVERSE=bool(reverse), IS_VARLEN=bool(varlen), num_warps=intra_warps(),
                **intra_constexprs())


def intra_warps() -> int:
    """Warps of the in-chunk launch: one thread per (key channel of a slice, row share)."""
    return warps(INTRA_KDS, INTRA_ROW_LANES)


def intra_exit() -> bool:
    """Whether a backward whose in-chunk launch runs in Gluon takes the exit terms there
    (GLA_GLUON_INTRA_EXIT=1, ``intra.gla_bwd_intra_exit_gluon_kernel``) and skips the exit launch.
    Every form of the launch takes them (tf32 or fp16 operands, either epilogue, PAIRS 0 or 16): the
    exit state's slice needs one more [KDS, E] 16-bit buffer (16 KB at KDS 64, E 128), so the
    largest form, tf32 at 160 KB, stays within the H200's 227 KB."""
    return INTRA_EXIT


def launch_intra(key: tuple, args: tuple, grid: tuple[int, int], d: int, e: int, reverse: bool, varlen: bool,
                 stream, exit_terms: bool = False) -> None:
    """Launch ``intra.gla_bwd_intra_gluon_kernel`` with ``gla_bwd_intra_kernel``'s arguments ``args``,
    or with ``exit_terms`` ``intra.gla_bwd_intra_exit_gluon_kernel`` with its own (q, k, v, g, do, hc,
    dhc, thr, cu, T, H, HKV, scale, dq, dk, dg, wsc). The key names the form and the entry, so a
    launcher cached for one is not reused for another."""
    spec = lambda: (lambda meta: grid,  # noqa: E731
                    dict(intra_meta(d, e, reverse, varlen), **({"maxnreg": INTRA_MAXNREG} if INTRA_MAXNREG else {})))
    launcher = _LAUNCH_INTRA_EXIT if exit_terms else _LAUNCH_INTRA
    launcher(("gluon-intra", INTRA_KDS, INTRA_ROW_LANES, INTRA_OP16, INTRA_EPI, INTRA_PAIRS, INTRA_MAXNREG,
              bool(exit_terms)) + key, args, spec, stream)


def prep_slice(d: int) -> int:
    """The prep launch's key slice at head dim ``d`` (0: all of D, ``prep.gla_prep_gluon_kernel``).
    A slice takes at least a warpgroup (its level products are wgmmas) in 16-channel steps, and the
    prefetch ring is the whole-D kernel's: other settings are refused here, before a compile."""
    ks = PREP_KS if 0 < PREP_KS < d else 0
    if ks and (ks % 16 or ks * ROW_LANES < 128):
        raise ValueError(f"GLA_GLUON_PREP_KS={PREP_KS}: a multiple of 16 whose warps, KS·ROW_LANES / 32 = "
                         f"{ks * ROW_LANES // 32}, make a warpgroup (4) at least")
    if ks and PREP_PREFETCH:
        raise ValueError("GLA_GLUON_PREP_PREFETCH=1 with GLA_GLUON_PREP_KS: the prefetch ring is the whole-D kernel's")
    return ks


def prep_specialized() -> bool:
    """Whether the prep launch is the warp-specialized kernel (GLA_GLUON_PREP_WS=1): fp16 level operands
    over all of D, with or without the prefetch ring (GLA_GLUON_PREP_PREFETCH, bf16 inputs); the other
    prep switches are refused here, before a compile."""
    if not PREP_WS:
        return False
    others = [name for name, on in (("GLA_GLUON_PREP_OP16=0", not PREP_OP16), ("GLA_GLUON_PREP_KS", PREP_KS)) if on]
    if others:
        raise ValueError(f"GLA_GLUON_PREP_WS=1 with {', '.join(others)}: the warp-specialized prep launch takes "
                         "fp16 operands over all of D")
    if not 24 <= PREP_WS_REGS <= 256 or PREP_WS_REGS % 8 or PREP_WS_PROGRAMS < 1:
        raise ValueError(f"GLA_GLUON_PREP_WS_REGS={PREP_WS_REGS} / GLA_GLUON_PREP_WS_PROGRAMS={PREP_WS_PROGRAMS}: "
                         "registers a multiple of 8 in [24, 256], programs at least 1")
    return True


def prep_kernel(d: int):
    """The Gluon prep kernel a launch at head dim ``d`` takes: the whole-D one, the key-sliced one, or
    the warp-specialized one."""
    if prep_specialized():
        from . import prep_specialized as ws
        return ws.gla_prep_specialized_gluon_kernel
    if prep_slice(d):
        from . import prep_sliced
        return prep_sliced.gla_prep_sliced_gluon_kernel
    from . import prep
    return prep.gla_prep_gluon_kernel


def prep_meta(d: int, bt: int) -> dict:
    """The prep kernel's launch keywords beyond gla_prep_kernel's own (KD, REVERSE, IS_VARLEN): its
    layout, its level products' form and its warps (the torch and the JAX launches alike)."""
    if prep_specialized():
        return dict(BT=bt, ROW_LANES=ROW_LANES, PRODUCT_REGS=PREP_WS_REGS, PREFETCH=PREP_PREFETCH, num_warps=warps(d))
    meta = dict(BT=bt, ROW_LANES=ROW_LANES, OP16=PREP_OP16)
    ks = prep_slice(d)
    if ks:
        return dict(meta, KS=ks, num_warps=warps(ks))
    return dict(meta, PREFETCH=PREP_PREFETCH, num_warps=warps(d))


def prep_grid(grid: tuple[int, int]) -> tuple[int, int]:
    """The Gluon prep launch's grid from the Triton one's: the warp-specialized kernel takes at most
    PREP_WS_PROGRAMS programs a row, so each runs its pipeline over more chunks."""
    return (min(grid[0], PREP_WS_PROGRAMS), grid[1]) if prep_specialized() else grid


def launch_prep(key: tuple, args: tuple, grid: tuple[int, int], d: int, reverse: bool, varlen: bool, bt: int,
                stream) -> None:
    """Launch the Gluon prep kernel (``prep_kernel``) with ``gla_prep_kernel``'s arguments ``args``."""
    grid = prep_grid(grid)
    spec = lambda: (lambda meta: grid,  # noqa: E731
                    dict(KD=d, REVERSE=bool(reverse), IS_VARLEN=bool(varlen), **prep_meta(d, bt)))
    launcher = _LAUNCH_SPECIALIZED if prep_specialized() else _LAUNCH_SLICED if prep_slice(d) else _LAUNCH
    launcher(("gluon", PREP_OP16, PREP_PREFETCH, PREP_KS, ROW_LANES, PREP_WS, PREP_WS_REGS,
              PREP_WS_PROGRAMS) + key, args, spec, stream)
