"""Lightning attention: a constant per-head decay γ ≤ 0, ``S_t = exp(γ_h) S_{t-1} + k_t v_tᵀ``.

Kernels are called ``fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``.
"""
from __future__ import annotations

from lattnbench.operators.base import Family
from lattnbench.spec import Case

#: beyond this many B·H·T² scores the quadratic fp64 reference hands over to the chunked one
QUADRATIC_REF_LIMIT = 2**26


class Lightning(Family):
    name = "lightning"
    order = 0
    decayed = True
    static_jobs = "lattnbench.operators.lightning.static_jobs"

    def call(self, fn, t, gamma, scale, case: Case, cu_seqlens):
        o, state = fn(t["q"], t["k"], t["v"], gamma, scale, t.get("h0"), case.reverse, cu_seqlens)
        return (o,) if state is None else (o, state)

    def reference(self, t, case: Case, gamma, scale, cu_seqlens):
        from lattnbench.kernels.naive import torch_ref

        quadratic = case.batch * case.heads * case.seqlen**2 <= QUADRATIC_REF_LIMIT
        impl = torch_ref.lightning_naive if quadratic else torch_ref.lightning_chunked
        return impl(t["q"], t["k"], t["v"], gamma, scale, t.get("h0"), case.reverse, cu_seqlens)


FAMILY = Lightning()
