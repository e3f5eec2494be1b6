"""Lightning Attention-2 in plain PyTorch: quadratic inside blocks, the state across blocks.

Written against lattnbench's documented plugin signature (docs/plugins.md); it does not
import lattnbench. It handles an initial state, GQA, dim_v != dim_qk and any head dim, but
not ``reverse`` or packed varlen, and says so through ``lattnbench_features``: those cases
are recorded as ``unsupported`` instead of being run.
"""
from __future__ import annotations

import torch

BLOCK = 64


def chunked_lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Chunked Lightning Attention-2 in PyTorch (example plugin, block 64, fp32 accumulation)."""
    if reverse or cu_seqlens is not None:  # never reached: lattnbench_features excludes them
        raise NotImplementedError("chunked_lightning has no reverse or varlen")
    b, t, h, d = q.shape
    group = h // k.shape[2]  # GQA: query head i reads kv head i // group
    f32 = torch.float32
    qf = q.to(f32)
    kf = k.to(f32).repeat_interleave(group, dim=2)
    vf = v.to(f32).repeat_interleave(group, dim=2)
    g = gamma.to(f32)  # [H], log decay per head, <= 0
    e = v.shape[3]
    state = (torch.zeros(b, h, d, e, dtype=f32, device=q.device) if initial_state is None
             else initial_state.to(f32))
    outs = []
    for start in range(0, t, BLOCK):
        qc, kc, vc = qf[:, start:start + BLOCK], kf[:, start:start + BLOCK], vf[:, start:start + BLOCK]
        c = qc.shape[1]
        pos = torch.arange(c, device=q.device, dtype=f32)
        dist = pos[:, None] - pos[None, :]  # [t, s]
        mask = torch.where(dist >= 0, torch.exp(g[:, None, None] * dist.clamp(min=0)), 0.0)  # [h, t, s]
        scores = torch.einsum("bthd,bshd->bhts", qc, kc) * mask
        o = torch.einsum("bhts,bshe->bthe", scores, vc)
        carried = torch.exp(g[None, :] * (pos[:, None] + 1))  # [t, h]: decay from the last state
        o = o + carried[None, :, :, None] * torch.einsum("bthd,bhde->bthe", qc, state)
        outs.append(scale * o)
        to_end = torch.exp(g[:, None] * (c - 1 - pos)[None, :])  # [h, s]
        state = (torch.exp(g * c)[None, :, None, None] * state
                 + torch.einsum("hs,bshd,bshe->bhde", to_end, kc, vc))
    return torch.cat(outs, dim=1).to(q.dtype), state


chunked_lightning.lattnbench_name = "plugin/my-chunked"
chunked_lightning.lattnbench_family = "lightning"
chunked_lightning.lattnbench_framework = "torch"
chunked_lightning.lattnbench_features = ("initial_state", "gqa", "dv", "any_dim")
