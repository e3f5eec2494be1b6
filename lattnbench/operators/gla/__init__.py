"""Gated linear attention: data-dependent gates g_t ≤ 0, ``S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ``.

Kernels are called ``fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``; g is
drawn as ``logsigmoid(x) / case.gate_norm`` in ``case.g_dtype``.
"""
from __future__ import annotations

from lattnbench.operators.base import ITEMSIZE, Family
from lattnbench.spec import Case


class GLA(Family):
    name = "gla"
    order = 1
    gated = True
    gates = ("g",)
    static_jobs = "lattnbench.operators.gla.static_jobs"

    def call(self, fn, t, gamma, scale, case: Case, cu_seqlens):
        o, state = fn(t["q"], t["k"], t["v"], t["g"], scale, t.get("h0"), case.reverse, cu_seqlens)
        return (o,) if state is None else (o, state)

    def reference(self, t, case: Case, gamma, scale, cu_seqlens):
        from lattnbench.kernels.naive import torch_ref

        return torch_ref.recurrent_naive(t["q"], t["k"], t["v"], g=t["g"], g_gamma=None, scale=scale,
                                         initial_state=t.get("h0"), reverse=case.reverse, cu_seqlens=cu_seqlens)

    def work(self, case: Case, mode: str, quadratic: bool) -> int:
        """The token-by-token references keep one D×E state per step for autograd."""
        if not quadratic:
            return super().work(case, mode, quadratic)
        per_state = ITEMSIZE[case.dtype] * case.batch * case.heads * case.dim_qk * case.dim_v
        return 2 * per_state if mode == "fwd" else 3 * case.seqlen * per_state


FAMILY = GLA()
