"""The jobs of the bundled Lightning Triton kernels: every default autotune config of the forward
and of each backward role, at the seed shape (D = E = 128, bf16) with the default call's flags
(no initial state, final state returned, forward direction, no varlen)."""
from __future__ import annotations

from lattnbench.static.triton_aot import Job

D = E = 128
SEED_SHAPE = f"D=E={D} bf16"
MODULE = "lattnbench.kernels.lightning.triton.kernels"
_BF, _F32 = "*bf16", "*fp32"
_FLAGS = dict(REVERSE=False, HAS_H0=False, IS_VARLEN=False, DOT_PREC="tf32", KD=D, VD=E)
_SCALARS = dict(T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32")
ROLES = ("dq", "dk", "dv")


def config_label(bt: int, bv: int, tr: int, warps: int, stages: int) -> str:
    """The config as rows name it: ``BT=64 BV=32 TR=0 w4 s3``."""
    return f"BT={bt} BV={bv} TR={tr} w{warps} s{stages}"


def _rows(table, table_t) -> list[tuple[int, int, int, int, int]]:
    """(BT, BV, TR, warps, stages) of a row-wise and a transposed config table."""
    return [(bt, bv, 0, w, s) for bt, bv, w, s in table] + [(bt, bv, tr, w, s) for bt, bv, w, s, tr in table_t]


def fwd_job(bt: int, bv: int, tr: int, warps: int, stages: int, kernel: str = "lightning/triton:fwd") -> Job:
    """The forward kernel at one config."""
    types = dict(q=_BF, k=_BF, v=_BF, h0=_F32, g=_F32, cu=_F32, o=_BF, ht=_F32, **_SCALARS)
    return Job(kernel=kernel, config=config_label(bt, bv, tr, warps, stages), module=MODULE,
               function="lightning_fwd_kernel", types=types,
               constexprs=dict(_FLAGS, BK=D, STORE_HT=True, BT=bt, BV=bv, TR=tr),
               num_warps=warps, num_stages=stages, aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def bwd_job(role: int, bt: int, bv: int, tr: int, warps: int, stages: int) -> Job:
    """One backward role (0 dq, 1 dk, 2 dv) at one config."""
    types = dict(q=_BF, k=_BF, v=_BF, do=_BF, h0=_F32, dht=_F32, g=_F32, cu=_F32, dx=_BF, dh0=_F32, **_SCALARS)
    return Job(kernel=f"lightning/triton:bwd-{ROLES[role]}", config=config_label(bt, bv, tr, warps, stages),
               module=MODULE, function="lightning_bwd_kernel", types=types,
               constexprs=dict(_FLAGS, BKD=D, BVD=E, ROLE=role, HAS_DHT=True, BT=bt, BV=bv, TR=tr),
               num_warps=warps, num_stages=stages, aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def default_jobs() -> list[Job]:
    """Every default autotune config of the forward and the three backward roles."""
    from lattnbench.kernels.lightning.triton import configs as C

    jobs = [fwd_job(*r) for r in _rows(C.FWD_CONFIGS, C.FWD_CONFIGS_T)]
    for role in range(3):
        jobs += [bwd_job(role, *r) for r in _rows(C.BWD_CONFIGS, C.BWD_CONFIGS_T)]
    return jobs
