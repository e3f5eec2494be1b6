"""What a rank runs on its own shard: a Lightning Attention kernel with explicit forward and
backward (the state gradient ``dS_T`` in, ``dh0`` out), so the sequence-parallel step can feed it
the combined state gradients.

``TritonLocal`` launches the bundled fused kernels directly (no recompute); ``AutogradLocal``
wraps any differentiable function of the uniform signature (the fp64 references in tests),
recomputing its forward in the backward.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Tensor = torch.Tensor


class TritonLocal:
    """The bundled Triton kernels (``lattnbench.kernels.lightning.triton``), states in fp32."""

    name = "triton"
    state_dtype = torch.float32

    @staticmethod
    def _cu(cu: Sequence[int] | None, device) -> Tensor | None:
        return None if cu is None else torch.tensor(list(cu), dtype=torch.int32, device=device)

    def fwd(self, q, k, v, g, scale, h0, reverse, cu, n) -> tuple[Tensor, Tensor]:
        from ..triton.ops import lightning_fwd

        h0 = None if h0 is None else h0.float().contiguous()
        return lightning_fwd(q.contiguous(), k.contiguous(), v.contiguous(), g, scale, h0, bool(reverse),
                             self._cu(cu, q.device), True, n)

    def bwd(self, q, k, v, do, g, scale, h0, dht, reverse, cu, n):
        from ..triton.ops import lightning_bwd

        h0 = None if h0 is None else h0.float().contiguous()
        return lightning_bwd(q.contiguous(), k.contiguous(), v.contiguous(), do.contiguous(), g, scale, h0,
                             dht.float().contiguous(), bool(reverse), self._cu(cu, q.device), n)


class AutogradLocal:
    """Any ``fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)`` with torch
    autograd; the backward recomputes the forward. States keep the inputs' precision (fp64 in)."""

    name = "autograd"

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def fwd(self, q, k, v, g, scale, h0, reverse, cu, n):
        with torch.no_grad():
            return self.fn(q, k, v, g, scale, h0, reverse, None if cu is None else list(cu))

    def bwd(self, q, k, v, do, g, scale, h0, dht, reverse, cu, n):
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
            h0_leaf = None if h0 is None else h0.detach().requires_grad_(True)
            o, s = self.fn(*leaves, g, scale, h0_leaf, reverse, None if cu is None else list(cu))
            wrt = leaves + ([h0_leaf] if h0_leaf is not None else [])
            grads = torch.autograd.grad((o, s), wrt, (do.to(o.dtype), dht.to(s.dtype)), allow_unused=True)
        dq, dk, dv = (torch.zeros_like(x) if gr is None else gr for x, gr in zip(leaves, grads[:3]))
        return dq, dk, dv, (grads[3] if h0_leaf is not None else None)


def state_dtype(q: Tensor) -> torch.dtype:
    """States and their gradients: fp32, or fp64 for fp64 inputs (the references)."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32
