"""The public API (the seeds' names and errors) and its impl= dispatch."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import FAST_COMPILE, assert_close, cotangents, fast_jit, jax_run, make_inputs, torch_reference
from lattnbench.kernels.decay import lightning_decay
from lattnbench.kernels.jax import IMPLS, lightning_attn, recurrent, recurrent_gla
from lattnbench.kernels.naive import torch_ref
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

H, HK, D, E = 4, 2, 24, 40


def _x(shape, seed=0, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


# ------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("fn", ["lightning_attn", "recurrent_gla", "recurrent"])
def test_seed_varlen_errors(fn):
    call = {
        "lightning_attn": lambda *a, **kw: lightning_attn(*a, 0, 4, **kw),
        "recurrent_gla": recurrent_gla,
        "recurrent": recurrent,
    }[fn]
    q = _x((2, 10, H, D))
    v = _x((2, 10, H, E), 1)
    with pytest.raises(ValueError, match=r"The batch size is expected to be 1 rather than 2 when using `cu_seqlens`"):
        call(q, q, v, cu_seqlens=jnp.array([0, 4, 10]))
    q1, v1 = q[:1], v[:1]
    h0 = _x((3, H, D, E), 2)
    with pytest.raises(ValueError, match=r"equal to the number of input sequences, i.e., 2 rather than 3"):
        call(q1, q1, v1, cu_seqlens=jnp.array([0, 4, 10]), initial_state=h0)
    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to T=10"):
        call(q1, q1, v1, cu_seqlens=np.array([0, 6, 4, 10]))
    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to T=10"):
        call(q1, q1, v1, cu_seqlens=np.array([0, 4, 9]))


def test_other_errors():
    q, v = _x((1, 10, H, D)), _x((1, 10, H, E), 1)
    with pytest.raises(ValueError, match="impl must be one of"):
        recurrent(q, q, v, impl="cuda")
    with pytest.raises(ValueError, match="does not support gv"):
        recurrent(q, q, v, gv=-jnp.ones((1, 10, H, E)) * 0.1, impl="chunked")
    with pytest.raises(ValueError, match="gk must be"):
        recurrent(q, q, v, gk=-jnp.ones((1, 10, H, E)) * 0.1)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        recurrent(q, q[:, :, :3], v[:, :, :3])
    if jax.default_backend() != "gpu":
        with pytest.raises(RuntimeError, match="impl='triton' is unavailable"):
            lightning_attn(q, q, v, 0, 4, impl="triton")
    # a traced cu_seqlens: the recurrent path takes it, the chunked path says why it cannot
    cu = jnp.array([0, 3, 10])
    o_jit, s_jit = fast_jit(lambda q, cu: recurrent(q, q, v, cu_seqlens=cu))(q, cu)
    # jitted too: eagerly, each of the naive path's ops would compile on its own
    o_ref, s_ref = fast_jit(lambda q: recurrent(q, q, v, cu_seqlens=np.array([0, 3, 10]), impl="naive"))(q)
    assert err_ratio(o_jit, o_ref) < TOLERANCE["fp32"] and err_ratio(s_jit, s_ref) < TOLERANCE["fp32"]
    with pytest.raises(ValueError, match="cu_seqlens must be concrete"):
        jax.jit(lambda q, cu: recurrent_gla(q, q, v, cu_seqlens=cu))(q, cu)
    assert set(IMPLS) == {"recurrent", "chunked", "naive", "triton"}


# ------------------------------------------------------------------------------- dispatch

@pytest.mark.parametrize("impl", ["chunked", "recurrent", "naive"])
def test_lightning_attn_impls(impl):
    """Seeds' decay for layer 3 of 8, GQA, initial state, reverse; every gradient vs fp64 torch."""
    inp = make_inputs(41, 2, 29, H, HK, D, E)
    do, ds = cotangents(41, (2, 29, H, E), (2, H, D, E))
    gamma = lightning_decay(H, 3, 8).astype(np.float64)
    assert gamma[1] < 0 and np.allclose(gamma, -(8 / H) * (1 - 3 / 8) * np.arange(H))
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(gamma), reverse=True)

    def fn(q, k, v, initial_state):
        return lightning_attn(q, k, v, 3, 8, initial_state=initial_state, reverse=True, impl=impl)

    assert_close(jax_run(fn, inp, do, ds, "fp32"), ref, "fp32")


@pytest.mark.parametrize("impl", ["chunked", "recurrent"])
def test_recurrent_gla_impls_varlen_bf16(impl):
    cu = np.array([0, 9, 10, 30])
    inp = make_inputs(42, 1, 30, H, HK, D, E, "bf16", gates=("g",), n=3)
    do, ds = cotangents(42, (1, 30, H, E), (3, H, D, E))
    gamma = -np.random.default_rng(4).uniform(0.0, 0.1, H)
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds, g_gamma=torch.tensor(gamma), cu_seqlens=cu)

    def fn(q, k, v, g, initial_state):
        return recurrent_gla(q, k, v, g=g, g_gamma=jnp.asarray(gamma, jnp.float32), initial_state=initial_state,
                             cu_seqlens=cu, impl=impl)

    assert_close(jax_run(fn, inp, do, ds, "bf16"), ref, "bf16")


def test_recurrent_chunked_takes_g_plus_gk():
    """impl='chunked' folds g and gk into one key-side gate; both get the right gradient."""
    inp = make_inputs(43, 2, 26, H, H, D, E, gates=("g", "gk"), h0=False)
    do, ds = cotangents(43, (2, 26, H, E), (2, H, D, E))
    ref = torch_reference(torch_ref.recurrent_naive, inp, do, ds, scale=0.5)

    def fn(q, k, v, g, gk):
        return recurrent(q, k, v, g=g, gk=gk, softmax_scale=0.5, impl="chunked", chunk=8)

    assert_close(jax_run(fn, inp, do, ds, "fp32"), ref, "fp32")


def test_naive_impl_keeps_dtypes():
    q = _x((1, 12, H, D), 5, jnp.bfloat16)
    v = _x((1, 12, H, E), 6, jnp.bfloat16)
    for impl in ("naive", "chunked", "recurrent"):
        fn = partial(lightning_attn, layer_idx=1, num_layers=2, impl=impl)
        o, s = jax.jit(fn, compiler_options=FAST_COMPILE)(q, q, v)
        assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32, impl
        assert o.shape == (1, 12, H, E) and s.shape == (1, H, D, E)
