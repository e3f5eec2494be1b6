"""Ahead-of-time sm_90 compile of the Gluon Lightning kernels (the forward, the dk / dv pass), and
what their binaries show.

Gluon kernels compile through ``GluonASTSource`` (``triton.experimental.gluon._runtime``) on the
same ``triton.compile`` path as ``@triton.jit`` kernels (``triton_aot._compile``). Their tensor
descriptor arguments are typed ``tensordesc<bf16[1,64,128],NVMMASharedLayout(...)>``: the block
and the shared layout are part of the signature. The launch's ``maxnreg`` is a compile option,
as the warp-specialized register split is computed from it.

The backward's end-term launch (``end_terms.end_terms_kernel``, plain Triton) compiles the same
way (``compile_end_terms``). Both report their scalar pointer offsets (``scalar_offsets``): a
program's base offset into a [B, T, H, ·] tensor passes 2^31 elements at B5 T131072 H32 D128, so
it must be int64 there; an int32 one wraps negative and the access faults.

Compile in a process where no Triton kernel has run under TRITON_INTERPRET=1: the interpreter
patches Triton's language objects, and a compile after it fails (the CPU test uses a subprocess).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from lattnbench.static import ptx as ptxmod
from lattnbench.static.triton_aot import _compile, _parse_ptxas_log, binary_metrics

MODULE = "lattnbench.kernels.lightning.gluon.kernels"

# a scalar pointer plus an offset in TTIR / TTGIR: ``%res = tt.addptr %base, %off : !tt.ptr<T>, iN``
# (a tile's offsets are tensors, typed ``tensor<...>``, and do not match)
_SCALAR_ADDPTR = re.compile(r"%([\w.]+) = tt\.addptr %([\w.]+), %[\w.]+ : !tt\.ptr<[^>]+>, (i\d+)")


def scalar_offsets(ir: str) -> list[tuple[str, str, str]]:
    """(result, base pointer, integer type of the offset) of every scalar ``tt.addptr`` in ``ir``.
    Arguments keep their names in a kernel's body and become ``%argN`` in a warp-specialized
    partition; results carry the Python variable's name (``%gam`` for ``g + i_h``)."""
    return _SCALAR_ADDPTR.findall(ir)


def _desc_type(block: list[int], dtype: str):
    from lattnbench.kernels.common.gluon_compat import gl

    elem = gl.bfloat16 if dtype == "bf16" else gl.float16
    layout = gl.NVMMASharedLayout.get_default_for(block, elem)
    return f"tensordesc<{dtype}[{','.join(map(str, block))}],{layout!r}>"


def forward_source(d: int = 128, e: int = 128, dtype: str = "bf16", reverse: bool = False, has_h0: bool = True,
                   store_ht: bool = True, h0_mode: int | None = None, pdl: bool = False):
    """(GluonASTSource, launch options) of the forward at the config ``configs.config_for(e)``;
    ``h0_mode`` (``configs.H0_*``) as the backward's passes take it, else plain h0 or none by
    ``has_h0``; ``pdl`` as the dq pass's programmatic dependent launch (``configs.PDL``)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from lattnbench.kernels.lightning.gluon import configs as C
    from lattnbench.kernels.lightning.gluon import kernels as K
    from lattnbench.kernels.common.gluon_compat import gl

    cfg = C.config_for(e)
    elem = gl.bfloat16 if dtype == "bf16" else gl.float16
    types = dict(q_desc=_desc_type([1, C.BT, d], dtype), k_desc=_desc_type([1, C.BT, d], dtype),
                 v_desc=_desc_type([1, C.BT, cfg.bv], dtype), o_desc=_desc_type([1, C.BT, cfg.bv], dtype),
                 h0="*fp32", ht="*fp32", g="*fp32", T="i32", H="i32", HKV="i32", scale="fp32")
    if h0_mode is None:
        h0_mode = C.H0_PLAIN if has_h0 else C.H0_NONE
    constexprs = dict(E=e, S_LAYOUT=gl.NVMMASharedLayout.get_default_for([d, cfg.bv], elem), REVERSE=reverse,
                      H0_MODE=h0_mode, STORE_HT=store_ht, NBUF=cfg.load_stages, NS=cfg.state_stages,
                      NO=cfg.out_stages, LOAD_WARPS=cfg.worker_warps[0], STATE_WARPS=cfg.worker_warps[1],
                      LOAD_REGS=cfg.worker_regs[0], STATE_REGS=cfg.worker_regs[1], PDL_WAIT=pdl)
    return _source(K.lightning_fwd_kernel, types, constexprs), dict(_options(cfg), launch_pdl=pdl)


def dkdv_source(d: int = 128, e: int = 128, dtype: str = "bf16", reverse: bool = True, from_dst: bool = True,
                store_ht: bool = True, pdl_trigger: bool = False):
    """(GluonASTSource, launch options) of the dk / dv pass (``dkdv``) at ``configs.DKDV_CONFIG``;
    ``reverse`` is the pass's direction, ``from_dst`` whether dS_T is given, ``pdl_trigger``
    whether a programmatic dependent launch may follow it (``configs.PDL``)."""
    from lattnbench.kernels.lightning.gluon import configs as C
    from lattnbench.kernels.lightning.gluon import dkdv as K
    from lattnbench.kernels.common.gluon_compat import gl

    cfg = C.DKDV_CONFIG
    elem = gl.bfloat16 if dtype == "bf16" else gl.float16
    types = dict(q_desc=_desc_type([1, C.BT, d], dtype), k_desc=_desc_type([1, C.BT, d], dtype),
                 v_desc=_desc_type([1, C.BT, e], dtype), do_desc=_desc_type([1, C.BT, e], dtype),
                 dk_desc=_desc_type([1, C.BT, d], dtype), dv_desc=_desc_type([1, C.BT, e], dtype),
                 dst="*fp32", ht="*fp32", g="*fp32", T="i32", H="i32", scale="fp32")
    constexprs = dict(REVERSE=reverse, FROM_DST=from_dst, STORE_HT=store_ht, NBUF=cfg.load_stages,
                      NS=cfg.state_stages, NO=cfg.out_stages, LOAD_WARPS=cfg.worker_warps[0],
                      STATE_WARPS=cfg.worker_warps[1], LOAD_REGS=cfg.worker_regs[0], STATE_REGS=cfg.worker_regs[1],
                      S_LAYOUT=gl.NVMMASharedLayout.get_default_for([d, e], elem), PDL_TRIGGER=pdl_trigger)
    return _source(K.lightning_dkdv_kernel, types, constexprs), _options(cfg)


def gla_prep_source(d: int = 128, dtype: str = "bf16", reverse: bool = False, varlen: bool = False,
                    row_lanes: int | None = None, op16: bool = False,
                    prefetch: bool = False, ks: int = 0, specialized: bool = False, product_regs: int | None = None):
    """(GluonASTSource, launch options) of ``gla/triton``'s Gluon prep launch (``kernels.gla.gluon.prep``,
    with a key slice ``ks`` < d ``prep_sliced``, warp-specialized ``prep_specialized``) as
    ``gla.gluon.host.launch_prep`` launches it: qd and kd in bf16 for bf16 inputs, fp32 for fp16;
    ``op16`` / ``prefetch`` / ``ks`` / ``specialized`` / ``product_regs`` as ``GLA_GLUON_PREP_OP16`` /
    ``_PREFETCH`` / ``_KS`` / ``_WS`` / ``_WS_REGS`` set them."""
    from lattnbench.kernels.gla.gluon import host as C
    from lattnbench.kernels.gla.gluon import prep as K
    from lattnbench.kernels.gla.gluon import prep_sliced as KS
    from lattnbench.kernels.gla.gluon import prep_specialized as KW

    dec = dtype if dtype == "bf16" else "fp32"
    types = dict(q=f"*{dtype}", k=f"*{dtype}", g="*fp32", cu="*i32", T="i32", H="i32", HKV="i32",
                 qd=f"*{dec}", kd=f"*{dec}", bl="*fp32", A=f"*{dtype}")
    lanes = row_lanes or C.ROW_LANES
    if specialized:
        constexprs = dict(KD=d, REVERSE=reverse, IS_VARLEN=varlen, BT=C.CHUNK, ROW_LANES=lanes,
                          PRODUCT_REGS=product_regs or C.PREP_WS_REGS, PREFETCH=prefetch)
        options = dict(num_warps=C.warps(d, lanes), num_stages=1, enable_fp_fusion=True)
        return _source(KW.gla_prep_specialized_gluon_kernel, types, constexprs), options
    constexprs = dict(KD=d, REVERSE=reverse, IS_VARLEN=varlen, BT=C.CHUNK, ROW_LANES=lanes, OP16=op16)
    sliced = 0 < ks < d
    if sliced:
        constexprs["KS"] = ks
    else:
        constexprs["PREFETCH"] = prefetch
    options = dict(num_warps=C.warps(ks if sliced else d, lanes), num_stages=1, enable_fp_fusion=True)
    kernel = KS.gla_prep_sliced_gluon_kernel if sliced else K.gla_prep_gluon_kernel
    return _source(kernel, types, constexprs), options


def gla_intra_source(d: int = 128, e: int = 128, dtype: str = "bf16", reverse: bool = False, varlen: bool = False,
                     gqa: bool = False, g_dtype: str = "fp32", exit_terms: bool | None = None):
    """(GluonASTSource, launch options) of ``gla/triton``'s Gluon in-chunk backward launch
    (``kernels.gla.gluon.intra``) in the host's form, as ``gla.gluon.host.launch_intra`` launches it:
    dk's in-chunk part in the input dtype, or fp32 per query head under GQA (``gqa``). With the exit
    terms (``exit_terms``; by default ``host.intra_exit``, GLA_GLUON_INTRA_EXIT=1) the fused entry,
    which takes dhc and thr too and writes dk final and dg in g's dtype (``g_dtype``)."""
    from lattnbench.kernels.gla.gluon import host as C
    from lattnbench.kernels.gla.gluon import intra as K

    types = dict(q=f"*{dtype}", k=f"*{dtype}", v=f"*{dtype}", g=f"*{g_dtype}", do=f"*{dtype}", hc=f"*{dtype}",
                 cu="*i32", T="i32", H="i32", HKV="i32", scale="fp32", dq=f"*{dtype}", wsc="*fp32")
    dk = "*fp32" if gqa else f"*{dtype}"
    fused = C.intra_exit() if exit_terms is None else exit_terms
    if fused:
        fn = K.gla_bwd_intra_exit_gluon_kernel
        types.update(dhc=f"*{dtype}", thr="*fp32", dk=dk, dg=f"*{g_dtype}")
    else:
        fn = K.gla_bwd_intra_gluon_kernel
        types.update(dki=dk, dgq="*fp32")
    meta = C.intra_meta(d, e, reverse, varlen)
    options = dict(num_warps=meta.pop("num_warps"), num_stages=1, enable_fp_fusion=True)
    return _source(fn, types, meta), options


def _source(fn, types: dict, constexprs: dict):
    """The GluonASTSource of ``fn``: ``types`` for its runtime arguments (pointers 16-divisible),
    ``constexprs`` for the rest."""
    from triton.experimental.gluon._runtime import GluonASTSource

    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if fn.params[i].is_constexpr:
            sig[name] = "constexpr"
            consts[(i,)] = constexprs[name] if name in constexprs else fn.params[i].default
        else:
            sig[name] = types[name]
            if types[name].startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return GluonASTSource(fn, sig, constexprs=consts, attrs=attrs)


def _options(cfg) -> dict:
    return dict(num_warps=cfg.num_warps, num_stages=1, maxnreg=cfg.maxnreg, enable_fp_fusion=True)


def compile_forward(**kw) -> dict:
    """Compile the forward for sm_90 and return its metrics (``_metrics``)."""
    return _metrics(*forward_source(**kw))


def compile_dkdv(**kw) -> dict:
    """Compile the dk / dv pass for sm_90 and return its metrics (``_metrics``)."""
    return _metrics(*dkdv_source(**kw))


def compile_gla_prep(**kw) -> dict:
    """Compile ``gla/triton``'s Gluon prep launch for sm_90 and return its metrics (``_metrics``)."""
    return _metrics(*gla_prep_source(**kw))


def compile_gla_intra(**kw) -> dict:
    """Compile ``gla/triton``'s Gluon in-chunk backward launch for sm_90 and return its metrics
    (``_metrics``)."""
    return _metrics(*gla_intra_source(**kw))


@dataclass(frozen=True)
class GluonJob:
    """One Gluon kernel binary for the static gate: ``source`` names the function of this module
    that builds its (source, launch options), called with ``kwargs``. Plain data, as
    ``triton_aot.Job``, so it travels to the pool's workers; its rows are a Triton job's."""

    kernel: str          # the row's kernel name, e.g. lightning/gluon:fwd
    config: str          # the row's config label
    source: str          # forward_source, dkdv_source, gla_prep_source or gla_intra_source
    kwargs: dict = field(default_factory=dict)
    shape: str = ""


def compile_job(job: GluonJob) -> dict:
    """Compile one Gluon job for sm_90; the metrics a Triton job's rows carry (``binary_metrics``)."""
    os.environ.pop("TRITON_INTERPRET", None)
    return binary_metrics(*_compile(*globals()[job.source](**job.kwargs)))


def _metrics(src, options) -> dict:
    """Compile for sm_90; the metrics: registers and spills (ptxas -v), shared bytes, shared-memory
    store instructions, wgmma count, per-thread asynchronous copies (cp.async),
    the distinct ``wgmma.wait_group`` depths (a depth above 0 is a deferred wait), the
    per-partition register limits (``setmaxnreg``), TMA copies, mbarrier waits, grid dependency
    control (``griddepcontrol``) and whether the launch is a programmatic dependent one, the scalar
    pointer offsets and the PTX itself."""
    os.environ.pop("TRITON_INTERPRET", None)
    ck, log = _compile(src, options)
    text = ck.asm["ptx"]
    counts = ptxmod.count(text)
    return {**_parse_ptxas_log(log), "shared_bytes": int(ck.metadata.shared), "wgmma": counts.wgmma,
            "wait_depths": sorted({int(x) for x in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", text)}),
            "setmaxnreg": sorted({int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", text)}),
            "tma_loads": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", text)),
            "tma_stores": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", text)),
            "async_copies": len(re.findall(r"\bcp\.async\.c[ag]\.shared", text)),
            "mbarrier_waits": len(re.findall(r"mbarrier\.try_wait", text)),
            "barriers": len(re.findall(r"\bbar(?:rier)?\.sync", text)),
            "shared_stores": len(re.findall(r"\bst\.shared\.", text)),
            "grid_dependency_waits": text.count("griddepcontrol.wait"),
            "grid_dependents": text.count("griddepcontrol.launch_dependents"),
            "launch_pdl": bool(getattr(ck.metadata, "launch_pdl", False)),
            "scalar_offsets": scalar_offsets(ck.asm["ttgir"]), "ptx": text}


def end_terms_source(d: int = 128, e: int = 128, dtype: str = "bf16", has_dht: bool = True, want_dh0: bool = True,
                     aligned: tuple = ()):
    """(ASTSource, launch options) of the backward's end-term launch (``end_terms.end_terms_kernel``,
    plain Triton) as ``end_terms.end_terms`` launches it: fp32 states, k, v, dk, dv in ``dtype``;
    ``aligned``: integer arguments known to be multiples of 16."""
    from lattnbench.kernels.lightning.gluon import configs as C
    from lattnbench.kernels.lightning.gluon import end_terms as ET
    from lattnbench.kernels.common.arith import pow2
    from lattnbench.static.triton_aot import source

    types = dict(dht="*fp32", k=f"*{dtype}", v=f"*{dtype}", dk=f"*{dtype}", dv=f"*{dtype}", s_end="*fp32",
                 dh0="*fp32", g="*fp32", T="i32", H="i32", scale="fp32", last="i32")
    constexprs = dict(D=d, E=e, BD=ET._BD, BE=pow2(e), FLOOR=C.LOG_DECAY_FLOOR, HAS_DHT=has_dht, WANT_DH0=want_dh0)
    return (source(ET.end_terms_kernel, types, constexprs, aligned),
            dict(num_warps=4, num_stages=3, enable_fp_fusion=True))


def compile_end_terms(**kw) -> dict:
    """Compile the end-term launch for sm_90 (``end_terms_source``) and return registers, spills and
    its ``scalar_offsets`` (from the TTIR, where the arguments keep their names)."""
    from lattnbench.static.triton_aot import compile_sm90

    src, options = end_terms_source(**kw)
    ck, log = compile_sm90(src, options["num_warps"], options["num_stages"])
    return {**_parse_ptxas_log(log), "scalar_offsets": scalar_offsets(ck.asm["ttir"])}
