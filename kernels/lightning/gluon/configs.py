"""Launch configuration of the Gluon Lightning forward, and the host rule of which calls it takes.

One program owns one (sequence, head) and a BV-wide slice of the E value columns; it walks the
sequence in chunks of BT tokens. Its warps form three partitions (see ``kernels``): the default
one (4 warps, the output), a TMA load warp, and a state warpgroup (4 warps). Registers are set per
partition: the kernel launches at ``MAXNREG`` per thread over 12 warps (the load warp is rounded
up to a warpgroup), and the load warp gives most of its share to the two compute warpgroups.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

BT = 64               # chunk length: the M of every wgmma of the output partition
HEAD_DIMS = (64, 128)  # D and E the kernel takes (TMA boxes and wgmma shapes are fixed per value)
DTYPES = ("bfloat16", "float16")
# Which backward a Gluon forward takes (LIGHTNING_GLUON_BACKWARD, read at import): "auto" (the
# default) the Gluon passes (``backward``: dq by the forward kernel, dk and dv by ``dkdv``) where
# backward_reason allows and the call has at least GLUON_BACKWARD_MIN_ROWS rows (B·T·H), else the
# Triton kernel's; "1" the Gluon passes wherever allowed; "0" the Triton kernel's always.
BACKWARD_MODE = os.environ.get("LIGHTNING_GLUON_BACKWARD", "auto").strip().lower()
BACKWARD_ON_GLUON = BACKWARD_MODE != "0"
# Below this many rows a fwd+bwd is bound by host enqueue time, not by the GPU, and the Gluon
# backward (three forward launches, four descriptors each, and one for the end terms) costs the
# host more than the Triton kernel's three launches; 4·4096·32 is where the GPU time of the
# passes outgrows that (docs/design/lightning-gluon.md).
GLUON_BACKWARD_MIN_ROWS = 4 * 4096 * 32

# Whether the Gluon backward makes dk and dv in one pass (``dkdv``: q, k, v and dO read once, R kept
# once, the two halves' wgmma chains interleaved; 14 tensor moves a fwd+bwd) instead of two passes
# of the forward (16). LIGHTNING_GLUON_DKDV=0 takes the two passes (read at import, and by a forward
# call for its backward).
FUSED_DKDV = os.environ.get("LIGHTNING_GLUON_DKDV", "1").strip() != "0"

# Whether the dq pass after ``dkdv`` is a programmatic dependent launch (LIGHTNING_GLUON_PDL=1,
# read at import, and by a forward call for its backward): ``dkdv`` lets it launch as it starts, so
# its programs take the SMs ``dkdv`` leaves idle and those its programs free as they end, instead
# of waiting for the last one. The dq pass reads nothing ``dkdv`` writes; each of its programs
# waits for ``dkdv`` to complete only before it exits, so whatever follows the dq pass in the
# stream still finds dk and dv written. Off until timed on the H200.
PDL = os.environ.get("LIGHTNING_GLUON_PDL", "0").strip() == "1"

# The forward's start state from its h0 argument (the kernel's H0_MODE, bit flags): absent; h0
# itself; its transpose (the dq pass's S_0ᵀ, the dk pass's dS_Tᵀ); and, for dS_T, scaled by the
# start factor c = exp(min(−γ, −LOG_DECAY_FLOOR)) / scale (the reversed passes, see ``backward``).
# Done as the state is loaded, so the backward makes no [B, H, D, E] copies of dS_T or S_0.
H0_NONE, H0_PLAIN, H0_TRANSPOSED, H0_FROM_DST = 0, 1, 2, 4
LOG_DECAY_FLOOR = -20.0  # γ below which dS_T's start state is capped (λ < 2.1e-9 a token)


@dataclass(frozen=True)
class Config:
    """One launch: BV (value columns per program), ring depths, warps and registers."""

    bv: int
    load_stages: int = 2   # q/k/v chunk slots in the TMA ring
    state_stages: int = 2  # bf16 state buffers between the state and the output partitions
    out_stages: int = 2    # output tiles in flight to TMA stores
    num_warps: int = 4     # the default (output) partition
    worker_warps: tuple[int, int] = (1, 4)      # load, state
    worker_regs: tuple[int, int] = (24, 240)    # load, state: registers per thread after setmaxnreg
    maxnreg: int = 168     # per thread at launch: 168 x 384 threads fits the 64 K register file


# The dk / dv pass: one program per (sequence, head), four input tiles a ring slot (192 KB of ring
# and state buffers at D = E = 128, bf16) and one dk and one dv tile in flight, within the
# 232,448 B of shared memory an sm_90 block may have.
DKDV_CONFIG = Config(bv=0, load_stages=2, state_stages=2, out_stages=1)  # bv 0: all of E, no slices


@functools.lru_cache(maxsize=None)
def config_for(e: int) -> Config:
    """The forward's config for value head dim E: all of E per program (q and k read once per
    head) up to 128 columns (made once per E: a forward asks on every call)."""
    return Config(bv=min(e, 128))


def fallback_reason(dtype_name: str, d: int, e: int, varlen: bool) -> str | None:
    """None when the Gluon forward takes the call, else why the Triton kernel does instead.

    The rule: bf16 / fp16, D and E each 64 or 128, no packed varlen; either order. fp32 has no
    bf16/fp16 wgmma path; other head dims would need other TMA boxes and wgmma shapes; varlen
    would need a descriptor per sequence (a device-side descriptor), and the Triton kernel handles
    it at no loss.
    """
    if dtype_name not in DTYPES:
        return f"dtype {dtype_name} (the Gluon forward is bf16 / fp16 only)"
    if d not in HEAD_DIMS or e not in HEAD_DIMS:
        return f"head dims D={d}, E={e} (the Gluon forward takes D, E in {HEAD_DIMS})"
    if varlen:
        return "packed varlen (cu_seqlens)"
    return None


def backward_reason(dtype_name: str, heads: int, kv_heads: int, rows: int) -> str | None:
    """None when the backward of a Gluon forward runs on the Gluon passes (``backward``), else why the
    Triton kernel's backward runs it. bf16 only: the reversed passes start from dS_T / (scale·λ),
    which leaves fp16's range under strong decay; no GQA: those passes take dO as their keys;
    ``rows`` (B·T·H) at least GLUON_BACKWARD_MIN_ROWS unless LIGHTNING_GLUON_BACKWARD=1."""
    if not BACKWARD_ON_GLUON:
        return "the Gluon backward is off (LIGHTNING_GLUON_BACKWARD=0)"
    if dtype_name != "bfloat16":
        return f"dtype {dtype_name} (the Gluon backward is bf16 only)"
    if heads != kv_heads:
        return f"grouped heads ({heads} over {kv_heads}; the Gluon backward takes H = H_kv)"
    if BACKWARD_MODE != "1" and rows < GLUON_BACKWARD_MIN_ROWS:
        return (f"{rows} rows (B·T·H) < {GLUON_BACKWARD_MIN_ROWS}: host-bound, where the Triton backward's "
                "launches cost less (LIGHTNING_GLUON_BACKWARD=1 takes the Gluon one anyway)")
    return None
