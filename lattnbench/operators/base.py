"""What every operator family answers: its tensors, how a kernel is called, its reference,
tolerances, cost model and memory estimate.

Light on purpose (numpy and the spec only): views and the CLI read a family's flags and labels
without importing a framework; the parts that need torch import it inside the method.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from lattnbench.measure.tolerance import tolerance as dtype_tolerance
from lattnbench.spec import Case

ITEMSIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}
FP32 = 4
#: chunk length the linear families' cost and workspace models assume (the bundled kernels use 64)
CHUNK = 64
#: score-matrix copies live at the peak of a quadratic kernel: forward alone, and with the backward
SCORE_COPIES = {"fwd": 2, "fwdbwd": 3, "bwd": 3}
#: the inputs ``Case.input_scale`` multiplies (magnitude stress)
SCALED = ("q", "k", "v")
#: the differentiable inputs of the default family, in call order (a family may list more)
DIFFERENTIABLE = ("q", "k", "v", "h0", "g")
#: every differentiable input's gradient name, whichever family has it
GRAD_NAMES = {"q": "dq", "k": "dk", "v": "dv", "h0": "dh0", "g": "dg", "beta": "dbeta"}


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


def numel(shape) -> int:
    return math.prod(shape)


class Family:
    """One operator family. Subclasses set the class attributes and override what differs.

    The default is a linear-attention family with an fp32 state ``[N, H, D, E]``: inputs q, k, v,
    optional h0, cotangents do and dS, outputs (o, S_T).
    """

    name: str = ""
    #: position in tables (lower first)
    order: int = 100
    #: inputs include data-dependent gates (rows record ``gate_norm`` and ``g_dtype``)
    gated: bool = False
    #: the per-head decay γ of the ``decay`` axis applies
    decayed: bool = False
    #: kernels return a final state and take an initial one
    has_state: bool = True
    #: speed-ups default to a kernel of this family when a file names no reference
    reference_family: bool = False
    #: tensors drawn as gates: ``logsigmoid(x) / gate_norm`` in ``case.g_dtype``
    gates: tuple[str, ...] = ()
    #: tensors handed over in fp32 whatever the case dtype (the state and its cotangent)
    fp32_tensors: tuple[str, ...] = ("h0", "dS")
    #: module whose ``default_jobs()`` lists the family's compile-only (static) jobs; None: none
    static_jobs: str | None = None
    #: the inputs gradients are taken for, in call order (those a case lacks, e.g. h0, are skipped)
    differentiable: tuple[str, ...] = DIFFERENTIABLE
    #: what a plugin of this family handles when it does not say
    default_features: frozenset = frozenset({"initial_state", "reverse", "varlen", "gqa", "dv", "any_dim"})

    # -- inputs --------------------------------------------------------------------------------
    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        """Shapes of every input and cotangent of a case (contract layout [B, T, H, D])."""
        b, t, h, hk, d, e = case.batch, case.seqlen, case.heads, case.kv_heads, case.dim_qk, case.dim_v
        s = {"q": (b, t, h, d), "k": (b, t, hk, d), "v": (b, t, hk, e), "do": (b, t, h, e)}
        if self.has_state:
            s["dS"] = (case.num_sequences, h, d, e)
            if case.initial_state:
                s["h0"] = (case.num_sequences, h, d, e)
        s.update({g: (b, t, h, d) for g in self.gates})
        return s

    def stored_dtype(self, name: str, case: Case) -> str:
        """The dtype an input is handed to the kernel in."""
        if name in self.fp32_tensors:
            return "fp32"
        return case.g_dtype if name in self.gates else case.dtype

    def draw(self, name: str) -> str:
        """How a standard-normal draw becomes the input: ``gate`` (``logsigmoid(x) / gate_norm``),
        ``scaled`` (times ``input_scale``), ``unit`` (L2-normalised over the last axis),
        ``sigmoid`` or ``plain``."""
        if name in self.gates:
            return "gate"
        return "scaled" if name in SCALED else "plain"

    def applies(self, case: Case) -> bool:
        """Whether check-grad has anything to compare on this case (a stateless family has no h0)."""
        return self.has_state or not case.initial_state

    # -- calls ---------------------------------------------------------------------------------
    def call(self, fn: Callable, t: dict, gamma, scale: float, case: Case, cu_seqlens) -> tuple:
        """One call of a kernel of this family on named inputs: its outputs as a tuple."""
        raise NotImplementedError

    def outputs(self) -> tuple[str, ...]:
        return ("o", "final_state") if self.has_state else ("o",)

    def expected_tensors(self, case: Case) -> list[str]:
        """The tensors check-grad reports for a case, in table order."""
        names = [*self.outputs(), "dq", "dk", "dv"]
        if self.has_state and case.initial_state:
            names.append("dh0")
        names += [GRAD_NAMES[g] for g in self.gates]
        return names

    def reference(self, t: dict, case: Case, gamma, scale: float, cu_seqlens: list[int] | None) -> tuple:
        """fp64 outputs of the contract on fp64 torch inputs (autograd records through it)."""
        raise NotImplementedError

    # -- tolerances ----------------------------------------------------------------------------
    def tolerance(self, case: Case, tensor: str, table: str = "lattnbench") -> float:
        """A tensor's tolerance: its case dtype's; a gate's gradient (returned in the gate's dtype)
        the looser of that and the g dtype's, since rounding to the g dtype alone costs that much."""
        tol = dtype_tolerance(case.dtype, table)
        if tensor in {GRAD_NAMES[g] for g in self.gates}:
            return max(tol, dtype_tolerance(case.g_dtype, table))
        return tol

    # -- cost model ----------------------------------------------------------------------------
    def bytes_moved(self, case: Case, mode: str) -> float:
        """fwd: q, k, v in, o out; bwd: q, k, v, do in, dq, dk, dv out; fwdbwd: both."""
        e = ITEMSIZE[case.dtype]
        n = case.tokens
        q = n * case.heads * case.dim_qk * e
        k = n * case.kv_heads * case.dim_qk * e
        v = n * case.kv_heads * case.dim_v * e
        o = n * case.heads * case.dim_v * e
        fwd = q + k + v + o
        bwd = 2 * (q + k + v) + o
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    def flops(self, case: Case, mode: str) -> float:
        """The chunked (Lightning-2) form at block CHUNK: intra-chunk scores plus state read and update."""
        b, t, h, d, ev = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
        c = min(CHUNK, t)
        fwd = 2.0 * b * h * t * (c * (d + ev) + 2 * d * ev)
        bwd = 2.0 * fwd
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    # -- memory --------------------------------------------------------------------------------
    def estimate(self, case: Case, mode: str, quadratic: bool = False) -> Estimate:
        """Analytic bytes on ``case`` in ``mode`` (an order of magnitude, not a profile)."""
        if mode not in SCORE_COPIES:
            raise ValueError(f"unknown mode {mode!r}")
        item = ITEMSIZE[case.dtype]
        shapes = self.shapes(case)
        low = {n: s for n, s in shapes.items() if n not in self.fp32_tensors and n not in self.gates}
        fp32 = {n: s for n, s in shapes.items() if n not in low}
        inputs = item * sum(map(numel, low.values())) + FP32 * sum(map(numel, fp32.values()))
        b, t, h, d, e, n = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v, case.num_sequences
        outputs = item * numel((b, t, h, e)) + (FP32 * numel((n, h, d, e)) if self.has_state else 0)
        grads = 0
        if mode != "fwd":
            grads = item * sum(numel(low[x]) for x in ("q", "k", "v"))
            grads += FP32 * sum(numel(fp32[x]) for x in ("h0", *self.gates) if x in fp32)
        return Estimate(inputs, outputs, grads, self.work(case, mode, quadratic))

    def work(self, case: Case, mode: str, quadratic: bool) -> int:
        """Workspace bytes: the B·H·T² scores of a quadratic kernel, else per-chunk states and blocks."""
        b, t, h, d, e = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
        if quadratic:
            return SCORE_COPIES[mode] * ITEMSIZE[case.dtype] * b * h * t * t
        chunks = -(-t // CHUNK)
        return FP32 * b * h * (chunks * d * e + t * min(t, CHUNK))
