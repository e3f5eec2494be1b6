"""chunked_attention (Lightning-2 block-parallel form; Lightning and GLA) against the fp64 torch reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import assert_close, cotangents, jax_run, make_inputs, torch_reference
from lattnbench.kernels.jax.chunked import chunked_attention
from lattnbench.kernels.naive import torch_ref
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

CU = np.array([0, 17, 18, 45])  # three sequences of unequal length, one of length 1
H, HK, D, E = 4, 2, 48, 80      # GQA, non-power-of-two D != E


def _case(seed, dtype, varlen, gates, t=45, h0=True):
    b = 1 if varlen else 2
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype, gates=gates, h0=h0, n=3 if varlen else None)
    do, ds = cotangents(seed, (b, t, H, E), (3 if varlen else b, H, D, E))
    return inp, do, ds


def _gamma(seed=0):
    return -np.random.default_rng(seed).uniform(0.02, 0.5, H)


# chunk 8 with T = 45: a partial last chunk; group 2 makes the blocked scan span several groups
@pytest.mark.parametrize("dtype,reverse,scan", [
    ("fp32", False, "sequential"), ("fp32", True, "blocked"), ("bf16", False, "associative"),
    ("bf16", True, "sequential"),
])
def test_lightning_chunked_dense(dtype, reverse, scan):
    inp, do, ds = _case(31, dtype, False, ())
    gamma = _gamma(1)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(gamma), reverse=reverse)
    got = jax_run(chunked_attention, inp, do, ds, dtype, g_gamma=gamma, reverse=reverse,
                  chunk=8, scan=scan, group=2, lightning="autodiff")
    assert_close(got, ref, dtype)


# the Lightning tests below run the "autodiff" algorithm; test_lightning_vjp_jax.py runs the "vjp" one
# on these same options (test_vjp_varlen, test_vjp_no_decay_no_state_scale_chunk_over_t) and in depth
@pytest.mark.parametrize("dtype,reverse", [("fp32", False), ("bf16", True)])
def test_lightning_chunked_varlen(dtype, reverse):
    inp, do, ds = _case(32, dtype, True, ())
    gamma = _gamma(2)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(gamma),
                          reverse=reverse, cu_seqlens=CU)
    got = jax_run(chunked_attention, inp, do, ds, dtype, g_gamma=gamma, reverse=reverse,
                  cu_seqlens=CU, chunk=8, lightning="autodiff")
    assert_close(got, ref, dtype)


def test_lightning_chunked_no_decay_no_state_scale():
    """Plain linear attention (γ absent), no initial state, explicit scale, chunk > T."""
    inp, do, ds = _case(33, "fp32", False, (), t=21, h0=False)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, scale=0.7)
    got = jax_run(chunked_attention, inp, do, ds, "fp32", scale=0.7, chunk=64, lightning="autodiff")
    assert_close(got, ref, "fp32")


@pytest.mark.parametrize("dtype,reverse,varlen,scan", [
    ("fp32", False, False, "sequential"), ("fp32", True, False, "blocked"), ("fp32", True, True, "sequential"),
    ("bf16", False, False, "associative"), ("bf16", True, True, "sequential"),
])
def test_gla_chunked(dtype, reverse, varlen, scan):
    """GLA: data-dependent g [B,T,H,D] plus g_gamma; sub-blocks of 4 inside chunks of 16."""
    inp, do, ds = _case(34, dtype, varlen, ("g",))
    gamma = _gamma(3) * 0.2
    kw = dict(g_gamma=gamma, reverse=reverse)
    if varlen:
        kw["cu_seqlens"] = CU
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds, **dict(kw, g_gamma=torch.tensor(gamma)))
    got = jax_run(chunked_attention, inp, do, ds, dtype, chunk=16, sub=4, scan=scan, group=2, **kw)
    assert_close(got, ref, dtype)


def test_gla_chunked_strong_gates_stay_finite():
    """g down to -12 per token over chunks of 64: exp(-cumsum g) would overflow fp32 (e^700);
    the relative-reference scheme keeps every exponent ≤ 0 and matches the reference."""
    inp, do, ds = _case(35, "fp32", False, (), t=130)
    rng = np.random.default_rng(35)
    inp["g"] = -rng.uniform(1.0, 12.0, (2, 130, H, D)) * (rng.uniform(size=(2, 130, H, D)) < 0.5) \
        - rng.uniform(0.0, 0.3, (2, 130, H, D))
    inp["g"] = inp["g"].astype(np.float32).astype(np.float64)
    assert (np.cumsum(inp["g"][:, :64], axis=1).min()) < -100  # a naive exp(-G) would be inf
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds)
    got = jax_run(chunked_attention, inp, do, ds, "fp32", chunk=64, sub=16)
    assert_close(got, ref, "fp32")


def test_chunked_checks_can_fail():
    """A wrong direction or a wrong decay is caught by the same comparison."""
    inp, do, ds = _case(36, "bf16", False, ())
    gamma = _gamma(4)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(gamma))
    wrong_dir = jax_run(chunked_attention, inp, do, ds, "bf16", g_gamma=gamma, reverse=True, chunk=8,
                        lightning="autodiff")
    wrong_decay = jax_run(chunked_attention, inp, do, ds, "bf16", g_gamma=gamma * 1.1, chunk=8,
                          lightning="autodiff")
    for got in (wrong_dir, wrong_decay):
        errs = {key: err_ratio(got[key], ref[key]) for key in ref}
        assert max(errs.values()) > TOLERANCE["bf16"], errs


def test_chunked_bf16_inputs_fp32_outputs_where_promised():
    q = jnp.asarray(np.random.default_rng(7).standard_normal((1, 40, 2, 16)), jnp.bfloat16)
    o, s = jax.jit(chunked_attention, static_argnames=("chunk",))(q, q, q, g_gamma=-0.1 * jnp.ones(2), chunk=16)
    assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32 and o.shape == (1, 40, 2, 16)
    assert np.isfinite(np.asarray(o, np.float32)).all()
