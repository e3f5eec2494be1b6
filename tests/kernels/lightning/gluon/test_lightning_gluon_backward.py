"""The Lightning backward as three forward passes (``backward.backward_by_forwards``) on the CPU,
against torch autograd through the fp64 quadratic reference.

Two forwards stand in for the Gluon one, which has the same contract: the fp64 quadratic
reference, where the algebra must hold to rounding, and the Triton kernel's forward in the
interpreter (fp32, its outputs NaN-poisoned), which starts a reversed call from its initial state
the way the Gluon kernel does. Decays cover none, mild, the seeds' strongest and heads past
``LOG_DECAY_FLOOR``, where the last-token correction carries dS_T.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.lightning.gluon import end_terms
from lattnbench.kernels.lightning.gluon.backward import (LOG_DECAY_FLOOR, backward_by_forwards, end_terms_torch,
                                                         with_start_states)
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import ops as tops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

GAMMAS = [0.0, -0.05, -8.0, LOG_DECAY_FLOOR - 10.0]  # one head each: none, mild, strong, past the floor


@with_start_states
def _naive_fwd(q, k, v, g, scale, h0, reverse, store_ht):
    o, s = lightning_naive(q, k, v, g, scale, h0, reverse)
    return o, (s if store_ht else None)


@with_start_states
def _triton_fwd(q, k, v, g, scale, h0, reverse, store_ht):
    return tops.lightning_fwd(q, k, v, g, scale, h0, reverse, None, store_ht, q.shape[0])


def _problem(seed, t, d, e, with_h0, with_dht, dtype):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64)
    b, h = 2, len(GAMMAS)
    x = dict(q=rnd(b, t, h, d), k=rnd(b, t, h, d), v=rnd(b, t, h, e), do=rnd(b, t, h, e),
             h0=rnd(b, h, d, e) if with_h0 else None, dht=rnd(b, h, d, e) if with_dht else None)
    x = {n: (None if a is None else a.to(dtype).double()) for n, a in x.items()}  # values the kernel dtype holds
    return x, torch.tensor(GAMMAS, dtype=torch.float64)


def _reference(x, gamma, scale, reverse):
    leaves = {n: x[n].clone().requires_grad_(True) for n in ("q", "k", "v", "h0") if x[n] is not None}
    o, s = lightning_naive(leaves["q"], leaves["k"], leaves["v"], gamma, scale, leaves.get("h0"), reverse)
    loss = (o * x["do"]).sum() + ((s * x["dht"]).sum() if x["dht"] is not None else 0.0)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return dict(zip(("dq", "dk", "dv", "dh0"), grads))


CASES = [  # t, d, e, h0, dS_T
    (1, 8, 8, True, True),       # one token: the correction and λ^T·w·dS_T carry everything
    (5, 8, 16, True, True),      # D ≠ E
    (37, 16, 8, False, True),    # E < D, no initial state
    (37, 8, 8, True, False),     # no gradient into the final state
    (64, 16, 16, False, False),  # whole chunks only
]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("t,d,e,h0,dht", CASES, ids=[f"T{c[0]}-D{c[1]}E{c[2]}{'-h0' if c[3] else ''}"
                                                     f"{'-dST' if c[4] else ''}" for c in CASES])
def test_three_reference_forwards_give_the_exact_gradients(t, d, e, h0, dht, reverse):
    x, gamma = _problem(t * 7 + d, t, d, e, h0, dht, torch.float64)
    scale = d**-0.5
    want = _reference(x, gamma, scale, reverse)
    dq, dk, dv, dh0 = backward_by_forwards(_naive_fwd, x["q"], x["k"], x["v"], x["do"], x["dht"], gamma, scale,
                                           x["h0"], reverse, want_dh0=h0)
    got = {"dq": dq, "dk": dk, "dv": dv, **({"dh0": dh0} if h0 else {})}
    assert (dh0 is None) == (not h0)
    errors = {n: err_ratio(got[n], want[n]) for n in got}
    assert all(err <= 1e-12 for err in errors.values()), errors


@pytest.fixture
def poisoned(monkeypatch):
    """The Triton forward's outputs start as NaN: a row it leaves unwritten fails."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(tops, "_empty", nan_empty)
    monkeypatch.setattr(end_terms, "_empty", nan_empty)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("t,d,e,h0,dht", CASES[:3], ids=["T1", "T5-DneE", "T37"])
def test_three_triton_forwards_match_the_fp64_gradients(poisoned, t, d, e, h0, dht, reverse):
    """The GPU's composition but for the passes (the Triton forward here): the end terms as their
    Triton launch."""
    x, gamma = _problem(t * 11 + e, t, d, e, h0, dht, torch.float32)
    scale = d**-0.5
    want = _reference(x, gamma, scale, reverse)
    f32 = {n: (None if a is None else a.float().contiguous()) for n, a in x.items()}
    dq, dk, dv, dh0 = backward_by_forwards(_triton_fwd, f32["q"], f32["k"], f32["v"], f32["do"], f32["dht"],
                                           gamma.float(), scale, f32["h0"], reverse, want_dh0=h0,
                                           end=end_terms.end_terms)
    got = {"dq": dq, "dk": dk, "dv": dv, **({"dh0": dh0} if h0 else {})}
    errors = {n: err_ratio(got[n], want[n]) for n in got}
    assert all(err <= TOLERANCE["fp32"] for err in errors.values()), errors


@pytest.mark.parametrize("with_dh0", [True, False], ids=["dh0", "no-dh0"])
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("d,e", [(48, 80), (64, 64)], ids=["D48E80", "D64E64"])
def test_end_term_launch_matches_its_torch_form(poisoned, d, e, grad_dtype, with_dh0):
    """The Triton launch against the torch calls it replaces (in fp64), at dims that are not one
    tile (masks, two row tiles), with dk, dv in bf16 (read, added to, rounded once), both ends;
    without dS_0 to make, the heads above the floor return early and only the last one moves."""
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    b, t = 2, 9
    gamma = torch.tensor(GAMMAS, dtype=torch.float32)
    h = len(GAMMAS)

    def rnd(*s, dtype=torch.float32):
        return torch.randn(*s, generator=gen).to(dtype)
    dht, s_end = rnd(b, h, d, e), rnd(b, h, d, e)
    s_end = s_end if with_dh0 else None
    k, v = rnd(b, t, h, d, dtype=grad_dtype), rnd(b, t, h, e, dtype=grad_dtype)
    dk, dv = rnd(b, t, h, d, dtype=grad_dtype), rnd(b, t, h, e, dtype=grad_dtype)
    scale = float(torch.rand((), generator=gen)) + 0.1
    f64 = {n: None if a is None else a.double() for n, a in dict(dht=dht, s_end=s_end, k=k, v=v, dk=dk, dv=dv).items()}
    for last in (0, t - 1):
        want_dk, want_dv = f64["dk"].clone(), f64["dv"].clone()
        want_dh0 = end_terms_torch(f64["dht"], f64["k"], f64["v"], want_dk, want_dv, f64["s_end"], gamma.double(),
                                   scale, LOG_DECAY_FLOOR, last)
        got_dk, got_dv = dk.clone(), dv.clone()
        got_dh0 = end_terms.end_terms(dht, k, v, got_dk, got_dv, s_end, gamma, scale, LOG_DECAY_FLOOR, last)
        if with_dh0:
            assert err_ratio(got_dh0, want_dh0) <= 1e-6
        else:
            assert got_dh0 is None and want_dh0 is None
        rows = [r for r in range(t) if r != last]
        assert torch.equal(got_dk[:, rows], dk[:, rows]) and torch.equal(got_dv[:, rows], dv[:, rows])
        # one rounding of the sum to bf16: at most 2^-8 of each value, rounding to nearest (on the GPU,
        # and in the interpreter through interpreter_bf16)
        tol = 1e-6 if grad_dtype == torch.float32 else 2.0**-8
        assert err_ratio(got_dk[:, last], want_dk[:, last]) <= tol
        assert err_ratio(got_dv[:, last], want_dv[:, last]) <= tol
        # a head past the floor is corrected: its row moved by more than the rounding
        assert err_ratio(got_dk[:, last, -1], dk[:, last, -1]) > 0.01
        # the heads above it are not: their rows keep their bits
        assert torch.equal(got_dk[:, last, :-1], dk[:, last, :-1]) and torch.equal(got_dv[:, last, :-1], dv[:, last, :-1])
    if with_dh0:
        dh0_alone = end_terms.end_terms(None, k, v, dk, dv, s_end, gamma, scale, LOG_DECAY_FLOOR, 0)
        assert err_ratio(dh0_alone, f64["s_end"] * (scale * torch.exp(gamma.double()))[:, None, None]) <= 1e-6
    assert end_terms.end_terms(None, k, v, dk, dv, None, gamma, scale, LOG_DECAY_FLOOR, 0) is None


def test_without_the_last_token_correction_a_head_past_the_floor_is_wrong(monkeypatch):
    """The correction is what carries dS_T into the last token of a head past the floor."""
    from lattnbench.kernels.lightning.gluon import backward

    class NoCorrection:  # torch, but the correction's einsums give nothing
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def einsum(equation, *operands):
            return torch.zeros((), dtype=operands[0].dtype)

    x, gamma = _problem(3, 5, 8, 8, True, True, torch.float64)
    want = _reference(x, gamma, 8**-0.5, False)
    monkeypatch.setattr(backward, "torch", NoCorrection())
    _, dk, dv, _ = backward_by_forwards(_naive_fwd, x["q"], x["k"], x["v"], x["do"], x["dht"], gamma, 8**-0.5,
                                        x["h0"], False, want_dh0=True)
    past = len(GAMMAS) - 1
    for got, ref in ((dk, want["dk"]), (dv, want["dv"])):
        assert err_ratio(got[:, -1, past], ref[:, -1, past]) > 0.1
        assert err_ratio(got[:, -1, :past], ref[:, -1, :past]) <= 1e-12  # the other heads need none
        assert err_ratio(got[:, :-1], ref[:, :-1]) <= 1e-8  # earlier tokens miss at most λ ≤ 2e-9 of it
