"""Forget autotuning between points, so each point is tuned at its own shape.

Triton autotuners cache the chosen config per key, and many keys leave out the grid and the
sequence length (fla's chunk kernels key on the head dims alone): a process that measured one
shape keeps that shape's configs for every later one. Between two points of one worker the
runner clears every autotuner's cache and every launch cache that holds a tuned config (a
callable ``forget_tuning`` that a kernel module exposes), so the next call tunes as a fresh
process would; the on-disk compile cache stays, so re-tuning costs benchmarking, not compiling.
"""
from __future__ import annotations

import gc
import sys


def reset_autotuning() -> int:
    """Clear the config caches of every live Triton autotuner and kernel launch cache; how many."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return 0
    cleared = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), Autotuner):
            obj.cache.clear()
            cleared += 1
    for name, module in list(sys.modules.items()):
        forget = getattr(module, "forget_tuning", None) if name.startswith("lattnbench.kernels") else None
        if callable(forget):
            forget()
            cleared += 1
    return cleared
