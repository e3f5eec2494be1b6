"""What the torch and JAX adapters share: which tensors a problem has, which are trained, and
how a call's outputs and gradients are named (o, final_state, dq, dk, dv, dh0, dg, dbeta)."""
from __future__ import annotations

from lattnbench.operators import family
from lattnbench.operators.base import DIFFERENTIABLE, GRAD_NAMES
from lattnbench.operators.inputs import constants
from lattnbench.registry.entry import KernelEntry
from lattnbench.spec import Case

__all__ = ["DIFFERENTIABLE", "GRAD_NAMES", "Problem"]


class Problem:
    """One kernel on one case with its inputs built once; every call reuses them.

    Subclasses build ``self.tensors`` (name -> array on the device) and provide ``fwd``,
    ``fwdbwd``, ``bwd_callable``, ``sync`` and ``peak_mb``.
    """

    #: the graph timer may capture and replay the calls (not so where other processes take part)
    graph_timer = True

    def __init__(self, entry: KernelEntry, case: Case, device: str, seed: int = 0) -> None:
        self.entry, self.case, self.family = entry, case, entry.family
        self.fam = family(entry.family)
        self.device_name, self.seed = device, seed
        self.fn = entry.load()
        self.const = constants(case, entry, seed)

    def inputs(self) -> dict:
        """Every input and cotangent by name, on the device (first axis: batch or sequence)."""
        raise NotImplementedError

    def row(self, b: int) -> "Problem":
        """Batch row ``b`` alone: a batch-1 problem over slices of the very same device tensors."""
        if self.case.varlen:
            raise ValueError("a packed varlen case has no batch rows")
        sliced = {n: x[b:b + 1] for n, x in self.inputs().items()}
        return type(self)(self.entry, self.case.with_(batch=1), self.device_name, self.seed, tensors=sliced)

    def row_fields(self, mode: str, metric: str) -> dict:
        """Fields a measured row of this problem carries besides the timers' (sequence parallel: comm)."""
        return {}

    def stored_dtype(self, name: str) -> str:
        """The dtype input ``name`` is handed to the kernel in (the family's answer)."""
        return self.fam.stored_dtype(name, self.case)

    def call(self, fn, t: dict, gamma, cu_seqlens) -> tuple:
        """One call of the kernel on named inputs, as its family calls it: the outputs as a tuple."""
        return self.fam.call(fn, t, gamma, self.const.scale, self.case, cu_seqlens)

    def differentiable(self, present) -> list[str]:
        return [n for n in self.fam.differentiable if n in present]

    def named(self, outs, grads) -> dict:
        """Outputs and gradients by tensor name (the rows check-grad writes)."""
        got = {name: (outs[i] if i < len(outs) else None) for i, name in enumerate(self.fam.outputs())}
        got.update({GRAD_NAMES[n]: g for n, g in zip(self.diff, grads)})
        return got
