"""Lightning Attention in Triton: fused chunked forward and backward (Lightning Attention-2 form).

Public API (registered as ``lightning/triton``)::

    lightning_attn_triton(q, k, v, gamma=None, scale=None, initial_state=None,
                          output_final_state=True, reverse=False, cu_seqlens=None) -> (o, S_T)
    lightning_attn(q, k, v, layer_idx, num_layers, softmax_scale=None, initial_state=None,
                   reverse=False, cu_seqlens=None) -> (o, S_T)
"""
from . import library  # noqa: F401 — registers the custom ops torch.compile traces
from .ops import LightningAttnFunction, lightning_attn, lightning_attn_triton

__all__ = ["LightningAttnFunction", "lightning_attn", "lightning_attn_triton"]
