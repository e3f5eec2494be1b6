"""gdn_chunked (WY form) and gdn_recurrent against the fp64 torch token loop: o, S_T and every
gradient (q, k, v, g, beta, h0) under random do and dS_T, err = RMS(x − ref)/RMS(ref) within the
dtype's tolerance. Inputs are drawn afresh every run (L2-normalised keys, g = logsigmoid(x)/norm,
beta = sigmoid(x)); a failure names the seed, and GDN_TEST_SEED=<seed> replays it.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from jax_testutil import fast_jit, torch_reference
from lattnbench.kernels.gdn.jax.gdn_chunked import gdn_chunked
from lattnbench.kernels.gdn.jax.gdn_recurrent import gdn_recurrent
from lattnbench.kernels.gdn.naive import gdn_naive
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

BASE_SEED = int(os.environ.get("GDN_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
DTYPES = {"fp64": jnp.float64, "fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
CU = np.array([0, 17, 17, 18, 45])  # four packed sequences: one empty, one of length 1
H, HK, D, E = 4, 2, 12, 20         # GQA, D != E


@pytest.fixture
def rng(request):
    return np.random.default_rng((BASE_SEED + zlib.crc32(request.node.name.encode())) % 2**32)


def _round(x, dtype):
    return np.asarray(x, np.float64).astype(jnp.dtype(DTYPES[dtype])).astype(np.float64)


def _inputs(rng, dtype, t=45, norm=1.0, varlen=False, h0=True, b=2, normalize=True):
    """fp64 numpy leaves rounded to dtype (the reference's inputs), and cotangents do, dS_T."""
    b = 1 if varlen else b
    n = len(CU) - 1 if varlen else b
    x = lambda *s: rng.standard_normal(s)  # noqa: E731
    k = x(b, t, HK, D)
    k = k / np.linalg.norm(k, axis=-1, keepdims=True) if normalize else k * D**-0.5
    inp = {"q": x(b, t, H, D), "k": k, "v": x(b, t, HK, E),
           "g": -np.logaddexp(0.0, -x(b, t, H)) / norm, "beta": 1.0 / (1.0 + np.exp(-x(b, t, H)))}
    inp = {name: _round(val, dtype) for name, val in inp.items()}
    if h0:
        inp["initial_state"] = 0.5 * x(n, H, D, E)
    return inp, x(b, t, H, E), x(n, H, D, E)


def _run(fn, inputs, do, ds, dtype, **kw):
    """Outputs and gradients of a JAX kernel: leaves in dtype (h0 in fp32, fp64 for fp64), under x64
    for fp64 only."""
    names = list(inputs)
    with jax.enable_x64(dtype == "fp64"):
        jdt = DTYPES[dtype]
        state_dt = jnp.float64 if dtype == "fp64" else jnp.float32
        args = [jnp.asarray(inputs[nm], state_dt if nm == "initial_state" else jdt) for nm in names]

        @fast_jit
        def run(args, do, ds):
            (o, s), vjp = jax.vjp(lambda *a: fn(**dict(zip(names, a)), **kw), *args)
            return o, s, vjp((do.astype(o.dtype), ds))

        o, s, grads = run(args, jnp.asarray(do, state_dt), jnp.asarray(ds, state_dt))
        assert o.dtype == jdt and s.dtype == state_dt, (o.dtype, s.dtype)
        for nm, gr, a in zip(names, grads, args):
            assert gr.dtype == a.dtype, (nm, gr.dtype, a.dtype)
        out = {"o": np.asarray(o.astype(state_dt)), "final_state": np.asarray(s)}
        out.update({"d" + nm: np.asarray(gr.astype(state_dt)) for nm, gr in zip(names, grads)})
    return out


def _check(fn, dtype, inp, do, ds, **kw):
    """The kernel against the fp64 loop on the same rounded inputs; returns the error per tensor."""
    ref_kw = {key: val for key, val in kw.items() if key in ("scale", "cu_seqlens")}
    ref = torch_reference(gdn_naive, inp, do, ds, **ref_kw)
    got = _run(fn, inp, do, ds, dtype, **kw)
    errs = {key: err_ratio(got[key], ref[key]) for key in ref}
    tol = TOLERANCE[dtype]
    assert all(val <= tol for val in errs.values()), f"GDN_TEST_SEED={BASE_SEED} tol {tol}: {errs}"
    return errs


# T = 45 with chunk 16: two whole chunks and a partial one; norm 0.1 is the strong-gate recipe
@pytest.mark.parametrize("dtype,norm,varlen,chunk", [
    ("fp64", 1.0, False, 16), ("fp64", 0.1, True, 8),
    ("fp32", 0.1, False, 16), ("fp32", 1.0, True, 8),
    ("bf16", 1.0, False, 16), ("fp16", 0.1, True, 16),
])
def test_chunked_matches_loop(rng, dtype, norm, varlen, chunk):
    inp, do, ds = _inputs(rng, dtype, norm=norm, varlen=varlen)
    kw = {"cu_seqlens": CU} if varlen else {}
    _check(gdn_chunked, dtype, inp, do, ds, chunk=chunk, scale=0.3, **kw)


@pytest.mark.parametrize("norm", [1.0, 0.1])
def test_chunked_long_chunks_fp32(rng, norm):
    """The default chunk of 64, T = 150 not a multiple of it, no initial state, the default scale.
    Mild gates: long memory, the triangular solve spans all 64 tokens. Strong gates: the chunk's
    log decays reach −10³, where taking e^{G_i − G_j} from differences of fp32 cumulative sums
    puts dg at about 1e-5 (the kernel's segment sums hold it near 1e-7)."""
    inp, do, ds = _inputs(rng, "fp32", t=150, norm=norm, h0=False, b=1)
    _check(gdn_chunked, "fp32", inp, do, ds)


def test_chunked_takes_k_as_given(rng):
    """k is not normalised inside: unnormalised keys give the loop's answer too (fp64)."""
    inp, do, ds = _inputs(rng, "fp64", t=21, normalize=False)
    _check(gdn_chunked, "fp64", inp, do, ds, chunk=8)


@pytest.mark.parametrize("dtype,varlen", [("fp64", True), ("fp32", False)])
def test_recurrent_matches_loop(rng, dtype, varlen):
    inp, do, ds = _inputs(rng, dtype, norm=0.1 if varlen else 1.0, varlen=varlen)
    kw = {"cu_seqlens": CU} if varlen else {}
    _check(gdn_recurrent, dtype, inp, do, ds, chunk=8, **kw)


def test_options_and_errors(rng):
    """No final state when not asked for; T = 0; bad gate shapes and a traced cu_seqlens raise."""
    inp, _, _ = _inputs(rng, "fp32", t=5)
    args = {name: jnp.asarray(val, jnp.float32) for name, val in inp.items()}
    o, s = jax.eval_shape(lambda a: gdn_chunked(**a, output_final_state=False), args)
    assert s is None and o.shape == (2, 5, H, E) and o.dtype == jnp.float32
    empty = {name: (val if name == "initial_state" else val[:, :0]) for name, val in args.items()}
    o, s = gdn_chunked(**empty)
    assert o.shape == (2, 0, H, E) and np.array_equal(np.asarray(s), np.asarray(args["initial_state"]))
    with pytest.raises(ValueError, match=r"g must be \[B, T, H\]"):
        gdn_chunked(**dict(args, g=args["g"][..., None]))
    with pytest.raises(ValueError, match=r"beta must be \[B, T, H\]"):
        gdn_recurrent(**dict(args, beta=args["beta"][:, :, :2]))
    one = {name: (val if name == "initial_state" else val[:1]) for name, val in args.items()}
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(lambda cu: gdn_chunked(**one, cu_seqlens=cu))(jnp.array([0, 2, 5]))


def _residual_bytes(fn, t, chunk=64):
    """Bytes autodiff keeps for a kernel's backward at one head, D = E = 32."""
    rng = np.random.default_rng(0)
    shapes = {"q": (1, t, 1, 32), "k": (1, t, 1, 32), "v": (1, t, 1, 32), "g": (1, t, 1), "beta": (1, t, 1)}
    args = {name: jnp.asarray(rng.standard_normal(s) * 0.1, jnp.float32) for name, s in shapes.items()}
    # traced, not run: the VJP closure's leaves as shapes
    vjp_fn = jax.eval_shape(lambda *a: jax.vjp(lambda *x: fn(*x, chunk=chunk), *a)[1], *args.values())
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(vjp_fn))


@pytest.mark.parametrize("fn,vectors", [(gdn_chunked, 12), (gdn_recurrent, 5)])
def test_residuals_grow_linearly_without_a_state_per_token(fn, vectors):
    """Residual memory is O(T): doubling T doubles it, and at most a few vectors of D = E = 32 per
    token stay (chunked: inputs, u, w, decayed k, ν and the chunk states, no [C, C] tensor, which
    would be 2 more; recurrent: inputs and the chunk states), where a state per token would be 32."""
    small, large = _residual_bytes(fn, 512), _residual_bytes(fn, 1024)
    assert 1.9 < large / small < 2.1, (small, large)
    assert large <= vectors * 1024 * 32 * 4, large / (1024 * 32 * 4)
