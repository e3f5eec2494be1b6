"""Gluon (sm_90) launches for ``gla/triton``: the prep launch with each chunk column in one thread.

``gla_triton`` takes ``prep.gla_prep_gluon_kernel`` in place of its Triton prep launch where
``prep.prep_reason`` allows and ``GLA_GLUON_PREP=1`` asks for it; the Triton launch otherwise.
The kernel module imports only where Triton's Gluon Hopper API is importable.
"""
