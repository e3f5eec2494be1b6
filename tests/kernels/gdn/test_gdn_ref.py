"""The gated delta rule's token loop against its closed form (explicit transition products), fp64.

Inputs are drawn afresh every run; a failure names the seed, and GDN_TEST_SEED=<seed> replays it.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import torch

from lattnbench.kernels.gdn.naive import gdn_closed_form, gdn_naive, l2_normalize
from lattnbench.measure.tolerance import err_ratio

BASE_SEED = int(os.environ.get("GDN_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
TIGHT = 1e-12  # two fp64 formulations of the same map: rounding only


@pytest.fixture
def rng(request):
    return np.random.default_rng((BASE_SEED + zlib.crc32(request.node.name.encode())) % 2**32)


def _inputs(rng, b, t, h, hk, d, e, norm, n=None, h0=True):
    """fp64 leaves: q, L2-normalised k, v, g = logsigmoid(x)/norm, beta = sigmoid(x), h0."""
    x = lambda *s: torch.from_numpy(rng.standard_normal(s))  # noqa: E731
    inp = {"q": x(b, t, h, d), "k": l2_normalize(x(b, t, hk, d)), "v": x(b, t, hk, e),
           "g": torch.nn.functional.logsigmoid(x(b, t, h)) / norm, "beta": torch.sigmoid(x(b, t, h))}
    if h0:
        inp["initial_state"] = x(n or b, h, d, e)
    return {name: val.requires_grad_() for name, val in inp.items()}


def _outputs_and_grads(fn, inp, do, ds, **kw):
    o, s = fn(**inp, **kw)
    grads = torch.autograd.grad((o, s), list(inp.values()), (do, ds))
    return {"o": o, "final_state": s, **{"d" + name: gr for name, gr in zip(inp, grads)}}


def _check(got, want):
    errs = {key: err_ratio(got[key], want[key]) for key in want}
    assert all(val <= TIGHT for val in errs.values()), f"GDN_TEST_SEED={BASE_SEED}: {errs}"


@pytest.mark.parametrize("norm", [0.1, 1.0])
@pytest.mark.parametrize("with_h0", [False, True])
def test_loop_matches_closed_form(rng, norm, with_h0):
    """GQA, D != E, an explicit scale; o, S_T and every gradient (q, k, v, g, beta, h0)."""
    b, t, h, hk, d, e = 2, 7, 4, 2, 3, 5
    inp = _inputs(rng, b, t, h, hk, d, e, norm, h0=with_h0)
    do, ds = torch.from_numpy(rng.standard_normal((b, t, h, e))), torch.from_numpy(rng.standard_normal((b, h, d, e)))
    scale = float(rng.uniform(0.2, 2.0))
    _check(_outputs_and_grads(gdn_naive, inp, do, ds, scale=scale),
           _outputs_and_grads(gdn_closed_form, inp, do, ds, scale=scale))


def test_varlen_loop_matches_closed_form(rng):
    """Packed sequences, one empty and one of length 1: the state restarts from each h0."""
    cu = [0, 3, 3, 4, 9]
    inp = _inputs(rng, 1, 9, 2, 1, 4, 3, 1.0, n=4)
    do, ds = torch.from_numpy(rng.standard_normal((1, 9, 2, 3))), torch.from_numpy(rng.standard_normal((4, 2, 4, 3)))
    got = _outputs_and_grads(gdn_naive, inp, do, ds, cu_seqlens=cu)
    _check(got, _outputs_and_grads(gdn_closed_form, inp, do, ds, cu_seqlens=cu))
    # the empty sequence hands its initial state straight through
    torch.testing.assert_close(got["final_state"][1], inp["initial_state"][1], rtol=0, atol=0)


def test_one_step_by_hand(rng):
    """One token, one head: S_1 = α (I − β k kᵀ) S_0 + β k vᵀ, o = scale·S_1ᵀ q, written out."""
    d, e = 3, 2
    inp = {key: val.detach() for key, val in _inputs(rng, 1, 1, 1, 1, d, e, 1.0).items()}
    q, k, v = inp["q"][0, 0, 0], inp["k"][0, 0, 0], inp["v"][0, 0, 0]
    a, bt, s0 = torch.exp(inp["g"][0, 0, 0]), inp["beta"][0, 0, 0], inp["initial_state"][0, 0]
    s1 = a * (torch.eye(d, dtype=torch.float64) - bt * torch.outer(k, k)) @ s0 + bt * torch.outer(k, v)
    o, s = gdn_naive(**inp, scale=0.5)
    torch.testing.assert_close(s[0, 0], s1, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(o[0, 0, 0], 0.5 * s1.T @ q, rtol=1e-14, atol=1e-14)


def test_dtypes_and_options(rng):
    """fp32 / bf16 inputs compute in fp32 (o in the input dtype, S_T fp32); the final state is optional;
    the default scale is D^-1/2."""
    inp = {key: val.detach() for key, val in _inputs(rng, 1, 5, 2, 2, 4, 3, 1.0).items()}
    o64, s64 = gdn_naive(**inp)
    o_s, _ = gdn_naive(**inp, scale=4**-0.5)
    torch.testing.assert_close(o64, o_s, rtol=0, atol=0)
    low = {key: (val if key == "initial_state" else val.to(torch.bfloat16)) for key, val in inp.items()}
    o, s = gdn_naive(**low)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert gdn_naive(**inp, output_final_state=False)[1] is None


def test_bad_gates_raise(rng):
    inp = {key: val.detach() for key, val in _inputs(rng, 1, 5, 2, 2, 4, 3, 1.0).items()}
    with pytest.raises(ValueError, match=r"g must be \[B, T, H\]"):
        gdn_naive(**dict(inp, g=inp["g"][..., None]))
    with pytest.raises(ValueError, match=r"beta must be \[B, T, H\]"):
        gdn_closed_form(**dict(inp, beta=inp["beta"][:, :4]))
