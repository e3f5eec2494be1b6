"""An example lattnbench plugin package (see docs/plugins.md).

- ``my_kernel.lightning:chunked_lightning`` — PyTorch, Lightning Attention-2 chunked form;
- ``my_kernel.jax_lightning:recurrent_lightning`` — JAX, a ``lax.scan`` recurrence.

Each is a plain function with the lightning family's uniform signature
``fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens) -> (o, final_state)`` and a few
``lattnbench_*`` attributes that say what it handles. Neither imports lattnbench.
"""
