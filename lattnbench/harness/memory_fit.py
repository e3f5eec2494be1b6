"""Memory sense: what a (kernel, case, mode) point needs, and whether the device can hold it.

The estimate is the kernel's family's (``Family.estimate``: inputs, outputs, grads, and the
workspace of a quadratic or a chunked kernel); a point that needs more than the device has free
is recorded as ``oom`` ("needs ~X GB, device has Y GB free") without running it.
"""
from __future__ import annotations

from lattnbench.measure import memory_estimate
from lattnbench.measure.memory_estimate import gb
from lattnbench.operators import family
from lattnbench.operators.base import Estimate


def is_quadratic(entry) -> bool:
    """Quadratic kernels materialise B·H·T² scores: the references and capped kernels."""
    return entry.max_scores is not None or bool(entry.reference)


def estimate(family_name: str, case, mode: str, quadratic: bool = False) -> Estimate:
    """Analytic bytes for a family on ``case`` in ``mode``."""
    return family(family_name).estimate(case, mode, quadratic)


def estimate_bytes(entry, case, mode: str) -> int:
    """Total bytes a registry entry needs for ``case`` in ``mode``."""
    return estimate(entry.family, case, mode, is_quadratic(entry)).total


def too_big(entry, case, mode: str, device: str, free: int | None = None) -> str | None:
    """The ``oom`` reason when the point cannot fit on ``device``, else None."""
    if free is None:
        free = memory_estimate.free_bytes(device)
    if free is None:
        return None
    need = estimate_bytes(entry, case, mode)
    if need <= free:
        return None
    return f"needs ~{gb(need)} GB, device has {gb(free)} GB free"
