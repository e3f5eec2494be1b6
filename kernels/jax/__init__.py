"""Pure JAX/XLA kernels and the jax-triton bridge."""
