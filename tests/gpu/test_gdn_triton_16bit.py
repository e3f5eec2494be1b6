"""gdn/triton in bf16 and fp16 on the GPU, at the shape and configs where Triton 3.6 for sm_90 once
compiled its reverse sweep into out-of-range shared-memory reads and garbage (B2 H4 D = E = 128):
every output and gradient against the fp64 token recurrence, at a partial chunk and at 32 chunks,
gate norms 16, 1 and 0.1, with an initial state. Tolerances are the dtype's (bf16 1.5e-2, fp16
2e-3); a fault, a non-finite value or garbage fails here first (bf16 cannot run in the
interpreter, and the interpreter's addresses were right all along)."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gdn.naive import gdn_naive
from lattnbench.kernels.gdn.triton import gdn_triton
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

pytestmark = pytest.mark.gpu

B, H, D = 2, 4, 128
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
NAMES = ("o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dh0")
CASES = [(dt, t, norm) for dt in DTYPES for t, norm in ((100, 16.0), (100, 0.1), (2048, 16.0), (2048, 1.0))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-T{c[1]}-norm-{c[2]:g}")
def test_every_tensor_within_tolerance(case):
    name, t, norm = case
    dtype = DTYPES[name]
    seed = int(torch.randint(0, 2**31, ()))
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    x = dict(q=rnd(B, t, H, D).to(dtype), k=torch.nn.functional.normalize(rnd(B, t, H, D), dim=-1).to(dtype),
             v=rnd(B, t, H, D).to(dtype), g=torch.nn.functional.logsigmoid(rnd(B, t, H)) / norm,
             beta=torch.sigmoid(rnd(B, t, H)).to(dtype), h0=rnd(B, H, D, D))
    do, ds = rnd(B, t, H, D).to(dtype), rnd(B, H, D, D)
    leaves = [x[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "beta", "h0")]
    o, s = gdn_triton(*leaves[:5], initial_state=leaves[5])
    got = dict(zip(NAMES, (o, s, *torch.autograd.grad((o, s), leaves, (do, ds)))))
    refs = [x[n].double().requires_grad_() for n in ("q", "k", "v", "g", "beta", "h0")]
    ro, rs = gdn_naive(*refs[:5], initial_state=refs[5])
    ref = dict(zip(NAMES, (ro, rs, *torch.autograd.grad((ro, rs), refs, (do.double(), ds.double())))))
    errs = {n: err_ratio(got[n].float(), ref[n]) for n in NAMES}
    bad = {n: e for n, e in errs.items() if not e <= TOLERANCE[name]}
    assert not bad, f"{name} T{t} norm {norm} seed {seed}: over {TOLERANCE[name]}: {bad} (all: {errs})"
