"""Gluon (sm_90) form of ``gla/triton``'s prep launch (``prep``), each chunk column's rows in a few
lanes' registers.

``gla_triton`` takes it where ``host.prep_reason`` allows (by default; an sm_90 GPU, bf16 / fp16, D
64 or 128), the Triton launch otherwise; ``gla/jax-triton`` where ``host.jax_prep_reason`` allows.
The kernel module imports only where Triton's Gluon Hopper API is importable.
"""
