"""The jobs of the bundled Lightning kernels at the seed shape (D = E = 128, bf16) with the default
call's flags (no initial state, final state returned and its gradient given, forward direction, no
varlen): every default autotune config of the Triton forward and of each backward role, and, where
this Triton has Gluon's Hopper API, lightning/gluon's launches at their one config (the forward, the
dq pass, the dk / dv pass and the end-term launch)."""
from __future__ import annotations

from lattnbench.static.gluon_aot import GluonJob
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


def gluon_config_label(cfg) -> str:
    """A Gluon launch config as rows name it, by the kernel's constexprs: ``BV=128 NBUF=2 NS=2 NO=2``
    (value columns a program, ring slots, state buffers, output tiles in flight)."""
    return f"BV={cfg.bv or E} NBUF={cfg.load_stages} NS={cfg.state_stages} NO={cfg.out_stages}"


def gluon_jobs() -> list[GluonJob]:
    """lightning/gluon's launches in a default fwd+bwd: the forward (final state stored), the dq pass
    (the forward kernel on do, v, k), the dk / dv pass from dS_T, and the end-term launch (a Triton
    kernel, compiled as ``gluon_aot`` makes it) with dS_T and no dS_0. None where this Triton has no
    Gluon Hopper API."""
    from lattnbench.kernels.common.gluon_compat import IMPORT_ERROR
    from lattnbench.kernels.lightning.gluon import configs as C
    from lattnbench.kernels.lightning.gluon import end_terms as ET

    if IMPORT_ERROR is not None:
        return []
    fwd, dkdv = gluon_config_label(C.config_for(E)), gluon_config_label(C.DKDV_CONFIG)
    end = GluonJob("lightning/gluon:bwd-end", f"BD={ET._BD} w4 s3", "end_terms_source",
                   dict(d=D, e=E, has_dht=True, want_dh0=False, aligned=("T", "H")), SEED_SHAPE)
    return [GluonJob("lightning/gluon:fwd", fwd, "forward_source", dict(has_h0=False, store_ht=True), SEED_SHAPE),
            GluonJob("lightning/gluon:bwd-dq", fwd, "forward_source", dict(has_h0=False, store_ht=False), SEED_SHAPE),
            GluonJob("lightning/gluon:dkdv", dkdv, "dkdv_source", dict(reverse=True, from_dst=True, store_ht=False),
                     SEED_SHAPE),
            end]


def default_jobs() -> list[Job | GluonJob]:
    """Every default autotune config of the Triton forward and the three backward roles, and the
    Gluon launches (``gluon_jobs``)."""
    from lattnbench.kernels.lightning.triton import configs as C

    jobs = [fwd_job(*r) for r in _rows(C.FWD_CONFIGS, C.FWD_CONFIGS_T)]
    for role in range(3):
        jobs += [bwd_job(role, *r) for r in _rows(C.BWD_CONFIGS, C.BWD_CONFIGS_T)]
    return jobs + gluon_jobs()
