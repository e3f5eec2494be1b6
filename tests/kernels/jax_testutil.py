"""Shared helpers of the JAX kernel tests: random inputs, the fp64 torch reference with grads."""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import torch

from jax_compile import FAST_COMPILE, fast_jit  # noqa: F401 — the tests take them from here
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}


def round_to(x, jdt) -> np.ndarray:
    """x rounded to the JAX dtype jdt, returned as float64 numpy. numpy rounds (bf16 through
    ml_dtypes, to nearest even as XLA does): an eager JAX cast compiles anew for every shape."""
    return np.asarray(x, np.float32).astype(jnp.dtype(jdt)).astype(np.float64)


def make_inputs(seed, b, t, h, hk, d, e, dtype="fp32", gates=(), h0=True, n=None):
    """Random inputs rounded to `dtype`, as float64 numpy arrays (the reference's inputs).

    Gates are log decays ≤ 0 (GLA-like magnitudes, some strong); returns a dict by argument name.
    """
    rng = np.random.default_rng(seed)
    jdt = DTYPES[dtype]
    rnd = lambda shape, s=1.0: round_to(s * rng.standard_normal(shape), jdt)  # noqa: E731
    x = {"q": rnd((b, t, h, d)), "k": rnd((b, t, hk, d)), "v": rnd((b, t, hk, e))}
    for name in gates:
        last = e if name == "gv" else d
        # log-sigmoid style gates: mostly mild, some strong (down to about -6 per token)
        raw = rng.standard_normal((b, t, h, last)) * 1.5 + 1.0
        gate = -np.logaddexp(0.0, -raw)
        x[name] = round_to(gate, jdt)
    if h0:
        x["initial_state"] = rnd((b if n is None else n, h, d, e), 0.5)
    return x


def cotangents(seed, o_shape, s_shape):
    rng = np.random.default_rng(seed + 1000)
    return rng.standard_normal(o_shape), rng.standard_normal(s_shape)


def torch_reference(fn, inputs, do, ds, **kw):
    """fp64 outputs and gradients of a torch_ref function; returns dict with o, final_state, d<name>."""
    ts = {name: torch.tensor(val, dtype=torch.float64, requires_grad=True) for name, val in inputs.items()}
    cu = kw.pop("cu_seqlens", None)
    if cu is None:
        o, s = fn(**ts, **kw)
    else:
        # split by hand: torch_ref.per_sequence passes the gates positionally, which lands gk in
        # recurrent_naive's g_gamma slot (reported to the lead); dense calls per sequence avoid it
        outs, states = [], []
        for i in range(len(cu) - 1):
            sl = slice(int(cu[i]), int(cu[i + 1]))
            part = {nm: (x[i : i + 1] if nm == "initial_state" else x[:, sl]) for nm, x in ts.items()}
            o_i, s_i = fn(**part, **kw)
            outs.append(o_i)
            states.append(s_i)
        o, s = torch.cat(outs, dim=1), torch.cat(states, dim=0)
    loss = (o * torch.tensor(do)).sum() + (s * torch.tensor(ds)).sum()
    loss.backward()
    out = {"o": o.detach().numpy(), "final_state": s.detach().numpy()}
    for name, tsr in ts.items():
        out["d" + name] = tsr.grad.numpy()
    return out


def jax_run(fn, inputs, do, ds, dtype="fp32", **kw):
    """Outputs and gradients of a JAX function taking the same keyword inputs (cast to dtype)."""
    jdt = DTYPES[dtype]
    names = list(inputs)
    args = [jnp.asarray(inputs[nm].astype(np.float32).astype(jnp.float32 if nm == "initial_state" else jdt))
            for nm in names]

    def f(*a):
        return fn(**dict(zip(names, a)), **kw)

    @fast_jit
    def run(args, do, ds):
        (o, s), vjp = jax.vjp(f, *args)
        return o, s, vjp((do.astype(o.dtype), ds))

    o, s, grads = run(args, jnp.asarray(do, jnp.float32), jnp.asarray(ds, jnp.float32))
    out = {"o": o, "final_state": s}
    for nm, gr, a in zip(names, grads, args):
        assert gr.dtype == a.dtype, (nm, gr.dtype, a.dtype)
        out["d" + nm] = gr
    assert o.dtype == jdt and s.dtype == jnp.float32, (o.dtype, s.dtype)
    return out


def assert_close(got, ref, dtype, keys=None):
    tol = TOLERANCE[dtype]
    errs = {key: err_ratio(got[key], ref[key]) for key in (keys or ref)}
    bad = {key: val for key, val in errs.items() if not val <= tol}
    assert not bad, f"err_ratio above {tol} ({dtype}): {bad}; all: {errs}"
    return errs
