"""Memory measurement helpers: how many bytes the device still has free.

``lattnbench.harness.memory_fit`` compares them with a family's analytic estimate and records a
point that cannot fit as ``oom`` without running it. Free bytes: ``torch.cuda.mem_get_info``
(plus what torch's caching allocator holds but does not use) on CUDA, ``MemAvailable`` from
/proc/meminfo on the CPU (no check where that file does not exist). Pure Python: no framework
is imported unless the device is CUDA.
"""
from __future__ import annotations

GB = 1e9


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
