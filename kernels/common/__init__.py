"""Host-side helpers the kernel families share: launches (``launch``), input checks (``checks``),
launch arithmetic (``arith``), the jax-triton import (``jax_triton``), and the JAX kernels' input
checks, GQA expansion and varlen layouts (``jax_helpers``).

No kernels here, and nothing of a family: the families import from here, never from each other's
helpers.
"""
