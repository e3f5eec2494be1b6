"""Where a call's time goes: the time of each kernel it launches, per call, from torch.profiler.

A kernel set such as GLA's is several launches a call; the timers give their sum. The breakdown
names each launch with its share, so a change to one kernel reads as that kernel's time, inside
the tool and beside the point's own timers. On CUDA it is device time per kernel (CUPTI); on a CPU
the self time of each operator, which for interpreted Triton is the host's emulation, not a kernel.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator

#: kernels listed by name (the rest summed as one "other" entry)
TOP = 12
#: longest kernel name kept (C++ template names run to hundreds of characters)
NAME_CHARS = 120


def _time_us(event, cuda: bool) -> float:
    """An averaged event's total time in µs: device time on CUDA (the attribute's name changed
    across torch versions), self CPU time on a CPU."""
    if not cuda:
        return float(event.self_cpu_time_total)
    for attr in ("self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total"):
        value = getattr(event, attr, None)
        if value is not None:
            return float(value)
    return 0.0


def _is_kernel(event, cuda: bool) -> bool:
    """A device-side event (a kernel, memset or memcpy) on CUDA; any operator with time on a CPU."""
    if not cuda:
        return True
    kind = getattr(event, "device_type", None)
    return getattr(kind, "name", str(kind)).upper() == "CUDA"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null: the profiler's C++ side logs its start and stop there
    (Kineto's ``profiler_start`` lines), past Python's ``sys.stderr``."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def kernel_breakdown(call: Callable[[], object], sync: Callable[[object], None], calls: int,
                     cuda: bool) -> dict:
    """Run ``call`` ``calls`` times under torch.profiler (after the caller's warm-up) and return
    ``{"method", "calls", "total_ms", "kernels": [{"name", "ms", "launches"}, ...]}``: per call,
    the most expensive ``TOP`` kernels, then ``other``; ``launches`` is launches per call."""
    from torch.profiler import ProfilerActivity, profile

    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    prof = profile(activities=[activity])
    with _quiet_stderr():
        prof.start()
    try:
        result = None
        for _ in range(calls):
            result = call()
        sync(result)
    finally:
        with _quiet_stderr():
            prof.stop()
    items = []
    for ev in prof.key_averages():
        if not _is_kernel(ev, cuda):
            continue
        us = _time_us(ev, cuda)
        if us > 0:
            items.append({"name": str(ev.key)[:NAME_CHARS], "ms": us / 1e3 / calls, "launches": ev.count / calls})
    items.sort(key=lambda k: -k["ms"])
    kept, rest = items[:TOP], items[TOP:]
    if rest:
        kept.append({"name": "other", "ms": sum(k["ms"] for k in rest),
                     "launches": sum(k["launches"] for k in rest)})
    what = ("device time of each CUDA kernel, calls back to back (L2 not flushed)" if cuda
            else "self CPU time of each operator")
    return {"method": f"torch.profiler: {what}, per call, over {calls} calls",
            "calls": calls, "total_ms": sum(k["ms"] for k in kept), "kernels": kept}
