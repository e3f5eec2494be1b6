"""PyTorch references of the gated delta rule (GDN): the chain of trust for its kernels.

Per state head, state ``S ∈ R^{D×E}``::

    S_t = α_t · (I − β_t k_t k_tᵀ) · S_{t−1} + β_t k_t v_tᵀ,    α_t = exp(g_t),    o_t = scale · S_tᵀ q_t

Two independent formulations, each computing in fp64 when given fp64 and in fp32 otherwise
(outputs in the input dtype, the final state in the compute dtype):

- ``gdn_naive``: the token-by-token recurrence, every option of the contract;
- ``gdn_closed_form``: the same map written out, for tiny sizes and tests only: every product of
  transition matrices ``Φ_{t,s} = M_t ⋯ M_{s+1}`` (``M_t = α_t (I − β_t k_t k_tᵀ)``) built
  explicitly, ``S_t = Φ_{t,0} S_0 + Σ_{s≤t} Φ_{t,s} β_s k_s v_sᵀ``: no recurrence is shared with
  the loop.

Conventions (the kernels follow them):

- layout ``[B, T, H, D]``: q ``[B, T, H, D]``, k ``[B, T, H_kv, D]``, v ``[B, T, H_kv, E]``,
  g and beta ``[B, T, H]``. Gates belong to the state, as in fla's ``gated_delta_rule`` (g and
  beta per head of the state): here every query head has its own state, so g and beta are per
  query head, and with GQA the H / H_kv query heads reading one kv head gate it each their own
  way (with H = H_kv this is fla's layout exactly).
- k is taken as given: the kernels do not L2-normalise it (fla's ``use_qk_l2norm_in_kernel=False``).
  The recurrence is contractive when ``|k_t| = 1`` and ``0 < β_t < 1``, so callers normalise k
  first (``l2_normalize``) and tests draw normalised keys.
"""
from __future__ import annotations

import torch

from ..naive.torch_ref import check_inputs, expand_kv, per_sequence

Tensor = torch.Tensor


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(Σ x² + eps) over the last axis (fla's ``l2norm``): how the keys are prepared."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def check_gates(q: Tensor, g: Tensor, beta: Tensor) -> None:
    """g and beta are [B, T, H], one value per token and query (= state) head."""
    want = tuple(q.shape[:3])
    for name, x in (("g", g), ("beta", beta)):
        if tuple(x.shape) != want:
            raise ValueError(f"{name} must be [B, T, H] = {want}, got {tuple(x.shape)}")


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _in_compute_dtype(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, scale: float | None):
    """(compute dtype, scale (D^-1/2 by default), q, k, v and β in it, k and v per query head)."""
    h, d = q.shape[2], q.shape[3]
    cdt = _compute_dtype(q)
    return (cdt, d**-0.5 if scale is None else scale, q.to(cdt), expand_kv(k, h).to(cdt), expand_kv(v, h).to(cdt),
            beta.to(cdt))


def gdn_naive(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Token-by-token gated delta rule; returns (o [B, T, H, E], S_T [N, H, D, E] or None).

    The step is written as fla's recurrent kernel does it (decay, read, correct, write):
    ``S ← α S;  S ← S + β k (v − Sᵀk)ᵀ``, which is the recurrence above with ``α`` folded in.
    """
    check_inputs(q, k, v, initial_state, cu_seqlens)
    check_gates(q, g, beta)
    if cu_seqlens is not None:
        o, s = per_sequence(gdn_naive, q, k, v, {"g": g, "beta": beta}, initial_state, cu_seqlens, scale=scale)
        return o, (s if output_final_state else None)
    b, t, h, d = q.shape
    e = v.shape[3]
    cdt, scale, qc, kc, vc, bc = _in_compute_dtype(q, k, v, beta, scale)
    alpha = torch.exp(g.to(cdt))
    state = torch.zeros(b, h, d, e, dtype=cdt, device=q.device)
    if initial_state is not None:
        state = state + initial_state.to(cdt)
    out = []
    for i in range(t):
        state = alpha[:, i, :, None, None] * state                              # [B, H, D, E]
        k_i, v_i = kc[:, i], vc[:, i]                                           # [B, H, D], [B, H, E]
        delta = bc[:, i, :, None] * (v_i - torch.einsum("bhde,bhd->bhe", state, k_i))
        state = state + k_i[..., :, None] * delta[..., None, :]
        out.append(scale * torch.einsum("bhd,bhde->bhe", qc[:, i], state))
    o = torch.stack(out, dim=1) if out else qc.new_zeros(b, 0, h, e)
    return o.to(q.dtype), (state if output_final_state else None)


def gdn_closed_form(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float | None = None,
    initial_state: Tensor | None = None, cu_seqlens=None,
) -> tuple[Tensor, Tensor]:
    """The recurrence written out with explicit transition products; O(T²·D²) memory, tests only.

    ``o_t = scale·[(Φ_{t,0} S_0)ᵀ q_t + Σ_{s≤t} β_s (q_tᵀ Φ_{t,s} k_s) v_s]``: the delta rule's
    attention matrix ``W[t, s] = β_s q_tᵀ Φ_{t,s} k_s`` times V. Each Φ_{t,s} is a fresh product
    of the M's (``Φ_{t,t} = I``), never reused from its neighbour, so a slip in the loop's order
    of operations cannot reappear here.
    """
    check_inputs(q, k, v, initial_state, cu_seqlens)
    check_gates(q, g, beta)
    if cu_seqlens is not None:
        return per_sequence(gdn_closed_form, q, k, v, {"g": g, "beta": beta}, initial_state, cu_seqlens,
                             scale=scale)
    b, t, h, d = q.shape
    e = v.shape[3]
    cdt, scale, qc, kc, vc, bc = _in_compute_dtype(q, k, v, beta, scale)
    eye = torch.eye(d, dtype=cdt, device=q.device)
    # transition matrices M_t = α_t (I − β_t k_t k_tᵀ): [B, T, H, D, D]
    m = torch.exp(g.to(cdt))[..., None, None] * (eye - bc[..., None, None] * kc[..., :, None] * kc[..., None, :])
    s0 = torch.zeros(b, h, d, e, dtype=cdt, device=q.device)
    if initial_state is not None:
        s0 = s0 + initial_state.to(cdt)
    # phi[t][s] = Φ_{t,s} = M_t ⋯ M_{s+1} for s ≤ t, s = -1 standing for the initial state
    outs, final = [], s0
    for ti in range(t):
        o_t = torch.zeros(b, h, e, dtype=cdt, device=q.device)
        s_t = torch.zeros(b, h, d, e, dtype=cdt, device=q.device)
        for si in range(-1, ti + 1):
            phi = eye.expand(b, h, d, d)
            for r in range(si + 1, ti + 1):
                phi = m[:, r] @ phi                                             # left-multiply: newest first
            if si < 0:
                term = phi @ s0                                                 # Φ_{t,0} S_0
            else:
                term = bc[:, si, :, None, None] * (phi @ kc[:, si, :, :, None]) * vc[:, si, :, None, :]
            s_t = s_t + term
            o_t = o_t + scale * torch.einsum("bhd,bhde->bhe", qc[:, ti], term)
        outs.append(o_t)
        final = s_t
    o = torch.stack(outs, dim=1) if outs else qc.new_zeros(b, 0, h, e)
    return o.to(q.dtype), final
