"""One registry entry: a kernel's name, family, framework, devices, needs and what it supports.

Cheap to create: nothing is imported until ``load``. ``available(device)`` and
``supports(case, device)`` return None or a one-line reason.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from lattnbench.spec import Case

FRAMEWORKS = ("torch", "jax")
ALL_FEATURES = frozenset({"initial_state", "reverse", "varlen", "gqa", "dv", "any_dim"})


@dataclass(frozen=True)
class KernelEntry:
    """One runnable implementation; cheap to create, imports nothing until ``load``."""

    name: str
    family: str
    framework: str
    loader: Callable[[], Callable]
    devices: tuple[str, ...] = ("cpu", "cuda")
    requires: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16")
    features: frozenset[str] = ALL_FEATURES
    description: str = ""
    reference: bool = False          # a naive, fp64-capable reference
    interpreted_on_cpu: bool = False  # Triton kernels: CPU runs are interpreter runs
    max_scores: int | None = None    # quadratic kernels: largest B·H·T² they may materialise
    case_check: Callable[[Case], str | None] | None = None
    origin: str = "bundled"           # bundled | peer | plugin
    fixed_scale: float | None = None  # kernels without a scale argument (the reference uses it too)
    final_state: bool = True          # returns S_T (softmax kernels never do)
    timed_by_default: tuple[str, ...] = ("cpu", "cuda")  # devices where a plain speed / memory run includes it
    #: (device, largest n) of the plain run (no --kernels, no --n): a quadratic kernel's longest
    #: points would take most of the main job's time budget
    main_job_max_n: tuple[tuple[str, int], ...] = ()
    sequence_parallel: bool = False   # takes its rank's shard of the sequence (world size >= 1)
    device_check: Callable[[str], str | None] | None = None  # a further need of the device (e.g. sm_90)
    # fwd+bwd as one function, as a compiled training step runs it: given the adapter's eager
    # ``run(*tensors, *cotangents) -> (outputs, gradients)``, a function of the same signature
    step: Callable[[Callable], Callable] | None = None

    def caps(self, device: str, seqlen: int) -> bool:
        """Whether the plain run leaves out this kernel's point at ``seqlen`` (``main_job_max_n``)."""
        cap = dict(self.main_job_max_n).get(device)
        return cap is not None and seqlen > cap

    def available(self, device: str) -> str | None:
        """None when the kernel can run on ``device``, else why not (package missing, no GPU)."""
        for module in (*self.requires, *(("jax",) if self.framework == "jax" else ())):
            if not _importable(module):
                return f"package {module.split('.')[0]!r} is not installed"
        if device not in self.devices:
            return f"runs on {'/'.join(self.devices)} only, not {device}"
        if self.device_check is not None:
            return self.device_check(device)
        return None

    def supports(self, case: Case, device: str) -> str | None:
        """None when the kernel handles ``case``, else the reason it is ``unsupported``."""
        if case.dtype not in self.dtypes:
            return f"dtype {case.dtype} not supported (only {', '.join(self.dtypes)})"
        needs = {
            "initial_state": case.initial_state, "reverse": case.reverse,
            "varlen": case.varlen is not None, "gqa": case.kv_heads != case.heads,
            "dv": case.dim_v != case.dim_qk,
        }
        for feature, wanted in needs.items():
            if wanted and feature not in self.features:
                return f"no {feature.replace('dv', 'dim_v != dim_qk')} support"
        if "any_dim" not in self.features:
            for dim in {case.dim_qk, case.dim_v}:
                if dim & (dim - 1) or dim < 16:
                    return f"head dim {dim} is not a power of two >= 16"
        if self.max_scores is not None:
            scores = case.batch * case.heads * case.seqlen * case.seqlen
            if scores > self.max_scores:
                return (f"quadratic kernel: {case.seqlen}² scores per head exceed its limit "
                        "(the chunked reference takes over for long sequences)")
        if case.world_size > 1 and not self.sequence_parallel:
            return f"not sequence parallel: runs at world size 1, not {case.world_size}"
        if self.sequence_parallel and case.seqlen < case.world_size:
            return f"{case.seqlen} tokens cannot give each of {case.world_size} ranks a token"
        if self.case_check is not None:
            return self.case_check(case)
        return None

    def load(self) -> Callable:
        return _load(self)


@cache
def _load(entry: KernelEntry) -> Callable:
    return entry.loader()


@cache
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
