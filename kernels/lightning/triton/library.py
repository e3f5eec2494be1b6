"""The Triton Lightning kernels as torch custom ops (``lattnbench::lightning_fwd`` / ``_bwd``), so
that torch.compile sees one opaque op per direction instead of breaking the graph at Triton's
launcher.

``ops.lightning_attn_triton`` calls them only while torch.compile traces it: in eager mode a
custom op's dispatch would cost more host time than the rest of the call, and the lean path runs
the same launches. Both ops have fake (meta) implementations for tracing, the forward has its
autograd (the backward op), and both launch on torch's current stream, so they can be captured in
a CUDA graph (``mode="reduce-overhead"``).

The ops return tensors only: an absent final state or dS_0 is an empty [0] tensor.
Annotations are real types here (no ``from __future__ import annotations``): custom_op reads
the schema from them.
"""
from typing import Optional

import torch
from torch import Tensor

from . import ops


def _states(q: Tensor, v: Tensor, cu: Optional[Tensor], present: bool) -> tuple[int, ...]:
    """Shape of an [N, H, D, E] fp32 state, or (0,) when it is absent."""
    if not present:
        return (0,)
    n = q.shape[0] if cu is None else cu.shape[0] - 1
    return (n, q.shape[2], q.shape[3], v.shape[3])


def _count(q: Tensor, cu: Optional[Tensor]) -> int:
    return q.shape[0] if cu is None else cu.shape[0] - 1


@torch.library.custom_op("lattnbench::lightning_fwd", mutates_args=())
def lightning_fwd_op(q: Tensor, k: Tensor, v: Tensor, g: Tensor, h0: Optional[Tensor], cu: Optional[Tensor],
                     scale: float, reverse: bool, store_ht: bool) -> tuple[Tensor, Tensor]:
    """(o, final state or an empty tensor); inputs contiguous, g fp32 [H], h0 fp32 or None."""
    o, ht = ops.lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, _count(q, cu))
    return o, (ht if ht is not None else q.new_empty(0, dtype=torch.float32))


@lightning_fwd_op.register_fake
def _fwd_fake(q, k, v, g, h0, cu, scale, reverse, store_ht):
    b, t, h, _ = q.shape
    return q.new_empty(b, t, h, v.shape[3]), q.new_empty(_states(q, v, cu, store_ht), dtype=torch.float32)


@torch.library.custom_op("lattnbench::lightning_bwd", mutates_args=())
def lightning_bwd_op(q: Tensor, k: Tensor, v: Tensor, do: Tensor, g: Tensor, h0: Optional[Tensor],
                     dht: Optional[Tensor], cu: Optional[Tensor], scale: float,
                     reverse: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dS_0 or an empty tensor); do contiguous in q's dtype, dht fp32 or None."""
    dq, dk, dv, dh0 = ops.lightning_bwd(q, k, v, do, g, scale, h0, dht, reverse, cu, _count(q, cu))
    return dq, dk, dv, (dh0 if dh0 is not None else q.new_empty(0, dtype=torch.float32))


@lightning_bwd_op.register_fake
def _bwd_fake(q, k, v, do, g, h0, dht, cu, scale, reverse):
    dh0 = q.new_empty(_states(q, v, cu, h0 is not None), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dh0


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, g, h0, cu, scale, reverse, store_ht = inputs
    ctx.save_for_backward(q, k, v, g, h0, cu)
    ctx.scale, ctx.reverse, ctx.store_ht = scale, reverse, store_ht


def _backward(ctx, do, dht):
    q, k, v, g, h0, cu = ctx.saved_tensors
    if do is None:
        do = q.new_zeros(*q.shape[:3], v.shape[3])
    do = do.to(q.dtype).contiguous()
    # the empty stand-in of an absent final state has no gradient to pass on
    dht = dht.float().contiguous() if ctx.store_ht and dht is not None else None
    dq, dk, dv, dh0 = lightning_bwd_op(q, k, v, do, g, h0, dht, cu, ctx.scale, ctx.reverse)
    return dq, dk, dv, None, (dh0 if h0 is not None else None), None, None, None, None


lightning_fwd_op.register_autograd(_backward, setup_context=_setup_context)


ops.COMPILED_FWD = lightning_fwd_op
