"""Ahead-of-time sm_90 compiles of Triton kernels, and the static metrics of each.

No GPU is needed: Triton compiles for a named target (``GPUTarget("cuda", 90, 32)``) and its
bundled ``ptxas`` assembles the PTX. Registers and spills come from ``ptxas -v`` on the PTX
(deterministic for one ptxas); shared memory is what Triton allocates (``metadata.shared``);
instruction counts come from the PTX (``static.ptx``).

A ``Job`` names everything that selects one binary: the kernel (module and function), its
argument types, constexprs, warps and stages. Jobs are plain data, so they travel to pool
workers, and tests build their own (a fixture kernel, an oversized config) the same way.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import inspect
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ARCH = 90


@dataclass(frozen=True)
class Job:
    """One kernel binary to compile: ``module:function`` with its signature and launch config."""

    kernel: str          # the row's kernel name, e.g. lightning/triton:fwd
    config: str          # the row's config label, e.g. BT=64 BV=32 TR=0 w4 s3
    module: str          # importable module holding the @triton.jit function
    function: str
    types: dict = field(default_factory=dict)       # non-constexpr argument -> Triton type
    constexprs: dict = field(default_factory=dict)  # constexpr argument -> value
    num_warps: int = 4
    num_stages: int = 3
    aligned: tuple = ()  # integer arguments known to be multiples of 16 (pointers always are)
    shape: str = ""      # the row's shape label (what the types and constexprs stand for)


def triton_version() -> str:
    """The version of the Triton these compiles use (rows carry it: a count is of one compiler)."""
    import triton

    return triton.__version__


def _parse_ptxas_log(info: str) -> dict:
    """registers and spilled bytes (stores + loads) from a ``ptxas -v`` log."""
    regs = re.search(r"Used (\d+) registers", info)
    stores = re.search(r"(\d+) bytes spill stores", info)
    loads = re.search(r"(\d+) bytes spill loads", info)
    return {"registers": int(regs.group(1)) if regs else 0,
            "spilled_bytes": (int(stores.group(1)) if stores else 0) + (int(loads.group(1)) if loads else 0)}


def _ptxas_rerun(ptx: str) -> str:
    """The ``ptxas -v`` log of the PTX, from the ptxas Triton picks for the target (used only where
    Triton cannot echo the log of its own ptxas run)."""
    from triton.backends.nvidia import compiler as nv

    arch = re.search(r"^\.target\s+(sm_\w+)", ptx, re.M)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        run = subprocess.run([nv.get_ptxas(ARCH).path, "-lineinfo", "-v",
                              f"--gpu-name={arch.group(1) if arch else f'sm_{ARCH}a'}",
                              str(src), "-o", str(Path(tmp) / "k.cubin")],
                             capture_output=True, text=True, check=True)
    return run.stderr + run.stdout


_CACHE: list[str] = []


def _private_cache(knobs) -> None:
    """Point this process's Triton cache at a fresh folder: a cache hit skips ptxas and its log,
    and a kernel cached by another run (other flags, another ptxas) must not answer for this one."""
    if not _CACHE:
        _CACHE.append(tempfile.mkdtemp(prefix="lattnbench-static-"))
        os.environ["TRITON_CACHE_DIR"] = _CACHE[0]
        cache = getattr(knobs, "cache", None)
        if cache is not None and hasattr(cache, "dir"):
            cache.dir = _CACHE[0]


def _compile(src, options: dict):
    """triton.compile for sm_90 and the log of the ptxas -v run it makes (Triton runs ptxas with
    -v and echoes the log when knobs.nvidia.dump_ptxas_log is set), so the registers are those of
    the exact assembly Triton ships."""
    import triton
    from triton.backends.compiler import GPUTarget

    knobs = getattr(triton, "knobs", None)
    nvk = getattr(knobs, "nvidia", None)
    _private_cache(knobs)
    target = GPUTarget("cuda", ARCH, 32)
    if nvk is None or not hasattr(nvk, "dump_ptxas_log"):
        ck = triton.compile(src, target=target, options=options)
        return ck, _ptxas_rerun(ck.asm["ptx"])
    buf = io.StringIO()
    old = nvk.dump_ptxas_log
    nvk.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(buf):
            ck = triton.compile(src, target=target, options=options)
    finally:
        nvk.dump_ptxas_log = old
    log = buf.getvalue()
    return ck, (log if "Used" in log else _ptxas_rerun(ck.asm["ptx"]))


def source(fn, types: dict, constexprs: dict, aligned=()):
    """The ASTSource of a jitted function: ``types`` for its runtime arguments, ``constexprs`` for
    its constexprs (a constexpr not given takes its default); pointers and the ``aligned`` integer
    arguments are marked 16-divisible, as a launch with aligned tensors specialises them."""
    from triton.compiler import ASTSource

    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        p = fn.params[i]
        if p.is_constexpr:
            if name in constexprs:
                value = constexprs[name]
            elif p.default is not inspect.Parameter.empty:
                value = p.default
            else:
                raise KeyError(f"{fn.__name__}: no value for constexpr {name}")
            sig[name] = "constexpr"
            consts[(i,)] = value
        else:
            sig[name] = types[name]
            if types[name].startswith("*") or name in aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return ASTSource(fn, sig, constexprs=consts, attrs=attrs)


def compile_sm90(src, num_warps: int, num_stages: int):
    """(compiled kernel, ptxas -v log) of one source for sm_90. fp fusion is stated, not left to a
    default that changes across Triton versions."""
    os.environ.pop("TRITON_INTERPRET", None)
    # the compile passes enable_fp_fusion itself; this only silences Triton's warning about the default
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    return _compile(src, dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))


def compile_job(job: Job) -> dict:
    """Compile one job for sm_90 and return its metrics (``binary_metrics``)."""
    os.environ.pop("TRITON_INTERPRET", None)
    fn = getattr(importlib.import_module(job.module), job.function)
    while not hasattr(fn, "arg_names"):  # an autotuner or heuristics wrapper: the jitted function beneath
        fn = fn.fn
    return binary_metrics(*compile_sm90(source(fn, job.types, job.constexprs, job.aligned), job.num_warps,
                                        job.num_stages))


def binary_metrics(ck, log: str) -> dict:
    """A static row's metrics (name → number) of a compiled kernel and its ``ptxas -v`` log, Triton's
    or Gluon's alike."""
    from lattnbench.static import ptx as ptxmod

    counts = ptxmod.count(ck.asm["ptx"])
    return {**_parse_ptxas_log(log), "shared_bytes": int(ck.metadata.shared),
            "ptx_instructions": counts.instructions, "loop_instructions": counts.loop_instructions,
            "loop_barriers": counts.loop_barriers, "mma": counts.mma, "wgmma": counts.wgmma}
