"""The jobs of the bundled GDN Triton kernels at the seed shape (D = E = 128, bf16) with the
default call's flags (no initial state, final state returned, no varlen): the parallel launch at
its one config, every default autotune config of the forward sweep, and the backward's three
launches of their own at their one config each."""
from __future__ import annotations

from lattnbench.static.triton_aot import Job

D = E = 128
SEED_SHAPE = f"D=E={D} bf16"
MODULE = "lattnbench.kernels.gdn.triton.kernels"
BWD_MODULE = "lattnbench.kernels.gdn.triton.backward"
_BF, _F32 = "*bf16", "*fp32"
_FLAGS = dict(KD=D, VD=E, IS_VARLEN=False, DOT_PREC="tf32")


def _fixed_job(kernel: str, module: str, function: str, types: dict, meta: dict, flags: dict | None = None) -> Job:
    """A launch of one fixed config (``configs.*_meta``: no autotuning, one pipeline stage),
    labelled by its block sizes and warps."""
    meta = dict(meta)
    w = meta.pop("num_warps")
    meta.pop("num_stages")
    label = " ".join(f"{k}={meta[k]}" for k in ("BT", "BD", "BV") if k in meta)
    return Job(kernel=kernel, config=f"{label} w{w} s1", module=module, function=function, types=types,
               constexprs=dict(_FLAGS, **(flags or {}), **meta), num_warps=w, num_stages=1,
               aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def prep_job() -> Job:
    """The one launch config of u and w (``ops.gdn_prep``)."""
    from lattnbench.kernels.gdn.triton import configs as C

    types = dict(k=_BF, v=_BF, g=_F32, beta=_BF, cu=_F32, T="i32", H="i32", HKV="i32", u=_F32, w=_BF)
    return _fixed_job("gdn/triton:prep", MODULE, "gdn_prep_kernel", types, C.prep_meta(D, E, C.CHUNK, "tf32"))


def fwd_job(bt: int, bv: int, warps: int, stages: int) -> Job:
    """The forward sweep at one config."""
    types = dict(q=_BF, k=_BF, g=_F32, u=_F32, w=_BF, h0=_F32, cu=_F32, T="i32", H="i32", HKV="i32",
                 scale="fp32", SHAPE_BUCKET="i32", o=_BF, ht=_F32, hc=_F32)
    return Job(kernel="gdn/triton:fwd", config=f"BT={bt} BV={bv} w{warps} s{stages}", module=MODULE,
               function="gdn_fwd_kernel", types=types,
               constexprs=dict(_FLAGS, BK=D, HAS_H0=False, STORE_HT=True, STORE_HC=False, BT=bt, BV=bv),
               num_warps=warps, num_stages=stages, aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def bwd_state_job() -> Job:
    """The backward's reverse sweep (``ops.gdn_bwd``), with the final state's cotangent."""
    from lattnbench.kernels.gdn.triton import configs as C

    types = dict(q=_BF, k=_BF, g=_F32, u=_F32, w=_BF, do=_BF, dht=_F32, hc=_F32, cu=_F32, T="i32", H="i32",
                 HKV="i32", scale="fp32", nu=_F32, dnu=_F32, dhc=_F32, dh0=_F32)
    return _fixed_job("gdn/triton:bwd-state", BWD_MODULE, "gdn_bwd_state_kernel", types,
                      C.bwd_meta(C.CHUNK, C.BWD_BV, "tf32"),
                      dict(BK=D, HAS_DHT=True, HAS_H0=False, WIDE_STATE_TERMS=False))


def bwd_chunk_job() -> Job:
    """The backward's chunk launch (``ops.gdn_bwd``)."""
    from lattnbench.kernels.gdn.triton import configs as C

    types = dict(q=_BF, k=_BF, g=_F32, do=_BF, nu=_F32, dnu=_F32, hc=_F32, dhc=_F32, cu=_F32, T="i32", H="i32",
                 HKV="i32", scale="fp32", dq=_BF, dks=_F32, dw=_F32, dgs=_F32)
    return _fixed_job("gdn/triton:bwd-chunk", BWD_MODULE, "gdn_bwd_chunk_kernel", types,
                      C.chunk_meta(D, E, C.CHUNK, "tf32"))


def bwd_wy_job() -> Job:
    """The backward's WY launch (``ops.gdn_bwd``)."""
    from lattnbench.kernels.gdn.triton import configs as C

    types = dict(k=_BF, v=_BF, g=_F32, beta=_BF, u=_F32, w=_BF, du=_F32, dw=_F32, dks=_F32, dgs=_F32, cu=_F32,
                 T="i32", H="i32", HKV="i32", dk=_F32, dv=_F32, dbeta=_F32, dg=_F32)
    return _fixed_job("gdn/triton:bwd-wy", BWD_MODULE, "gdn_bwd_wy_kernel", types, C.wy_meta(D, E, C.CHUNK, "tf32"))


def default_jobs() -> list[Job]:
    """The parallel launch, every default autotune config of the sweep, the backward's launches (bf16)."""
    from lattnbench.kernels.gdn.triton import configs as C

    return ([prep_job()] + [fwd_job(C.CHUNK, bv, w, s) for bv, w, s in C.FWD_CONFIGS]
            + [bwd_state_job(), bwd_chunk_job(), bwd_wy_job()])
