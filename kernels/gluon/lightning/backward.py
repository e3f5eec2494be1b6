"""The Lightning backward as three passes of the forward kernel.

Why: the gradients of this linear recurrence are linear recurrences of the same form, so the
forward kernel, which runs near the memory floor, can compute them. With ``S_t = λ·S_{t−1} +
k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``, ``λ = exp(γ)`` per head, and ``R_s = Σ_{t≥s} λ^{t−s}·scale·
q_t dO_tᵀ + λ^{T−s}·dS_T`` (the state of the time-reversed recurrence over ``q_t dO_tᵀ``):

    dq_t = scale·(Σ_{s≤t} λ^{t−s} k_s v_sᵀ + λ^t S_0)·dO_t   the forward on (q, k, v) = (dO, v, k), S_0ᵀ
    dk_s = R_s v_s                                          reversed, on (v, dO, q)
    dv_s = R_sᵀ k_s                                         reversed, on (k, q, dO)
    dS_0 = scale·λ·(the dv pass's final state) + λ^T·w·dS_T

A reversed call starts from its initial state one step before the last token, so dS_T enters as
``c·dS_T`` with ``c = 1 / (scale·λ)``. For heads decaying faster than ``exp(LOG_DECAY_FLOOR)`` a
token, c is capped (its start state would grow past what a 16-bit operand of the state carries
well) and the last token takes the missing part, ``w = 1 − scale·λ·c``, from a small correction;
the other tokens then miss less than λ ≤ 2e-9 of their dS_T term. For every other head w is
exactly 0. A reversed forward swaps the directions of the three passes, and "last" is row 0.

Each pass reads three [B, T, H, ·] tensors and writes one. Heads must not be grouped (GQA): the
dk and dv passes take dO, which has a query head's worth of heads, as their keys.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor
# (q, k, v, g, scale, h0, reverse, store_ht) -> (o, S_T or None): the contract of the forward
Forward = Callable[[Tensor, Tensor, Tensor, Tensor, float, Tensor | None, bool, bool], tuple[Tensor, Tensor | None]]

LOG_DECAY_FLOOR = -20.0  # γ below which dS_T's start state is capped (λ < 2.1e-9 a token)


def start_states_torch(dht: Tensor | None, h0: Tensor | None, g: Tensor, scale: float, floor: float,
                       stream=None) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The reversed passes' start states from dS_T, ``x = c·dS_T`` [B, H, D, E] and ``y = xᵀ``, and
    S_0ᵀ for the dq pass; each None where its input is (``state_terms.start_states`` in torch)."""
    x = y = None
    if dht is not None:
        c = torch.exp(torch.clamp(-g, max=-floor)) / scale                   # [H]
        x = (dht * c[:, None, None]).contiguous()                            # [B, H, D, E]
        y = x.transpose(-1, -2).contiguous()                                 # [B, H, E, D]
    h0t = None if h0 is None else h0.transpose(-1, -2).contiguous()
    return x, y, h0t


def end_terms_torch(dht: Tensor | None, k: Tensor, v: Tensor, dk: Tensor, dv: Tensor, s_end: Tensor | None,
                    g: Tensor, scale: float, floor: float, last: int, stream=None) -> Tensor | None:
    """The last token's dS_T correction of dk and dv (in place) and dS_0 from the dv pass's final
    state (``state_terms.end_terms`` in torch)."""
    t = k.shape[1]
    w = None if dht is None else -torch.expm1(torch.clamp(g - floor, max=0.0))  # [H]: 1 − scale·λ·c
    dh0 = None
    if s_end is not None:
        dh0 = s_end * (scale * torch.exp(g))[:, None, None]
        if dht is not None:
            dh0 = dh0 + (torch.exp(t * g) * w)[:, None, None] * dht
    if dht is not None:
        wd = w[:, None, None] * dht                                          # [B, H, D, E]
        dk[:, last] += torch.einsum("bhde,bhe->bhd", wd, v[:, last].to(wd.dtype)).to(dk.dtype)
        dv[:, last] += torch.einsum("bhde,bhd->bhe", wd, k[:, last].to(wd.dtype)).to(dv.dtype)
    return dh0


def _terms_for(q: Tensor):
    """The state terms' implementation for ``q``'s device: two Triton launches on a GPU, torch
    calls elsewhere (the CPU's reference forwards run in fp64)."""
    if q.is_cuda:
        from . import state_terms
        return state_terms.start_states, state_terms.end_terms
    return start_states_torch, end_terms_torch


def backward_by_forwards(fwd: Forward, q: Tensor, k: Tensor, v: Tensor, do: Tensor, dht: Tensor | None,
                         g: Tensor, scale: float, h0: Tensor | None, reverse: bool, want_dh0: bool,
                         terms=None, stream=None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(dq, dk, dv, dS_0 or None) of Lightning Attention, from three calls of ``fwd``.

    Inputs contiguous, [B, T, H, ·] with as many kv heads as query heads; ``do`` in q's dtype; ``g``
    fp32 [H]; ``dht`` and ``h0`` fp32 [B, H, D, E] or None. ``terms``: the (start, end) state terms,
    by default ``_terms_for(q)``; ``stream``: the raw CUDA stream, if the caller has it.
    """
    start, end = terms if terms is not None else _terms_for(q)
    x, y, h0t = start(dht, h0, g, scale, LOG_DECAY_FLOOR, stream=stream)
    dq, _ = fwd(do, v, k, g, scale, h0t, reverse, False)      # q:[B,T,H,E] k:[B,T,H,E] v:[B,T,H,D]
    dk, _ = fwd(v, do, q, g, scale, y, not reverse, False)    # q:[B,T,H,E] k:[B,T,H,E] v:[B,T,H,D]
    dv, s_end = fwd(k, q, do, g, scale, x, not reverse, want_dh0)  # q:[B,T,H,D] k:[B,T,H,D] v:[B,T,H,E]
    last = 0 if reverse else q.shape[1] - 1
    dh0 = end(dht, k, v, dk, dv, s_end, g, scale, LOG_DECAY_FLOOR, last, stream=stream)
    return dq, dk, dv, dh0
