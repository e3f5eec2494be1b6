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

Each pass reads three [B, T, H, ·] tensors and writes one. The dk and dv passes share their state
(R, and its transpose), so a kernel that does both at once (``DkDv``; the Gluon ``dkdv`` kernel)
reads q, k, v and dO once each instead; ``dkdv_by_forwards`` is the same contract as the two
passes. Heads must not be grouped (GQA): the dk and dv passes take dO, which has a query head's
worth of heads, as their keys.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .configs import H0_FROM_DST, H0_PLAIN, H0_TRANSPOSED, LOG_DECAY_FLOOR

Tensor = torch.Tensor
# (q, k, v, g, scale, h0, reverse, store_ht, h0_mode) -> (o, S_T or None): the contract of the
# forward; h0_mode (configs.H0_*) says how the start state comes from h0
Forward = Callable[[Tensor, Tensor, Tensor, Tensor, float, Tensor | None, bool, bool, int],
                   tuple[Tensor, Tensor | None]]
# (q, k, v, dO, g, scale, dS_T or None, the passes' direction, want R after the last chunk)
# -> (dk, dv, that R or None): the dk and dv passes together
DkDv = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, float, Tensor | None, bool, bool],
                tuple[Tensor, Tensor, Tensor | None]]


def start_state_torch(h0: Tensor, g: Tensor, scale: float, h0_mode: int) -> Tensor:
    """The start state a forward takes from ``h0`` under ``h0_mode``, in torch calls (the Gluon
    kernel does this as it loads the state): ``c·h0`` for dS_T, transposed where asked."""
    x = h0
    if h0_mode & H0_FROM_DST:
        x = x * (torch.exp(torch.clamp(-g, max=-LOG_DECAY_FLOOR)) / scale)[:, None, None]
    if h0_mode & H0_TRANSPOSED:
        x = x.transpose(-1, -2)
    return x.contiguous()


def with_start_states(fwd: Callable) -> Forward:
    """A ``Forward`` from one that takes its start state as given (the CPU's reference forwards)."""
    def forward(q, k, v, g, scale, h0, reverse, store_ht, h0_mode=H0_PLAIN):
        start = None if h0 is None else start_state_torch(h0, g, scale, h0_mode)
        return fwd(q, k, v, g, scale, start, reverse, store_ht)
    return forward


def end_terms_torch(dht: Tensor | None, k: Tensor, v: Tensor, dk: Tensor, dv: Tensor, s_end: Tensor | None,
                    g: Tensor, scale: float, floor: float, last: int, stream=None) -> Tensor | None:
    """The last token's dS_T correction of dk and dv (in place) and dS_0 from the dv pass's final
    state (``end_terms.end_terms`` in torch)."""
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


def dkdv_by_forwards(fwd: Forward) -> DkDv:
    """The dk and dv passes as two calls of ``fwd``."""
    def dkdv(q, k, v, do, g, scale, dht, reverse, want_s_end):
        # q:[B,T,H,E] k:[B,T,H,E] v:[B,T,H,D], from (c·dS_T)ᵀ
        dk, _ = fwd(v, do, q, g, scale, dht, reverse, False, H0_FROM_DST | H0_TRANSPOSED)
        # q:[B,T,H,D] k:[B,T,H,D] v:[B,T,H,E], from c·dS_T
        dv, s_end = fwd(k, q, do, g, scale, dht, reverse, want_s_end, H0_FROM_DST)
        return dk, dv, s_end
    return dkdv


def _end_terms_for(q: Tensor):
    """The end terms' implementation for ``q``'s device: one Triton launch on a GPU, torch calls
    elsewhere (the CPU's reference forwards run in fp64)."""
    if q.is_cuda:
        from . import end_terms as _end
        return _end.end_terms
    return end_terms_torch


def backward_by_forwards(fwd: Forward, q: Tensor, k: Tensor, v: Tensor, do: Tensor, dht: Tensor | None,
                         g: Tensor, scale: float, h0: Tensor | None, reverse: bool, want_dh0: bool,
                         end=None, stream=None, dkdv: DkDv | None = None,
                         ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(dq, dk, dv, dS_0 or None) of Lightning Attention: dq from a call of ``fwd``, dk and dv from
    ``dkdv`` (by default two more calls of ``fwd``, ``dkdv_by_forwards``).

    Inputs contiguous, [B, T, H, ·] with as many kv heads as query heads; ``do`` in q's dtype; ``g``
    fp32 [H]; ``dht`` and ``h0`` fp32 [B, H, D, E] or None. ``end``: the end terms, by default
    ``_end_terms_for(q)``; ``stream``: the raw CUDA stream, if the caller has it.
    """
    end = end if end is not None else _end_terms_for(q)
    dkdv = dkdv if dkdv is not None else dkdv_by_forwards(fwd)
    # The reversed dk / dv pass runs first: it starts at the chunks the forward ended on (q, k, v
    # still in L2) and ends on the chunks the dq pass starts at (dO, v, k), so both hand-offs
    # between passes find their first tiles in L2.
    dk, dv, s_end = dkdv(q, k, v, do, g, scale, dht, not reverse, want_dh0)
    # q:[B,T,H,E] k:[B,T,H,E] v:[B,T,H,D], from S_0ᵀ
    dq, _ = fwd(do, v, k, g, scale, h0, reverse, False, H0_TRANSPOSED)
    last = 0 if reverse else q.shape[1] - 1
    dh0 = end(dht, k, v, dk, dv, s_end, g, scale, LOG_DECAY_FLOOR, last, stream=stream)
    return dq, dk, dv, dh0
