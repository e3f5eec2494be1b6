"""Memory sense: what a (kernel, case, mode) point needs, and whether the device can hold it.

The estimate is analytic and deliberately simple (an order of magnitude, not a profile):

- inputs: q, k, v and the cotangent do in the case dtype; the state cotangent dS, the initial
  state h0 and GLA gates g in fp32 (the shapes ``lattnbench.measure.inputs.shapes`` builds);
- outputs: o in the case dtype, the final state S_T in fp32 (not for softmax);
- grads (``fwdbwd`` / ``bwd``): one per differentiable input (q, k, v, h0, g);
- work: for quadratic kernels (entries with ``max_scores`` or ``reference=True``) the
  B·H·T² score matrix in its dtype (fp32 at least for softmax, which upcasts half inputs),
  twice for the forward (the product and its masked copy) and ~3 times with the backward
  (saved scores, their gradient, a transient); the token-by-token GLA references keep one
  D×E state per step for the backward instead. Linear (chunked) kernels: the per-chunk states
  and the intra-chunk C×C blocks, both fp32, at a chunk of 64.

``Sweeper._gate`` records a point as ``oom`` ("needs ~X GB, device has Y GB free") without
running it when the estimate exceeds what is free: ``torch.cuda.mem_get_info`` (plus what
torch's caching allocator holds but does not use) on CUDA, ``MemAvailable`` from
/proc/meminfo on the CPU (no check where that file does not exist). Pure Python: no framework
is imported unless the device is CUDA.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ITEMSIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}
FP32 = 4
#: chunk length assumed for the linear kernels' workspace (the bundled kernels use 64)
CHUNK = 64
#: score-matrix copies live at the peak: forward alone, and with the backward
SCORE_COPIES = {"fwd": 2, "fwdbwd": 3, "bwd": 3}
GB = 1e9


@dataclass(frozen=True)
class Estimate:
    """Bytes by kind for one point; ``total`` is what must fit."""

    inputs: int
    outputs: int
    grads: int
    work: int

    @property
    def total(self) -> int:
        return self.inputs + self.outputs + self.grads + self.work


def is_quadratic(entry) -> bool:
    """Quadratic kernels materialise B·H·T² scores: the references and capped kernels."""
    return entry.max_scores is not None or bool(entry.reference)


def _numel(shape) -> int:
    return math.prod(shape)


def estimate(family: str, case, mode: str, quadratic: bool = False) -> Estimate:
    """Analytic bytes for ``family`` ('lightning', 'gla', 'softmax') on ``case`` in ``mode``."""
    if mode not in SCORE_COPIES:
        raise ValueError(f"unknown mode {mode!r}")
    item = ITEMSIZE[case.dtype]
    b, t, h, hk, d, e = case.batch, case.seqlen, case.heads, case.kv_heads, case.dim_qk, case.dim_v
    n = case.num_sequences
    low = {"q": (b, t, h, d), "k": (b, t, hk, d), "v": (b, t, hk, e), "do": (b, t, h, e)}
    fp32: dict[str, tuple[int, ...]] = {}
    if family != "softmax":
        fp32["dS"] = (n, h, d, e)
        if case.initial_state:
            fp32["h0"] = (n, h, d, e)
        if family == "gla":
            fp32["g"] = (b, t, h, d)
    inputs = item * sum(map(_numel, low.values())) + FP32 * sum(map(_numel, fp32.values()))
    outputs = item * _numel((b, t, h, e)) + (FP32 * _numel((n, h, d, e)) if family != "softmax" else 0)
    grads = 0
    if mode != "fwd":
        grads = item * sum(_numel(low[x]) for x in ("q", "k", "v"))
        grads += FP32 * sum(_numel(fp32[x]) for x in ("h0", "g") if x in fp32)
    if quadratic and family == "gla":  # token-by-token recurrence: one state per step for autograd
        per_state = item * b * h * d * e
        work = 2 * per_state if mode == "fwd" else 3 * t * per_state
    elif quadratic:
        score_item = max(item, FP32) if family == "softmax" else item
        work = SCORE_COPIES[mode] * score_item * b * h * t * t
    else:
        chunks = -(-t // CHUNK)
        work = FP32 * b * h * (chunks * d * e + t * min(t, CHUNK))
    return Estimate(inputs, outputs, grads, work)


def estimate_bytes(entry, case, mode: str) -> int:
    """Total bytes a registry entry needs for ``case`` in ``mode``."""
    return estimate(entry.family, case, mode, is_quadratic(entry)).total


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` in bytes, or None where the kernel does not report it."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    parts = line.split()
                    return int(parts[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def free_bytes(device: str) -> int | None:
    """Bytes a new point may still allocate on ``device``; None when unknown (no check)."""
    if device == "cuda":
        try:
            import torch

            free, _total = torch.cuda.mem_get_info()
            cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            return int(free) + max(int(cached), 0)
        except Exception:  # noqa: BLE001 - a failed query must not stop a sweep: no check
            return None
    return meminfo_available()


def gb(nbytes: float) -> str:
    """``1.23`` for 1.23e9 bytes (three significant digits, plain notation)."""
    x = nbytes / GB
    return f"{x:.3g}" if x >= 0.01 else f"{x:.2g}"


def too_big(entry, case, mode: str, device: str, free: int | None = None) -> str | None:
    """The ``oom`` reason when the point cannot fit on ``device``, else None."""
    if free is None:
        free = free_bytes(device)
    if free is None:
        return None
    need = estimate_bytes(entry, case, mode)
    if need <= free:
        return None
    return f"needs ~{gb(need)} GB, device has {gb(free)} GB free"
