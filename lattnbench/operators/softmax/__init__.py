"""Causal softmax attention: the baseline the linear families are measured against.

Kernels are called ``fn(q, k, v, scale) -> o``; no state, no decay.
"""
from __future__ import annotations

from lattnbench.operators.base import FP32, ITEMSIZE, SCORE_COPIES, Family
from lattnbench.spec import Case


class Softmax(Family):
    name = "softmax"
    order = 2
    has_state = False
    reference_family = True
    default_features = frozenset({"gqa", "dv", "any_dim"})

    def call(self, fn, t, gamma, scale, case: Case, cu_seqlens):
        return (fn(t["q"], t["k"], t["v"], scale),)

    def reference(self, t, case: Case, gamma, scale, cu_seqlens):
        from lattnbench.kernels.naive import torch_ref

        return (torch_ref.softmax_naive(t["q"], t["k"], t["v"], scale),)

    def flops(self, case: Case, mode: str) -> float:
        """QKᵀ and PV over the causal half; the backward about 2.5 times the forward."""
        b, t, h, d, ev = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
        fwd = 2.0 * b * h * t * t * (d + ev) / 2
        bwd = 2.5 * fwd
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    def work(self, case: Case, mode: str, quadratic: bool) -> int:
        """Quadratic kernels upcast half-precision scores to fp32."""
        if not quadratic:
            return super().work(case, mode, quadratic)
        item = max(ITEMSIZE[case.dtype], FP32)
        return SCORE_COPIES[mode] * item * case.batch * case.heads * case.seqlen**2


FAMILY = Softmax()
