"""Gluon (sm_90) forms of ``gla/triton``'s two parallel launches, each chunk column's rows in a few
lanes' registers: the prep launch (``prep``) and the backward's in-chunk launch (``bwd_intra``).

``gla_triton`` takes each where ``host.prep_reason`` / ``host.intra_reason`` allow (the prep launch
by default, the in-chunk one with ``GLA_GLUON_INTRA=1``; an sm_90 GPU, bf16 / fp16, D and E 64 or
128); the Triton launch otherwise. The kernel modules import only where Triton's Gluon Hopper API is
importable.
"""
