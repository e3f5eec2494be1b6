"""Timing: warm up through compilation and autotuning, then keep every sample.

On CUDA with torch, device events bracket each repetition; otherwise the host clock brackets
a call and a full synchronisation (``block_until_ready`` on the whole output pytree for JAX).
An L2 flush runs before every repetition on the GPU, outside the timed region.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Timing:
    samples_ms: list[float]
    warmup_calls: int
    first_call_s: float           # compile / autotune cost, reported, never in the samples
    method: str
    extra: dict = field(default_factory=dict)

    def quantile(self, q: float) -> float:
        xs = sorted(self.samples_ms)
        if len(xs) == 1:
            return xs[0]
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)


#: host-clock batches (JAX on a GPU): aim for this many ms per sample, at most BATCH_MAX calls
BATCH_TARGET_MS = 10.0
BATCH_MAX = 100


def _host_time(run: Callable[[], object], sync: Callable[[object], None]) -> float:
    t0 = time.perf_counter()
    sync(run())
    return (time.perf_counter() - t0) * 1e3


def measure(run: Callable[[], object], sync: Callable[[object], None], *, cuda_events: bool = False,
            flush: Callable[[], object] | None = None, budget_s: float = 1.0, min_reps: int = 5,
            max_reps: int = 200, max_warmup: int = 20, batch_short: bool = False) -> Timing:
    """Time ``run``: one compiling call, warm-up until two calls agree within 10 %, then samples.

    Repetitions continue until ``budget_s`` of measured time or ``max_reps``, never fewer than
    ``min_reps``. ``flush`` must leave the device idle when it returns (host-clock timing).
    With ``batch_short`` (host-clock timing of asynchronous dispatch, i.e. JAX on a GPU), a call
    shorter than BATCH_TARGET_MS is timed as a back-to-back batch of k calls (k·call ≈ the target)
    with one final sync, divided by k: the host round trip of one sync per call would otherwise
    be a visible share of a sub-ms call. Dispatch stays in the time (it overlaps execution, as
    it does for CUDA events); the L2 flush runs once per batch, which matters only when the
    inputs fit in L2 (n ≤ 1024 at the seed shape).
    """
    t0 = time.perf_counter()
    sync(run())
    first = time.perf_counter() - t0
    prev, warm = _host_time(run, sync), 1
    while warm < max_warmup:
        cur = _host_time(run, sync)
        warm += 1
        if abs(cur - prev) <= 0.1 * max(prev, 1e-6):
            break
        prev = cur
    samples: list[float] = []
    if cuda_events:
        import torch

        spent = 0.0
        while len(samples) < max_reps and (len(samples) < min_reps or spent < budget_s * 1e3):
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
            spent += samples[-1]
        method = "cuda-events"
    else:
        per_sample = max(1, min(BATCH_MAX, int(BATCH_TARGET_MS / max(prev, 1e-3)))) if batch_short else 1
        spent = 0.0
        while len(samples) < max_reps and (len(samples) < min_reps or spent < budget_s * 1e3):
            if flush is not None:
                flush()
            t0 = time.perf_counter()
            result = None
            for _ in range(per_sample):
                result = run()
            sync(result)
            samples.append((time.perf_counter() - t0) * 1e3 / per_sample)
            spent += samples[-1] * per_sample
        method = "host-clock+sync" if per_sample == 1 else f"host-clock, batches of {per_sample}"
    return Timing(samples, warm, first, method)
