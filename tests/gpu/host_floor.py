"""A plugin that measures what any torch autograd op costs the host: ``plugin/autograd-floor``
makes o and S_T in a ``torch.autograd.Function`` that computes nothing, and its backward makes
the three gradients. Each is zero-filled (one memset launch), as the speed run refuses a
non-finite output. Its fwd+bwd ``host_ms`` is about the least an eager autograd call of this
signature can take on that machine, the bar for the lean host path's target.
Put ``tests/gpu`` on ``PYTHONPATH`` to load it; its values are not attention (speed only).
"""
from __future__ import annotations

import torch


class _Nothing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        b, t, h, _ = q.shape
        e = v.shape[-1]
        ctx.shapes = (q.shape, k.shape, v.shape)
        return q.new_zeros(b, t, h, e), q.new_zeros(b, h, q.shape[-1], e, dtype=torch.float32)

    @staticmethod
    def backward(ctx, do, dstate):
        return tuple(do.new_zeros(s) for s in ctx.shapes)


def floor(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """(o, S_T) of the right shapes and dtypes, computed by nothing."""
    return _Nothing.apply(q, k, v)


floor.lattnbench_name = "plugin/autograd-floor"
floor.lattnbench_devices = ("cuda",)
