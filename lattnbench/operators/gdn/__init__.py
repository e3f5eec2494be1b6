"""The gated delta rule (GDN): ``S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``.

α_t = exp(g_t) with g ≤ 0 and β_t ∈ (0, 1), one of each per token and query (= state) head.
Kernels are called ``fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``.

Inputs: k is drawn standard normal and L2-normalised over D when the inputs are drawn, and the
kernels take it as given (fla's ``use_qk_l2norm_in_kernel=False``): the recurrence is a
contraction only for unit keys, so an un-normalised key is not a case of the contract. g is
``logsigmoid(x) / gate_norm`` in ``case.g_dtype`` ``[B, T, H]``; β is ``sigmoid(x)`` ``[B, T, H]`` in the
case dtype, as a model computes it from its activations (fla's ``b_proj(x).sigmoid()``).
No reverse: the bundled kernels and fla's have none, and the reference refuses it.
"""
from __future__ import annotations

from lattnbench.errors import Unsupported
from lattnbench.measure.tolerance import tolerance as dtype_tolerance
from lattnbench.operators.base import CHUNK, FP32, ITEMSIZE, Estimate, Family, numel
from lattnbench.spec import Case

#: the gradients whose tolerance also follows the g dtype (dβ sits beside dg in every kernel's
#: backward, summed over the same chunk-local gate products)
GATE_GRADS = ("dg", "dbeta")


class GDN(Family):
    name = "gdn"
    order = 3
    gated = True
    gates = ("g",)
    differentiable = ("q", "k", "v", "h0", "g", "beta")
    static_jobs = "lattnbench.operators.gdn.static_jobs"
    default_features = frozenset({"initial_state", "varlen", "gqa", "dv", "any_dim"})

    # -- inputs --------------------------------------------------------------------------------
    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        """The default linear family's tensors, with g and beta one per token and query head."""
        s = super().shapes(case)
        s["g"] = s["beta"] = (case.batch, case.seqlen, case.heads)
        return s

    def draw(self, name: str) -> str:
        if name == "k":
            return "unit"
        if name == "beta":
            return "sigmoid"
        return super().draw(name)

    # -- calls ---------------------------------------------------------------------------------
    def call(self, fn, t, gamma, scale, case: Case, cu_seqlens):
        o, state = fn(t["q"], t["k"], t["v"], t["g"], t["beta"], scale, t.get("h0"), case.reverse, cu_seqlens)
        return (o,) if state is None else (o, state)

    def expected_tensors(self, case: Case) -> list[str]:
        return [*super().expected_tensors(case), "dbeta"]

    def reference(self, t, case: Case, gamma, scale, cu_seqlens):
        """``gdn_naive``, the token recurrence, in fp64 on fp64 inputs (k as drawn: unit rows)."""
        if case.reverse:
            raise Unsupported("the gated delta rule has no reverse form here (no GDN kernel takes one)")
        from lattnbench.kernels.gdn.naive import gdn_naive

        return gdn_naive(t["q"], t["k"], t["v"], t["g"], t["beta"], scale=scale, initial_state=t.get("h0"),
                         output_final_state=True, cu_seqlens=cu_seqlens)

    # -- tolerances ----------------------------------------------------------------------------
    def tolerance(self, case: Case, tensor: str, table: str = "lattnbench") -> float:
        """The case dtype's; dg and dβ also the g dtype's (the looser), as GLA's dg."""
        tol = dtype_tolerance(case.dtype, table)
        if tensor in GATE_GRADS:
            return max(tol, dtype_tolerance(case.g_dtype, table))
        return tol

    # -- cost model ----------------------------------------------------------------------------
    def bytes_moved(self, case: Case, mode: str) -> float:
        """fwd: q, k, v, g, β in, o out; bwd: those and do in, their gradients out; fwdbwd: both."""
        e, eg = ITEMSIZE[case.dtype], ITEMSIZE[case.g_dtype]
        n, h = case.tokens, case.heads
        ins = n * (h * case.dim_qk + case.kv_heads * (case.dim_qk + case.dim_v)) * e + n * h * (eg + e)
        o = n * h * case.dim_v * e
        fwd = ins + o
        bwd = 2 * ins + o
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    def flops(self, case: Case, mode: str) -> float:
        """The chunked WY form at chunk C = CHUNK, per chunk and head:

        A = (β K)Kᵀ 2C²D; the unit lower-triangular inverse (I + A)⁻¹ C³/3 multiply-adds, 2C³/3;
        u = T(βV), w = T(β e^G K) 2C²(D + E); ν = u − wS 2CDE; scores QKᵀ and their product with
        ν 2C²(D + E); (e^G Q)S 2CDE; the state update Kᵀν 2CDE. Per token:
        ``2C(3D + 2E) + 2C²/3 + 6DE``; the backward twice the forward.
        """
        b, t, h, d, ev = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
        c = min(CHUNK, t)
        fwd = float(b * h * t) * (2 * c * (3 * d + 2 * ev) + 2 * c * c / 3 + 6 * d * ev)
        bwd = 2.0 * fwd
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    # -- memory --------------------------------------------------------------------------------
    def estimate(self, case: Case, mode: str, quadratic: bool = False) -> Estimate:
        """The default's, with g and β in their own dtypes and dβ beside dg."""
        base = super().estimate(case, mode, quadratic)
        gates = numel((case.batch, case.seqlen, case.heads))
        item, eg = ITEMSIZE[case.dtype], ITEMSIZE[case.g_dtype]
        # the default counts g (a gate) as fp32 and β with the case-dtype inputs already
        inputs = base.inputs - FP32 * gates + eg * gates
        grads = base.grads + (item * gates if mode != "fwd" else 0)
        return Estimate(inputs, base.outputs, grads, base.work)

    def work(self, case: Case, mode: str, quadratic: bool) -> int:
        """The chunked form's fp32 workspace: per token u, w, the decayed keys and ν (2D + 2E), the
        chunk's C×C system, and the state entering each chunk; the token-by-token reference (a
        ``quadratic`` kernel here) keeps one D×E state per step for autograd."""
        b, t, h, d, e = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
        if quadratic:
            per_state = ITEMSIZE[case.dtype] * b * h * d * e
            return 2 * per_state if mode == "fwd" else 3 * t * per_state
        chunks = -(-t // CHUNK)
        return FP32 * b * h * (chunks * d * e + t * (2 * d + 2 * e + min(t, CHUNK)))


FAMILY = GDN()
