"""The GLA reference beside the kernels: the token-by-token recurrence, in the dtype it is given
(pass fp64 for a reference). Same signature as ``gla_triton``."""
from __future__ import annotations

import torch

from ...naive.torch_ref import recurrent_naive


def gla_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float | None = None,
              initial_state: torch.Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
              cu_seqlens=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``S_t = diag(exp(g_t))·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``; returns (o, S_T)."""
    o, s = recurrent_naive(q, k, v, g=g, scale=scale, initial_state=initial_state, reverse=reverse,
                           cu_seqlens=None if cu_seqlens is None else [int(x) for x in cu_seqlens])
    return o, (s if output_final_state else None)
