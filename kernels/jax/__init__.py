"""Pure JAX/XLA kernels (recurrent, chunked) with their naive references, and the jax-triton bridge.

Public API (the seeds'): ``recurrent``, ``lightning_attn``, ``recurrent_gla``, each with ``impl=``.
The gated delta rule lives in its own modules, imported from there (a package attribute of the
same name would shadow the module): ``gdn_chunked.gdn_chunked`` (WY form) and
``gdn_recurrent.gdn_recurrent`` (token scan).
"""
from .api import IMPLS, lightning_attn, recurrent, recurrent_gla
from .chunked import chunked_attention
from .naive import lightning_naive, recurrent_naive
from .recurrent import recurrent_attention

__all__ = ["IMPLS", "chunked_attention", "lightning_attn", "lightning_naive", "recurrent", "recurrent_attention",
           "recurrent_gla", "recurrent_naive"]
