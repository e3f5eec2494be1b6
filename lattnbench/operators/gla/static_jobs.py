"""The jobs of the bundled GLA Triton kernels at the seed shape (D = E = 128, bf16) with the default
call's flags (no initial state, final state returned and its gradient given, forward direction,
no varlen): the two parallel launches at their one config, every default autotune config of the
four sweeps (the torch launches), each sweep at the JAX bridge's fixed config (the same
kernels), and, where this Triton has Gluon's Hopper API, the Gluon prep launch an sm_90 call takes
in its default form."""
from __future__ import annotations

from dataclasses import replace

from lattnbench.static.gluon_aot import GluonJob
from lattnbench.static.triton_aot import Job

D = E = 128
SEED_SHAPE = f"D=E={D} bf16"
MODULE = "lattnbench.kernels.gla.triton.kernels"
_BF, _F32 = "*bf16", "*fp32"
_SCALARS = dict(T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32")


def _flags() -> dict:
    return dict(KD=D, VD=E, REVERSE=False, IS_VARLEN=False, DOT_PREC="tf32")


def config_label(bt: int, bs: int, warps: int, stages: int) -> str:
    return f"BT={bt} BS={bs} w{warps} s{stages}"


def _job(kernel: str, function: str, types: dict, constexprs: dict, bt: int, bs: int, w: int, s: int) -> Job:
    return Job(kernel=kernel, config=config_label(bt, bs, w, s), module=MODULE, function=function, types=types,
               constexprs=dict(_flags(), **constexprs, BT=bt, BS=bs), num_warps=w, num_stages=s,
               aligned=("T", "H", "HKV"), shape=SEED_SHAPE)


def _parallel_job(kernel: str, function: str, types: dict, constexprs: dict, meta: dict) -> Job:
    """A launch of one fixed config (``configs.prep_meta``, ``intra_meta`` or ``exit_meta``): no
    autotuning, one pipeline stage."""
    meta = dict(meta)
    w = meta.pop("num_warps")
    meta.pop("num_stages")
    label = f"BT={meta['BT']} BD={meta['BD']}"
    label += f" BV={meta['BV']}" if "BV" in meta else ""
    return Job(kernel=kernel, config=f"{label} w{w} s1", module=MODULE, function=function, types=types,
               constexprs=dict(constexprs, **meta), num_warps=w, num_stages=1, aligned=("T", "H", "HKV"),
               shape=SEED_SHAPE)


def prep_job() -> Job:
    """The one launch config of the decayed operands and scores (``ops.gla_prep``)."""
    types = dict(q=_BF, k=_BF, g=_F32, cu=_F32, T="i32", H="i32", HKV="i32", qd=_BF, kd=_BF, bl=_F32, A=_BF)
    from lattnbench.kernels.gla.triton import configs as C

    return _parallel_job("gla/triton:prep", "gla_prep_kernel", types, dict(KD=D, REVERSE=False, IS_VARLEN=False),
                         C.prep_meta(D, C.CHUNK, "tf32"))


def intra_job() -> Job:
    """The one launch config of the backward's in-chunk parts (``ops.gla_bwd``)."""
    from lattnbench.kernels.gla.triton import configs as C

    types = dict(q=_BF, k=_BF, v=_BF, g=_F32, do=_BF, hc=_BF, cu=_F32, T="i32", H="i32", HKV="i32", scale="fp32",
                 dq=_BF, dki=_BF, dgq=_F32, wsc=_F32)
    return _parallel_job("gla/triton:bwd-intra", "gla_bwd_intra_kernel", types, _flags(), C.intra_meta(D, E, C.CHUNK))


def exit_job() -> Job:
    """The one launch config of what the exit state adds to dk and dg (``ops.gla_bwd``)."""
    from lattnbench.kernels.gla.triton import configs as C

    types = dict(k=_BF, v=_BF, g=_F32, dhc=_BF, thr=_F32, cu=_F32, dki=_BF, dgq=_F32, T="i32", H="i32", HKV="i32",
                 scale="fp32", dk=_BF, dg=_F32)
    return _parallel_job("gla/triton:bwd-exit", "gla_bwd_exit_kernel", types, _flags(), C.exit_meta(D, E, C.CHUNK))


def fwd_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(qd=_BF, kd=_BF, bl=_F32, A=_BF, v=_BF, h0=_F32, cu=_F32, o=_BF, ht=_F32, **_SCALARS)
    return _job("gla/triton:fwd", "gla_fwd_kernel", types, dict(BK=D, SPLIT=E, HAS_H0=False, STORE_HT=True),
                bt, bs, w, s)


def bwd_h_job(bt: int, bs: int, w: int, s: int) -> Job:
    scalars = {n: t for n, t in _SCALARS.items() if n != "scale"}
    types = dict(kd=_BF, bl=_F32, v=_BF, h0=_F32, cu=_F32, **scalars, hc=_BF)
    return _job("gla/triton:bwd-h", "gla_bwd_h_kernel", types, dict(BV=E, SPLIT=D, HAS_H0=False), bt, bs, w, s)


def bwd_dh_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(qd=_BF, bl=_F32, do=_BF, dht=_F32, cu=_F32, hc=_BF, **_SCALARS, dhc=_BF, thr=_F32, dh0=_F32)
    return _job("gla/triton:bwd-dh", "gla_bwd_dh_kernel", types,
                dict(BV=E, SPLIT=D, HAS_H0=False, HAS_DHT=True), bt, bs, w, s)


def bwd_v_job(bt: int, bs: int, w: int, s: int) -> Job:
    types = dict(qd=_BF, kd=_BF, bl=_F32, A=_BF, do=_BF, dht=_F32, cu=_F32, **_SCALARS, dv=_BF)
    return _job("gla/triton:bwd-dv", "gla_bwd_v_kernel", types, dict(BK=D, SPLIT=E, HAS_DHT=True), bt, bs, w, s)


def gluon_prep_jobs() -> list[GluonJob]:
    """The Gluon prep launch in the form the host's switches give a bf16 call on sm_90
    (``gla.gluon.host``: ROW_LANES, OP16, PREFETCH, KS, WS), named in the config; none where the
    switch is off or this Triton has no Gluon Hopper API."""
    from lattnbench.kernels.common.gluon_compat import IMPORT_ERROR
    from lattnbench.kernels.gla.gluon import host as G

    if IMPORT_ERROR is not None or not G.PREP_ON:
        return []
    ws = G.prep_specialized()
    form = dict(row_lanes=G.ROW_LANES, op16=G.PREP_OP16, prefetch=G.PREP_PREFETCH, ks=G.PREP_KS,
                specialized=ws, product_regs=G.PREP_WS_REGS if ws else None)
    meta = G.prep_meta(D, G.CHUNK)  # the launch's own keywords name the form
    label = (f"BT={meta['BT']} RL={meta['ROW_LANES']} {'ws' if ws else 'fp16' if meta['OP16'] else 'tf32'}"
             + (" prefetch" if meta.get("PREFETCH") else "")
             + (f" KS={meta['KS']}" if "KS" in meta else "") + f" w{meta['num_warps']}")
    return [GluonJob("gla/triton:prep-gluon", label, "gla_prep_source", dict(d=D, dtype="bf16", **form), SEED_SHAPE)]


def bridge_job(job: Job) -> Job:
    """The same sweep as jax-triton launches it (its fixed config)."""
    return replace(job, kernel=job.kernel.replace("gla/triton", "gla/jax-triton"))


def default_jobs() -> list[Job | GluonJob]:
    """The parallel launches (prep, the backward's in-chunk one), every default autotune config of
    the four sweeps, each sweep at the JAX bridge's fixed config (bf16), and the Gluon prep launch
    (``gluon_prep_jobs``)."""
    from lattnbench.kernels.gla.triton import configs as C

    bridge = [make(*C.jax_config(c, D, E, "bf16")) for make, c in
              ((fwd_job, C.JAX_FWD_CONFIG), (bwd_h_job, C.JAX_BWD_H_CONFIG), (bwd_dh_job, C.JAX_BWD_DH_CONFIG),
               (bwd_v_job, C.JAX_BWD_V_CONFIG))]
    return ([prep_job(), intra_job(), exit_job()] + [fwd_job(*c) for c in C.FWD_CONFIGS]
            + [bwd_h_job(*c) for c in C.BWD_H_CONFIGS] + [bwd_dh_job(*c) for c in C.BWD_DH_CONFIGS]
            + [bwd_v_job(*c) for c in C.BWD_V_CONFIGS] + [bridge_job(j) for j in bridge] + gluon_prep_jobs())
