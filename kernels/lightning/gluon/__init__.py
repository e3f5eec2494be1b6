"""Lightning Attention with a Hopper (sm_90) Gluon forward; its backward by three Gluon forward
passes (``LIGHTNING_GLUON_BACKWARD=1``) or the Triton kernel's.

Public API (registered as ``lightning/gluon``)::

    lightning_attn_gluon(q, k, v, gamma=None, scale=None, initial_state=None,
                         output_final_state=True, reverse=False, cu_seqlens=None) -> (o, S_T)
    gluon_path(q, v, cu_seqlens=None) -> None | why the Triton kernel runs the call instead
    gluon_backward_path(q, k) -> None | why a Gluon forward's backward is the Triton kernel's

The kernel module imports only where Triton's Gluon Hopper API is importable (see ``common.gluon_compat``).
"""
from .ops import device_reason, gluon_backward_path, gluon_path, lightning_attn_gluon

__all__ = ["device_reason", "gluon_backward_path", "gluon_path", "lightning_attn_gluon"]
