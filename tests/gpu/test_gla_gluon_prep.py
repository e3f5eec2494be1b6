"""gla/triton's Gluon prep launch on the H200 against its Triton one: qd, kd, totals and scores, on
poisoned outputs, at D 64 and 128, bf16 and fp16, both orders, packed sequences, GQA, odd lengths and the gate norms of
fla's recipes (16, 1, 0.1)."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import ops as gops
from lattnbench.measure.tolerance import err_ratio

pytestmark = pytest.mark.gpu

CASES = [  # b, t, h, hkv, d, dtype, reverse, packed lengths or None, gate norm
    (2, 1024, 4, 4, 128, torch.bfloat16, False, None, 16.0),
    (2, 1000, 4, 2, 128, torch.bfloat16, True, None, 0.1),
    (1, 777, 4, 4, 64, torch.float16, False, None, 1.0),
    (1, 333, 2, 2, 64, torch.bfloat16, True, None, 1.0),
    (1, 700, 4, 4, 128, torch.float16, False, (100, 1, 599), 0.1),
    (1, 500, 2, 2, 128, torch.bfloat16, True, (64, 436), 16.0),
]


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every buffer the launches fully write starts as NaN: a row left unwritten fails."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(gops, "_empty", nan_empty)


def _scores64(q, k, g, reverse, lens, bt=64):
    """fp64 scores in the prep launch's layout [B, T, H, BT]: A[t, h, s − chunk start] =
    Σ_d q_td k_sd e^{B_td − B_sd} for s at or before t in processing order, else 0."""
    b, t, h, _ = q.shape
    kq = k.double().repeat_interleave(h // k.shape[2], 2)
    want = torch.zeros(b, t, h, bt, dtype=torch.float64, device=q.device)
    seqs = [(i, 0, t) for i in range(b)] if lens is None else \
        [(0, int(s), int(s + n)) for s, n in zip(torch.tensor([0, *lens]).cumsum(0)[:-1].tolist(), lens)]
    for i_b, bos, eos in seqs:
        order = torch.arange(bos, eos, device=q.device)
        order = order.flip(0) if reverse else order
        for i_c, rows in enumerate(order.split(bt)):
            start = eos - (i_c + 1) * bt if reverse else bos + i_c * bt
            B = g[i_b, rows].double().cumsum(0)
            n = len(rows)
            lower = (torch.arange(n, device=q.device)[None, :] <= torch.arange(n, device=q.device)[:, None])
            expo = torch.where(lower[:, :, None, None], B[:, None] - B[None, :], -torch.inf)
            pairs = torch.einsum("thd,shd,tshd->ths", q[i_b, rows].double(), kq[i_b, rows], expo.exp())
            want[i_b, rows[:, None], :, (rows - start)[None, :]] = pairs.permute(0, 2, 1)
    return want


def _gluon_and_triton_prep(monkeypatch, q, k, g, reverse, cu, n):
    """The prep launch's outputs from the Gluon launch, then from the Triton one (skips where the
    Gluon launch does not run)."""
    monkeypatch.setattr(host, "PREP_ON", True)
    reason = host.prep_reason(q, 64)
    if reason is not None:
        pytest.skip(reason)
    got = gops.gla_prep(q, k, g, reverse, cu, n)
    monkeypatch.setattr(host, "PREP_ON", False)
    return got, gops.gla_prep(q, k, g, reverse, cu, n)


VARIANTS = {  # OP16, PREFETCH, key slice (0: all of D), lanes a key channel, warp-specialized
    "tf32": (False, False, 0, 2, False), "fp16": (True, False, 0, 2, False),
    "fp16-prefetch": (True, True, 0, 2, False),
    "fp16-ks32": (True, False, 32, 4, False), "fp16-ks64": (True, False, 64, 2, False),
    "fp16-ws": (True, False, 0, 2, True), "fp16-ws-prefetch": (True, True, 0, 2, True),
    "fp16-ws-rl4-prefetch": (True, True, 0, 4, True), "fp16-rl4": (True, False, 0, 4, False),
    "fp16-rl8": (True, False, 0, 8, False),
}


def _form(monkeypatch, variant):
    op16, prefetch, ks, lanes, ws = VARIANTS[variant]
    # the warp-specialized kernel at 3 programs a row: each takes several chunks, so its ring's phases
    # turn over as at long sequences
    for name, value in dict(PREP_OP16=op16, PREP_PREFETCH=prefetch, PREP_KS=ks,
                            ROW_LANES=lanes, PREP_WS=ws, PREP_WS_PROGRAMS=3).items():
        monkeypatch.setattr(host, name, value)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("b,t,h,hkv,d,dtype,reverse,lens,norm", CASES,
                         ids=[f"T{c[1]}-D{c[4]}-{str(c[5])[6:]}-{'rev' if c[6] else 'fwd'}"
                              f"{'-varlen' if c[7] else ''}-norm{c[8]:g}" for c in CASES])
def test_the_gluon_prep_launch_matches_the_triton_one(monkeypatch, b, t, h, hkv, d, dtype, reverse, lens, norm,
                                                      variant):
    """qd, kd and the totals as the Triton launch makes them; the scores too with tf32 products, and
    with fp16 ones no further from fp64 than the Triton launch's tf32 products are."""
    _form(monkeypatch, variant)
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))
    q = torch.randn(b, t, h, d, generator=gen, device="cuda").to(dtype)
    k = (torch.randn(b, t, hkv, d, generator=gen, device="cuda") * d**-0.5).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, d, generator=gen, device="cuda")) / norm
    cu = None if lens is None else torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32,
                                                device="cuda")
    n = b if cu is None else len(lens)
    got, want = _gluon_and_triton_prep(monkeypatch, q, k, g, reverse, cu, n)
    bl_used = want[2][~torch.isnan(want[2])]
    # both cumulate the same fp32 gates in another order, so an exponent such as Bl − B differs by
    # about an ulp of the chunk's depth |Bl|, and a factor e^x by that relative error: 6e-5 at the
    # ~500 of gate norm 0.1, under 1e-6 at norm 16
    order = torch.finfo(torch.float32).eps * bl_used.abs().max().item()
    for name, x, y in zip(("qd", "kd", "bl", "A"), got, want):
        if name == "bl":  # slots no chunk uses stay NaN in both
            x, y = x[~torch.isnan(y)], y[~torch.isnan(y)]
        assert torch.isfinite(x).all(), name
        if name == "A" and variant != "tf32":
            # fp16 operands round where tf32 ones truncate, to the same 10 bits: judged against fp64
            a64 = _scores64(q, k, g, reverse, lens)
            assert err_ratio(x, a64) <= 1.25 * err_ratio(y, a64), (err_ratio(x, a64), err_ratio(y, a64))
            continue
        # both sum the same fp32 terms and tf32 products, in another order: fp32 outputs agree to
        # that order, 16-bit ones but for rare last-bit flips where the fp32 value sits on a
        # rounding boundary
        tol = max(2e-5, order) if x.dtype == torch.float32 else 0.05 * torch.finfo(x.dtype).eps
        assert err_ratio(x, y) <= tol, (name, err_ratio(x, y))


@pytest.mark.parametrize("variant", ["fp16", "fp16-prefetch", "fp16-ks32", "fp16-ws",
                                     "fp16-ws-prefetch"])
def test_fp16_operands_hold_bf16_inputs_past_the_fp16_range(monkeypatch, variant):
    """bf16 q around 1e6 and k around 1e-6 (their products past fp16's range and below its normal
    one), some rows all zero: the per-row power-of-two scales keep every level operand in range, so
    the scores are as close to fp64 as the Triton launch's tf32 ones, and qd, kd equal its own."""
    _form(monkeypatch, variant)
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))
    b, t, h, d = 2, 300, 4, 128
    q = (torch.randn(b, t, h, d, generator=gen, device="cuda") * 1e6).to(torch.bfloat16)
    k = (torch.randn(b, t, h, d, generator=gen, device="cuda") * 1e-6).to(torch.bfloat16)
    q[:, 7], k[:, 70] = 0, 0
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, d, generator=gen, device="cuda"))
    got, want = _gluon_and_triton_prep(monkeypatch, q, k, g, False, None, b)
    for name, x, y in zip(("qd", "kd"), got, want):
        assert err_ratio(x, y) <= 0.05 * torch.finfo(x.dtype).eps, (name, err_ratio(x, y))
    a64 = _scores64(q, k, g, False, None)
    assert torch.isfinite(got[3]).all()
    assert err_ratio(got[3], a64) <= 1.25 * err_ratio(want[3], a64), (err_ratio(got[3], a64), err_ratio(want[3], a64))
