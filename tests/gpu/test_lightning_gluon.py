"""lightning/gluon on the H200: the Gluon forward and its backward against the fp64 quadratic
reference, over odd T, D ≠ E, GQA, reverse, an initial state and strong decay, with the outputs
poisoned (NaN) before the kernels write them; plus the fallback rule on the device.

Each case first asserts that the call takes the Gluon forward (``gluon_path`` is None) and which
backward its gradients come from (``gluon_backward_path``), so a silent fallback to the Triton
kernel cannot pass for the Gluon kernel. The backward is three Gluon forward passes only with
``LIGHTNING_GLUON_BACKWARD=1`` (bf16, no grouped heads): run the file under it too.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gluon.lightning import gluon_backward_path, gluon_path, lightning_attn_gluon
from lattnbench.kernels.gluon.lightning import configs as gcfg
from lattnbench.kernels.gluon.lightning import ops as gops
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.triton.lightning import lightning_attn_triton
from lattnbench.kernels.triton.lightning import ops as tops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

pytestmark = pytest.mark.gpu

DEV = "cuda"


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every buffer the kernels fully write starts as NaN: a row left unwritten fails."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(gops, "_empty", nan_empty)
    monkeypatch.setattr(tops, "_empty", nan_empty)
    if gops.device_reason(torch.device(DEV)) is not None:
        pytest.skip(gops.device_reason(torch.device(DEV)))


def _draw(seed, b, t, h, hkv, d, e, dtype, h0):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def rnd(*s, dt=dtype):
        return torch.randn(*s, generator=g, device=DEV, dtype=torch.float32).to(dt)
    x = dict(q=rnd(b, t, h, d), k=rnd(b, t, hkv, d), v=rnd(b, t, hkv, e), do=rnd(b, t, h, e),
             ds=rnd(b, h, d, e, dt=torch.float32))
    x["h0"] = rnd(b, h, d, e, dt=torch.float32) if h0 else None
    return x


CASES = [  # b, t, h, hkv, d, e, reverse, h0, strong decay
    (2, 64, 2, 2, 64, 64, False, False, False),
    (2, 1000, 4, 4, 128, 128, False, True, False),     # odd T: a partial last chunk
    (1, 333, 4, 2, 128, 64, False, True, False),       # GQA, D ≠ E
    (2, 517, 4, 1, 64, 128, True, True, False),        # reverse: the partial chunk processed first
    (1, 4096, 8, 8, 128, 128, False, False, True),     # strong decay: λ^64 underflows
    (1, 130, 2, 2, 128, 128, True, False, True),
    (2, 520, 4, 4, 64, 64, True, True, False),
    (1, 64, 2, 2, 128, 128, True, True, True),         # reverse, one full chunk
    (1, 40, 2, 2, 64, 64, True, False, False),         # reverse, one partial chunk
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("b,t,h,hkv,d,e,reverse,h0,strong", CASES,
                         ids=[f"T{c[1]}-{'reverse' if c[6] else 'forward'}" for c in CASES])
def test_gluon_forward_and_its_gradients_match_the_fp64_reference(b, t, h, hkv, d, e, reverse, h0, strong, dtype):
    x = _draw(t + d, b, t, h, hkv, d, e, dtype, h0)
    assert gluon_path(x["q"], x["v"]) is None
    on_gluon = (gcfg.BACKWARD_ON_GLUON and dtype == torch.bfloat16 and h == hkv
                and (gcfg.BACKWARD_MODE == "1" or b * t * h >= gcfg.GLUON_BACKWARD_MIN_ROWS))
    assert (gluon_backward_path(x["q"], x["k"]) is None) == on_gluon
    gamma = (-torch.linspace(2.0, 8.0, h) if strong else -torch.linspace(0.01, 0.5, h)).to(DEV)
    leaves = {n: x[n].clone().requires_grad_(True) for n in ("q", "k", "v", "h0") if x[n] is not None}
    o, st = lightning_attn_gluon(leaves["q"], leaves["k"], leaves["v"], gamma=gamma,
                                 initial_state=leaves.get("h0"), reverse=reverse)
    grads = torch.autograd.grad((o, st), list(leaves.values()), (x["do"], x["ds"]))
    ref_leaves = {n: t_.detach().double().requires_grad_(True) for n, t_ in leaves.items()}
    ro, rst = lightning_naive(ref_leaves["q"], ref_leaves["k"], ref_leaves["v"], gamma.double(),
                              None, ref_leaves.get("h0"), reverse)
    rgrads = torch.autograd.grad((ro, rst), list(ref_leaves.values()), (x["do"].double(), x["ds"].double()))
    tol = TOLERANCE["bf16" if dtype == torch.bfloat16 else "fp16"]
    errs = {"o": err_ratio(o, ro), "final_state": err_ratio(st, rst)}
    errs.update({f"d{n}": err_ratio(gr, rg) for n, gr, rg in zip(leaves, grads, rgrads)})
    assert all(err <= tol for err in errs.values()), errs


def test_no_grad_forward_matches_the_triton_forward_closely():
    """The same forward by both kernels, no autograd: both within the bf16 tolerance of each other
    (they round differently: Q·diag(λ^(p+1)) is rounded to bf16 before Q·S here)."""
    x = _draw(5, 4, 2048, 8, 8, 128, 128, torch.bfloat16, True)
    gamma = -torch.linspace(0.05, 1.0, 8, device=DEV)
    with torch.no_grad():
        o, st = lightning_attn_gluon(x["q"], x["k"], x["v"], gamma=gamma, initial_state=x["h0"])
        to, tst = lightning_attn_triton(x["q"], x["k"], x["v"], gamma=gamma, initial_state=x["h0"])
    assert err_ratio(o, to) <= TOLERANCE["bf16"] and err_ratio(st, tst) <= TOLERANCE["bf16"]


def test_calls_the_gluon_forward_does_not_take_run_the_triton_kernel():
    x = _draw(9, 1, 300, 4, 4, 64, 64, torch.bfloat16, False)
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device=DEV)
    assert "varlen" in gluon_path(x["q"], x["v"], cu)
    got = lightning_attn_gluon(x["q"], x["k"], x["v"], cu_seqlens=cu)
    want = lightning_attn_triton(x["q"], x["k"], x["v"], cu_seqlens=cu)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
