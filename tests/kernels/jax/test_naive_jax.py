"""naive-jax against naive-torch in fp64 (x64 enabled only inside each test)."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import FAST_COMPILE, cotangents, make_inputs, torch_reference
from lattnbench.kernels.jax import naive
from lattnbench.kernels.naive import torch_ref
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

CU = np.array([0, 1, 21, 34])  # three sequences of unequal length, one of length 1


def _jax64(fn, inputs, do, ds, **kw):
    """fp64 outputs and grads of a naive-jax function (x64 on for this call only)."""
    with jax.enable_x64(True):
        names = list(inputs)
        args = [jnp.asarray(inputs[nm], jnp.float64) for nm in names]
        kw = {key: (jnp.asarray(val, jnp.float64) if key in ("gamma", "g_gamma") else val) for key, val in kw.items()}

        @partial(jax.jit, compiler_options=FAST_COMPILE)
        def run(args, do, ds):
            (o, s), vjp = jax.vjp(lambda *a: fn(**dict(zip(names, a)), **kw), *args)
            return o, s, vjp((do, ds))

        o, s, grads = run(args, jnp.asarray(do), jnp.asarray(ds))
        assert o.dtype == jnp.float64 and s.dtype == jnp.float64
        out = {"o": np.asarray(o), "final_state": np.asarray(s)}
        out.update({"d" + nm: np.asarray(gr) for nm, gr in zip(names, grads)})
    assert jnp.ones(1).dtype == jnp.float32  # x64 did not leak
    return out


def _check(got, ref):
    errs = {key: err_ratio(got[key], ref[key]) for key in ref}
    assert all(val <= TOLERANCE["fp64"] for val in errs.values()), errs


@pytest.mark.parametrize("reverse,varlen", [(False, False), (True, True)])
def test_lightning_naive_matches_torch(reverse, varlen):
    h = 4
    inp = make_inputs(11, 1 if varlen else 2, 34, h, 2, 48, 80, n=3 if varlen else None)
    gamma = -np.random.default_rng(5).uniform(0.0, 0.4, h)
    do, ds = cotangents(11, inp["q"].shape[:3] + (80,), inp["initial_state"].shape)
    kw = dict(gamma=gamma, scale=0.3, reverse=reverse)
    if varlen:
        kw["cu_seqlens"] = CU
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, **dict(kw, gamma=torch.tensor(gamma)))
    _check(_jax64(naive.lightning_naive, inp, do, ds, **kw), ref)


@pytest.mark.parametrize("reverse,varlen", [(False, True), (True, False)])
def test_recurrent_naive_matches_torch(reverse, varlen):
    h = 4
    inp = make_inputs(12, 1 if varlen else 2, 34, h, 2, 48, 80, gates=("g", "gk", "gv"), n=3 if varlen else None)
    gamma = -np.random.default_rng(6).uniform(0.0, 0.4, h)
    do, ds = cotangents(12, inp["q"].shape[:3] + (80,), inp["initial_state"].shape)
    kw = dict(g_gamma=gamma, reverse=reverse)
    if varlen:
        kw["cu_seqlens"] = CU
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds, **dict(kw, g_gamma=torch.tensor(gamma)))
    _check(_jax64(naive.recurrent_naive, inp, do, ds, **kw), ref)


def test_naive_quadratic_equals_token_loop():
    """The two JAX references agree with each other (γ only, GQA, initial state, reverse)."""
    h = 4
    inp = make_inputs(13, 2, 29, h, 1, 24, 40)
    gamma = -np.random.default_rng(7).uniform(0.0, 0.4, h)
    do, ds = cotangents(13, inp["q"].shape[:3] + (40,), inp["initial_state"].shape)
    a = _jax64(naive.lightning_naive, inp, do, ds, gamma=gamma, reverse=True)
    b = _jax64(naive.recurrent_naive, inp, do, ds, g_gamma=gamma, reverse=True)
    _check(a, b)
    # the forward direction really is different (the comparison can fail)
    c = _jax64(naive.recurrent_naive, inp, do, ds, g_gamma=gamma, reverse=False)
    assert err_ratio(c["o"], a["o"]) > 0.1
