"""Pure JAX/XLA kernels (recurrent, chunked) with their naive references, and the jax-triton bridge.

Public API (the seeds'): ``recurrent``, ``lightning_attn``, ``recurrent_gla``, each with ``impl=``;
the gated delta rule: ``gdn_chunked`` (WY form) and ``gdn_recurrent`` (token scan).
"""
from .api import IMPLS, lightning_attn, recurrent, recurrent_gla
from .chunked import chunked_attention
from .gdn_chunked import gdn_chunked
from .gdn_recurrent import gdn_recurrent
from .naive import lightning_naive, recurrent_naive
from .recurrent import recurrent_attention

__all__ = ["IMPLS", "chunked_attention", "gdn_chunked", "gdn_recurrent", "lightning_attn", "lightning_naive",
           "recurrent", "recurrent_attention", "recurrent_gla", "recurrent_naive"]
