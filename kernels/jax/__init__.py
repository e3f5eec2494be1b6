"""Pure JAX/XLA kernels (recurrent, chunked) with their naive references, and the jax-triton bridge.

Public API (the seeds'): ``recurrent``, ``lightning_attn``, ``recurrent_gla``, each with ``impl=``.

Shared by the Lightning and GLA families rather than split between them: ``api``, ``chunked`` (one
entry point dispatching to Lightning's ``lightning_chunked`` or the GLA form), ``recurrent`` and
``naive`` each serve the general recurrence, of which Lightning and GLA are cases. The gated
delta rule has its own package, ``lattnbench.kernels.gdn.jax``.
"""
from .api import IMPLS, lightning_attn, recurrent, recurrent_gla
from .chunked import chunked_attention
from .naive import lightning_naive, recurrent_naive
from .recurrent import recurrent_attention

__all__ = ["IMPLS", "chunked_attention", "lightning_attn", "lightning_naive", "recurrent", "recurrent_attention",
           "recurrent_gla", "recurrent_naive"]
