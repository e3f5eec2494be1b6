"""recurrent_attention (lax.scan + chunk-checkpointed custom VJP) against the fp64 torch reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import assert_close, cotangents, jax_run, make_inputs, torch_reference
from lattnbench.kernels.jax.naive import recurrent_naive
from lattnbench.kernels.jax.recurrent import recurrent_attention, residual_bytes
from lattnbench.kernels.naive import torch_ref

CU = np.array([0, 13, 14, 37])  # three sequences of unequal length, one of length 1
H, HK, D, E = 4, 2, 48, 80      # GQA, non-power-of-two D != E


def _case(seed, dtype, varlen, gates, h0=True, t=37):
    b = 1 if varlen else 2
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype, gates=gates, h0=h0, n=3 if varlen else None)
    s_shape = (3 if varlen else b, H, D, E)
    do, ds = cotangents(seed, (b, t, H, E), s_shape)
    return inp, do, ds


@pytest.mark.parametrize("dtype,reverse,varlen", [
    ("fp32", False, False), ("fp32", False, True), ("fp32", True, True), ("bf16", False, False),
    ("bf16", True, True),
])
def test_recurrent_all_gates(dtype, reverse, varlen):
    """g, gk, gv and g_gamma together; every gradient incl. h0; T = 37 not a multiple of the chunk."""
    inp, do, ds = _case(21, dtype, varlen, ("g", "gk", "gv"))
    gamma = -np.random.default_rng(1).uniform(0.0, 0.3, H)
    kw = dict(g_gamma=gamma, reverse=reverse, scale=0.2)
    if varlen:
        kw["cu_seqlens"] = CU
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds, **dict(kw, g_gamma=torch.tensor(gamma)))
    got = jax_run(recurrent_attention, inp, do, ds, dtype, chunk=8, **kw)
    assert_close(got, ref, dtype)


@pytest.mark.parametrize("gates,gamma", [((), False), ((), True), (("g",), False), (("gv",), True)])
def test_recurrent_gate_subsets(gates, gamma):
    """Each decay path on its own (none, γ only = Lightning, g only = GLA, gv with γ); no h0."""
    inp, do, ds = _case(22, "fp32", False, gates, h0=False, t=20)
    kw = {}
    if gamma:
        kw["g_gamma"] = -np.random.default_rng(2).uniform(0.0, 0.3, H)
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds,
                          **{key: torch.tensor(val) for key, val in kw.items()})
    got = jax_run(recurrent_attention, inp, do, ds, "fp32", chunk=6, **kw)
    assert_close(got, ref, "fp32")


def test_recurrent_residuals_are_chunk_states():
    """The VJP keeps T/chunk states, not T: residual bytes ≈ inputs + (T/chunk) states."""
    b, t, h, d = 1, 512, 2, 32
    rng = np.random.default_rng(3)
    q, k, v = (jnp.asarray(rng.standard_normal((b, t, h, d)), jnp.float32) for _ in range(3))
    state_bytes = b * h * d * d * 4
    inputs_bytes = 3 * q.size * 4
    for chunk in (16, 64):
        res = residual_bytes(q, k, v, chunk=chunk, g_gamma=-0.1 * jnp.arange(h, dtype=jnp.float32))
        n_states = (res - inputs_bytes) / state_bytes
        assert t // chunk <= n_states <= t // chunk + 4, (chunk, n_states)
        assert res < t * state_bytes / 4  # storing every state would be 4x+ larger than all residuals
    # and the compiled gradient's temporaries stay far below T states
    def loss(q, k, v):
        o, s = recurrent_attention(q, k, v, chunk=64)
        return (o * o).sum() + s.sum()

    def loss_naive(q, k, v):  # plain autodiff of a token scan stores every state
        o, s = recurrent_naive(q, k, v)
        return (o * o).sum() + s.sum()

    def temp(f):
        mem = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(q, k, v).compile().memory_analysis()
        return None if mem is None else mem.temp_size_in_bytes

    ours, plain = temp(loss), temp(loss_naive)
    if ours is not None:
        assert plain > t * state_bytes > 2 * ours, (ours, plain)


def _alibi_state_error(monkeypatch, bias_ulps: float, plain: bool) -> float:
    """fp32 final-state error of the recurrence at T=1000 (ALiBi slopes, h0) against fp64, with
    exp(γ) and expm1(γ) rounded ``bias_ulps`` ulps off; ``plain``: λ as one fp32 number."""
    import importlib

    from lattnbench.kernels.decay import alibi_decay
    from lattnbench.measure.tolerance import err_ratio

    rec = importlib.import_module("lattnbench.kernels.jax.recurrent")  # the package's name is a function
    off = 1 + bias_ulps * 2.0**-23
    monkeypatch.setattr(rec, "_exp", lambda x: jnp.exp(x) * off)
    monkeypatch.setattr(rec, "_expm1", lambda x: jnp.expm1(x) * off)
    if plain:
        monkeypatch.setattr(rec, "_decay", lambda lk, lv, gamma, val: (rec._exp(gamma * val)[None, :, None, None], None))
    rng = np.random.default_rng(11)
    b, t, h, d = 1, 1000, 4, 32
    q, k, v = (rng.standard_normal((b, t, h, d)).astype(np.float32) for _ in range(3))
    h0 = rng.standard_normal((b, h, d, d)).astype(np.float32)
    gamma = np.asarray(alibi_decay(h), np.float32)
    _, final = rec.recurrent_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), g_gamma=jnp.asarray(gamma),
                                       initial_state=jnp.asarray(h0))
    _, ref = torch_ref.lightning_naive(*(torch.from_numpy(x).double() for x in (q, k, v)),
                                       torch.from_numpy(gamma).double(), None, torch.from_numpy(h0).double(), False)
    return float(err_ratio(torch.from_numpy(np.asarray(final)), ref))


def test_the_decay_pair_cancels_an_exp_that_is_ulps_off(monkeypatch):
    """A per-head λ is the same rounded number at every token: its error grows with T, unless the
    recurrence holds λ as a pair that is exact well past fp32."""
    with monkeypatch.context() as m:
        clean = _alibi_state_error(m, 0, plain=False)
    with monkeypatch.context() as m:
        biased_plain = _alibi_state_error(m, 2, plain=True)
    with monkeypatch.context() as m:
        biased_pair = _alibi_state_error(m, 2, plain=False)
    assert biased_plain > 1e-5 > clean           # 2 ulps of bias alone fail the fp32 tolerance
    assert biased_pair < 2 * clean + 1e-7        # the pair takes it back to the unbiased error


def test_the_decay_pair_survives_xla_simplification():
    """Under jit, the pair (a, a_lo) still sums to exp(γ) closely enough that the error Σ_t λ^t
    builds up stays at a few ulps (XLA rewrites log(exp(x)) to x, which once zeroed a residue
    built from log, leaving fp32(exp(γ)) alone: ~1e-5 at the slowest ALiBi slopes)."""
    import importlib

    from lattnbench.kernels.decay import alibi_decay, lightning_decay

    rec = importlib.import_module("lattnbench.kernels.jax.recurrent")
    gamma = np.concatenate([np.asarray(alibi_decay(16), np.float32), np.asarray(lightning_decay(16, 0, 24), np.float32)[1:],
                            np.float32([-1e-4, -1e-3, -0.01, -0.3, -0.69, -0.7, -5.8])])
    a, a_lo = jax.jit(rec._decay, static_argnums=(0, 1))(None, None, jnp.asarray(gamma), jnp.float32(1))
    lam = np.asarray(a, np.float64).ravel() + np.asarray(a_lo, np.float64).ravel()
    exact = np.exp(gamma.astype(np.float64))
    built_up = np.abs(lam - exact) / exact / (1 - exact)   # relative error of Σ_t λ^t
    assert built_up.max() < 2.0**-21, gamma[built_up.argmax()]
