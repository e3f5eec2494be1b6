"""Gated Linear Attention in Triton: fused chunked forward and backward (dg included).

Public API (registered as ``gla/triton``)::

    gla_triton(q, k, v, g, scale=None, initial_state=None, output_final_state=True,
               reverse=False, cu_seqlens=None) -> (o, S_T)

The naive reference beside it is ``lattnbench.kernels.naive.torch_ref.recurrent_naive`` (g=...).
"""
from .ops import GLAFunction, gla_triton

__all__ = ["GLAFunction", "gla_triton"]
