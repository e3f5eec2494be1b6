"""GDN-family plugin kernels for the tests: a faithful torch one and a plausible bug."""
from __future__ import annotations


def gdn_torch(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
    """The reference recurrence in fp32: must pass check-grad."""
    from lattnbench.kernels.gdn.naive import gdn_naive

    cu = None if cu_seqlens is None else [int(c) for c in cu_seqlens]
    return gdn_naive(q, k, v, g, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu)


def gdn_no_erase(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
    """A plausible bug: the delta rule without its erase term (S ← αS + β k vᵀ, GLA with a
    scalar gate). Must FAIL check-grad."""
    import torch

    b, t, h, d = q.shape
    rep = h // k.shape[2]
    kf, vf = k.float().repeat_interleave(rep, 2), v.float().repeat_interleave(rep, 2)
    s = torch.zeros(b, h, d, v.shape[3]) if initial_state is None else initial_state.float()
    outs = []
    for i in range(t):
        s = torch.exp(g[:, i].float())[..., None, None] * s
        s = s + beta[:, i].float()[..., None, None] * kf[:, i, :, :, None] * vf[:, i, :, None, :]
        outs.append(scale * torch.einsum("bhd,bhde->bhe", q[:, i].float(), s))
    return torch.stack(outs, 1).to(q.dtype), s


for _fn, _name in ((gdn_torch, "gdn-torch"), (gdn_no_erase, "gdn-no-erase")):
    _fn.lattnbench_family = "gdn"
    _fn.lattnbench_name = f"plugin/{_name}"
