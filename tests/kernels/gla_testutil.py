"""The GLA kernels' end-to-end check against the fp64 token-by-token reference, shared by the Triton
kernels' tests and the emulated Gluon launches' (``tests/kernels/gla/``)."""
from __future__ import annotations

import torch

from lattnbench.kernels.gla.triton import gla_triton
from lattnbench.kernels.gla.triton.naive import gla_naive
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def gates(gen, shape, normaliser):
    """log σ(x) / normaliser: fla's gates (normaliser 16) and stronger ones."""
    return torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen)) / normaliser


def walls(g, wall, reverse, cu_seqlens, every):
    """g with every channel's gate set to ``wall`` at every ``every``-th row of each sequence (in
    processing order, from its first): at a wall of −30 every pair across a wall and every state
    carried past one weighs under e^{−30}, so o and every gradient are the pairs inside blocks of
    ``every`` rows, to 1e-13: the deepest levels of the launches' tree, alone."""
    g = g.clone()
    bounds = [(i, 0, g.shape[1]) for i in range(g.shape[0])] if cu_seqlens is None else \
        [(0, a, z) for a, z in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    for i, bos, eos in bounds:
        order = torch.arange(bos, eos).flip(0) if reverse else torch.arange(bos, eos)
        g[i, order[::every]] = wall
    return g


def check(seed=0, b=1, t=37, h=2, hkv=None, d=24, e=40, dtype=torch.float32, h0=True, reverse=False,
          cu_seqlens=None, scale=None, normaliser=16.0, dst=True, skip=(), wall=None, every=4, tol=None):
    """Kernel and fp64 reference on the same dtype-rounded inputs; assert o, S_T, dq, dk, dv, dg,
    dh0 within ``tol``, by default the dtype's tolerance (names in ``skip`` only finite). ``wall``: the gate of every
    channel at every ``every``-th row (``walls``). Returns the errors."""
    hkv = hkv or h
    n = b if cu_seqlens is None else len(cu_seqlens) - 1
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=gen).to(dtype)
    k = torch.randn(b, t, hkv, d, generator=gen).to(dtype)
    v = torch.randn(b, t, hkv, e, generator=gen).to(dtype)
    g = gates(gen, (b, t, h, d), normaliser)
    if wall is not None:
        g = walls(g, wall, reverse, cu_seqlens, every)
    s0 = torch.randn(n, h, d, e, generator=gen) if h0 else None
    do = torch.randn(b, t, h, e, generator=gen).to(dtype)
    ds = torch.randn(n, h, d, e, generator=gen)
    ins = [q, k, v, g] + ([s0] if h0 else [])

    mine = [x.to(DEV).requires_grad_(True) for x in ins]
    o, st = gla_triton(*mine[:4], scale=scale, initial_state=mine[4] if h0 else None, reverse=reverse,
                       cu_seqlens=cu_seqlens)
    assert o.dtype == dtype and st.dtype == torch.float32 and st.shape == (n, h, d, e)
    outs, cots = ((o, st), (do.to(DEV), ds.to(DEV))) if dst else ((o,), (do.to(DEV),))
    grads = torch.autograd.grad(outs, mine, cots)

    ref = [x.double().requires_grad_(True) for x in ins]
    ro, rs = gla_naive(*ref[:4], scale=scale, initial_state=ref[4] if h0 else None, reverse=reverse,
                       cu_seqlens=cu_seqlens)
    routs, rcots = ((ro, rs), (do.double(), ds.double())) if dst else ((ro,), (do.double(),))
    rgrads = torch.autograd.grad(routs, ref, rcots)

    names = ["dq", "dk", "dv", "dg", "dh0"][: len(ins)]
    pairs = {"o": (o, ro), "final_state": (st, rs), **{nm: (x, r) for nm, x, r in zip(names, grads, rgrads)}}
    errs = {nm: err_ratio(x, r) for nm, (x, r) in pairs.items()}
    tol = TOLERANCE[NAMES[dtype]] if tol is None else tol
    bad = {nm: err for nm, err in errs.items() if not (err < float("inf") if nm in skip else err <= tol)}
    assert not bad, f"errors above {tol}: {bad} (all: {errs})"
    return errs
