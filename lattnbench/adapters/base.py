"""What the torch and JAX adapters share: which tensors a problem has, which are trained, and
how a call's outputs and gradients are named (o, final_state, dq, dk, dv, dh0, dg)."""
from __future__ import annotations

from lattnbench.measure.inputs import constants
from lattnbench.registry.entry import KernelEntry
from lattnbench.spec import Case

#: tensors that stay fp32 whatever the case dtype (the state and its cotangent)
FP32_TENSORS = ("h0", "dS")
#: the differentiable inputs, in call order, and their gradients' names
DIFFERENTIABLE = ("q", "k", "v", "h0", "g")
GRAD_NAMES = {"q": "dq", "k": "dk", "v": "dv", "h0": "dh0", "g": "dg"}


def stored_dtype(name: str, case: Case) -> str:
    """The dtype an input is handed to the kernel in: fp32 for the state tensors, the case's
    ``g_dtype`` for gates, the case's dtype for the rest."""
    if name in FP32_TENSORS:
        return "fp32"
    return case.g_dtype if name == "g" else case.dtype


class Problem:
    """One kernel on one case with its inputs built once; every call reuses them.

    Subclasses build ``self.tensors`` (name -> array on the device) and provide ``fwd``,
    ``fwdbwd``, ``bwd_callable``, ``sync`` and ``peak_mb``.
    """

    #: the graph timer may capture and replay the calls (not so where other processes take part)
    graph_timer = True

    def __init__(self, entry: KernelEntry, case: Case, device: str, seed: int = 0) -> None:
        self.entry, self.case, self.family = entry, case, entry.family
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

    def differentiable(self, present) -> list[str]:
        return [n for n in DIFFERENTIABLE if n in present]

    def named(self, outs, grads) -> dict:
        """Outputs and gradients by tensor name (the rows check-grad writes)."""
        got = {"o": outs[0]}
        if self.family != "softmax":
            got["final_state"] = outs[1] if len(outs) > 1 else None
        got.update({GRAD_NAMES[n]: g for n, g in zip(self.diff, grads)})
        return got
