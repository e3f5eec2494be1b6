"""The checks each gloo rank runs: its shard of the sequence-parallel kernel against the
single-process result on the whole sequence (every rank computes the reference itself).

Inputs are drawn from one seed on every rank, so all ranks agree on the whole problem; outputs
and gradients are poisoned (NaN) before the kernels write them.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.parallel import lightning_attn_sp, shard_bounds

#: (name, B, T, H, H_kv, D, E, packed lengths or None, h0, reverse)
CASES = [
    ("dense-gqa-h0", 2, 13, 4, 2, 8, 6, None, True, False),
    ("dense-rev", 1, 11, 2, 2, 8, 8, None, False, True),
    ("packed-h0", 1, 19, 2, 1, 4, 8, (3, 7, 1, 8), True, False),
    ("packed-rev-h0", 1, 19, 2, 2, 8, 4, (3, 7, 1, 8), True, True),
    ("packed-one-seq", 1, 17, 2, 2, 4, 4, (17,), False, False),
]


def _inputs(case, dtype, seed):
    _, b, t, h, hk, d, e, lens, h0, _ = case
    gen = torch.Generator().manual_seed(seed)
    n = len(lens) if lens else b
    draw = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    x = {"q": draw(b, t, h, d), "k": draw(b, t, hk, d), "v": draw(b, t, hk, e), "do": draw(b, t, h, e),
         "dS": draw(n, h, d, e)}
    if h0:
        x["h0"] = draw(n, h, d, e)
    x = {name: (a if name in ("h0", "dS") else a.to(dtype)) for name, a in x.items()}
    gamma = -torch.rand(h, generator=gen, dtype=torch.float64) * 0.7
    cu = None if lens is None else [0, *torch.tensor(lens).cumsum(0).tolist()]
    return x, gamma.float(), cu


def _grads(fn, x, gamma, cu, reverse, sl=slice(None)):
    leaves = {n: x[n][:, sl].clone().requires_grad_(True) for n in ("q", "k", "v")}
    h0 = x["h0"].clone().requires_grad_(True) if "h0" in x else None
    o, s = fn(leaves["q"], leaves["k"], leaves["v"], gamma, None, h0, reverse, cu)
    wrt = [leaves["q"], leaves["k"], leaves["v"]] + ([h0] if h0 is not None else [])
    grads = torch.autograd.grad((o, s), wrt, (x["do"][:, sl].to(o.dtype), x["dS"].to(s.dtype)))
    out = {"o": o, "final_state": s, "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    if h0 is not None:
        out["dh0"] = grads[3]
    return out


def _poisoned_naive(q, k, v, gamma, scale, h0, reverse, cu):
    return lightning_naive(q, k, v, gamma, scale, h0, reverse, cu)


def run_checks(group, local: str, dtype, tol: float, comms=("allgather", "ring"), cases=CASES) -> list[str]:
    """Failures (empty when every tensor of every case agrees within ``tol``)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    problems = []
    for case in cases:
        name, reverse = case[0], case[9]
        x, gamma, cu = _inputs(case, dtype, seed=hash(name) % 1000)
        ref64 = {n: (a.double() if a.is_floating_point() else a) for n, a in x.items()}
        want = _grads(lightning_naive, ref64, gamma.double(), cu, reverse)
        lo, hi = shard_bounds(case[2], world)[rank:rank + 2]
        for comm in comms:
            kernel = "triton" if local == "triton" else _poisoned_naive

            def sp(q, k, v, g, scale, h0, rev, cu_):
                return lightning_attn_sp(q, k, v, g, scale, h0, rev, cu_, group=group, comm=comm, local=kernel)

            got = _grads(sp, x, gamma, cu, reverse, slice(lo, hi))
            for tensor, value in got.items():
                ref = want[tensor] if tensor in ("final_state", "dh0") else want[tensor][:, lo:hi]
                err = float((value.double() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt())
                if not err <= tol:
                    problems.append(f"P{world} rank {rank} {name} {comm} {tensor}: err {err:.3g} > {tol:g}")
    return problems
