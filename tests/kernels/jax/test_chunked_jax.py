"""chunked_attention's GLA form (Lightning-2 block-parallel, data-dependent g) against the fp64 torch reference;
its Lightning form is tested in test_lightning_chunked_jax.py."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import assert_close, cotangents, jax_run, make_inputs, torch_reference
from lattnbench.kernels.jax.chunked import chunked_attention
from lattnbench.kernels.naive import torch_ref
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

# fresh draws each run; GLA_TEST_SEED=<the failing run's> repeats one
SEED = int(os.environ.get("GLA_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
CU = np.array([0, 17, 18, 45])  # three sequences of unequal length, one of length 1
H, HK, D, E = 4, 2, 48, 80      # GQA, non-power-of-two D != E


def _case(seed, dtype, varlen, gates, t=45, h0=True):
    b = 1 if varlen else 2
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype, gates=gates, h0=h0, n=3 if varlen else None)
    do, ds = cotangents(seed, (b, t, H, E), (3 if varlen else b, H, D, E))
    return inp, do, ds


def _gamma(seed=0):
    return -np.random.default_rng(seed).uniform(0.02, 0.5, H)


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


@pytest.mark.parametrize("norm", [0.1, 1.0])
def test_gla_chunked_fp32_gradients_at_flas_gate_recipes(norm):
    """fla's GLA tests draw g = logsigmoid(x) / norm with norm down to 0.1: a chunk's cumulative gate
    then reaches hundreds, which fp32 rounds by ~1e-5. Every gradient, dg the most sensitive, stays
    within a tenth of the fp32 tolerance (differences of plain fp32 cumulative sums gave dg 1.1e-5 at
    norm 0.1 and 1.4e-6 at norm 1)."""
    seed = (SEED + int(norm * 10)) % 2**32
    rng = np.random.default_rng(seed)
    b, t = 2, 150                                         # two chunks of 64 and a padded one
    f32 = lambda x: x.astype(np.float32).astype(np.float64)  # noqa: E731
    inp = {"q": f32(rng.standard_normal((b, t, H, D))), "k": f32(rng.standard_normal((b, t, HK, D))),
           "v": f32(rng.standard_normal((b, t, HK, E))),
           "g": f32(-np.logaddexp(0.0, -rng.standard_normal((b, t, H, D))) / norm),
           "initial_state": f32(rng.standard_normal((b, H, D, E)))}
    do, ds = cotangents(seed, (b, t, H, E), (b, H, D, E))
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds)
    got = jax_run(chunked_attention, inp, do, ds, "fp32")
    errs = {key: err_ratio(got[key], ref[key]) for key in ref}
    assert max(errs.values()) <= TOLERANCE["fp32"] / 10, f"GLA_TEST_SEED={SEED}: {errs}"


def test_gla_chunked_checks_can_fail():
    """A wrong direction or wrong gates are caught by the same comparison."""
    inp, do, ds = _case(36, "bf16", False, ("g",))
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds)
    wrong_dir = jax_run(chunked_attention, inp, do, ds, "bf16", reverse=True, chunk=16, sub=4)
    scaled = dict(inp, g=inp["g"] * 1.1)
    wrong_gates = jax_run(chunked_attention, scaled, do, ds, "bf16", chunk=16, sub=4)
    for got in (wrong_dir, wrong_gates):
        errs = {key: err_ratio(got[key], ref[key]) for key in ("o", "final_state", "dq", "dk", "dv")}
        assert max(errs.values()) > TOLERANCE["bf16"], errs


def test_chunked_bf16_inputs_fp32_outputs_where_promised():
    q = jnp.asarray(np.random.default_rng(7).standard_normal((1, 40, 2, 16)), jnp.bfloat16)
    o, s = jax.jit(chunked_attention, static_argnames=("chunk",))(q, q, q, g_gamma=-0.1 * jnp.ones(2), chunk=16)
    assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32 and o.shape == (1, 40, 2, 16)
    assert np.isfinite(np.asarray(o, np.float32)).all()
