"""The gated delta rule in Triton: fused chunked kernels (WY / UT-transform form) and their backward.

Public API (registered as ``gdn/triton``)::

    gdn_triton(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=True,
               reverse=False, cu_seqlens=None) -> (o, S_T)

The fp64 reference beside it is ``lattnbench.kernels.gdn.naive.gdn_naive``.
"""
from .ops import GDNFunction, gdn_triton

__all__ = ["GDNFunction", "gdn_triton"]
