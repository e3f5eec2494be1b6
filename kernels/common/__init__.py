"""Host-side helpers the kernel families share: launches (``launch``), input checks (``checks``),
launch arithmetic (``arith``) and the jax-triton import (``jax_triton``).

No kernels here, and nothing of a family: the families import from here, never from each other's
helpers.
"""
