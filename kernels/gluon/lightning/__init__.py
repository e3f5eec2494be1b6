"""Lightning Attention with a Hopper (sm_90) Gluon forward and the Triton kernel's backward.

Public API (registered as ``lightning/gluon``)::

    lightning_attn_gluon(q, k, v, gamma=None, scale=None, initial_state=None,
                         output_final_state=True, reverse=False, cu_seqlens=None) -> (o, S_T)
    gluon_path(q, v, cu_seqlens=None) -> None | why the Triton kernel runs the call instead

The kernel module imports only where Triton's Gluon Hopper API is importable (see ``compat``).
"""
from .ops import device_reason, gluon_path, lightning_attn_gluon

__all__ = ["device_reason", "gluon_path", "lightning_attn_gluon"]
