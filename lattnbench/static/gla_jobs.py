"""The jobs of the bundled GLA Triton kernels: every default autotune config of the forward and of
the three backward launches, at the seed shape (D = E = 128, bf16) with the default call's flags
(no initial state, final state returned and its gradient given, forward direction, no varlen):
the prep launch of the decayed operands, the torch launches (PATH "fast": the exact reruns do no work in rows without a deep chunk), and
the JAX bridge's single launches (PATH "both", its fixed configs)."""
from __future__ import annotations

from dataclasses import replace

from lattnbench.static.triton_aot import Job

D = E = 128
SEED_SHAPE = f"D=E={D} bf16"
MODULE = "lattnbench.kernels.triton.gla.kernels"
_BF, _F32, _I32 = "*bf16", "*fp32", "*i32"
_SCALARS = dict(T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32")


def _flags() -> dict:
    from lattnbench.kernels.triton.gla.configs import SAFE_DEPTH

    return dict(KD=D, VD=E, REVERSE=False, IS_VARLEN=False, DOT_PREC="tf32", GATE_BF16=True, SAFE_DEPTH=SAFE_DEPTH,
                PATH="fast")


def config_label(bt: int, bs: int, warps: int, stages: int) -> str:
    return f"BT={bt} BS={bs} w{warps} s{stages}"


def _job(kernel: str, function: str, types: dict, constexprs: dict, bt: int, bs: int, w: int, s: int) -> Job:
    return Job(kernel=kernel, config=config_label(bt, bs, w, s), module=MODULE, function=function, types=types,
               constexprs=dict(_flags(), **constexprs, BT=bt, BS=bs), num_warps=w, num_stages=s,
               aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def fwd_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(q=_BF, k=_BF, v=_BF, g=_F32, qd=_BF, kd=_BF, bl=_F32, h0=_F32, cu=_F32, deep=_F32, o=_BF, ht=_F32,
                 deep_out=_I32, **_SCALARS)
    return _job("gla/triton:fwd", "gla_fwd_kernel", types,
                dict(BK=D, SPLIT=E, HAS_H0=False, STORE_HT=True, PRE=True), bt, bs, w, s)


def prep_job() -> Job:
    """The one launch config of the decayed operands (``ops.gla_prep``)."""
    from lattnbench.kernels.triton.gla import configs as C

    types = dict(q=_BF, k=_BF, g=_F32, cu=_F32, T="i32", H="i32", HKV="i32", qd=_BF, kd=_BF, bl=_F32)
    flags = dict(KD=D, REVERSE=False, IS_VARLEN=False, BT=C.PRE_CHUNK, BD=C.PREP_BD)
    return Job(kernel="gla/triton:prep", config=f"BT={C.PRE_CHUNK} BD={C.PREP_BD} w{C.PREP_WARPS} s1", module=MODULE,
               function="gla_prep_kernel", types=types, constexprs=flags, num_warps=C.PREP_WARPS, num_stages=1,
               aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def bwd_q_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(k=_BF, v=_BF, g=_F32, do=_BF, h0=_F32, dht=_F32, cu=_F32, deep=_I32, dq=_BF, hc=_BF, gend=_F32,
                 **_SCALARS)
    return _job("gla/triton:bwd-dq", "gla_bwd_q_kernel", types,
                dict(BV=E, SPLIT=D, HAS_H0=False, HAS_DHT=True), bt, bs, w, s)


def bwd_k_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(q=_BF, k=_BF, v=_BF, g=_F32, do=_BF, dht=_F32, cu=_F32, dq=_BF, hc=_BF, gend=_F32, deep=_I32,
                 dk=_BF, dg=_F32, dh0=_F32, **_SCALARS)
    return _job("gla/triton:bwd-dkdg", "gla_bwd_k_kernel", types,
                dict(BV=E, SPLIT=D, HAS_H0=False, HAS_DHT=True), bt, bs, w, s)


def bwd_v_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(q=_BF, k=_BF, g=_F32, qd=_BF, kd=_BF, bl=_F32, do=_BF, dht=_F32, cu=_F32, deep=_I32, dv=_BF,
                 **_SCALARS)
    return _job("gla/triton:bwd-dv", "gla_bwd_v_kernel", types,
                dict(BK=D, SPLIT=E, HAS_DHT=True, PRE=True), bt, bs, w, s)


def bridge_job(job: Job) -> Job:
    """The same pass as jax-triton launches it: one launch holding both sweeps (PATH "both")."""
    return replace(job, kernel=job.kernel.replace("gla/triton", "gla/jax-triton"),
                   constexprs=dict(job.constexprs, PATH="both"))


def default_jobs() -> list[Job]:
    """Every default autotune config of the forward and the three backward launches, and each
    pass at the JAX bridge's fixed config (bf16)."""
    from lattnbench.kernels.triton.gla import configs as C

    bridge = [make(*C.jax_config(c, D, E, "bf16")) for make, c in
              ((fwd_job, C.JAX_FWD_CONFIG), (bwd_q_job, C.JAX_BWD_Q_CONFIG), (bwd_k_job, C.JAX_BWD_K_CONFIG),
               (bwd_v_job, C.JAX_BWD_V_CONFIG))]
    return ([prep_job()] + [fwd_job(*c) for c in C.FWD_CONFIGS] + [bwd_q_job(*c) for c in C.BWD_Q_CONFIGS]
            + [bwd_k_job(*c) for c in C.BWD_K_CONFIGS] + [bwd_v_job(*c) for c in C.BWD_V_CONFIGS]
            + [bridge_job(j) for j in bridge])
