"""gla/triton and gla/jax-triton at the option matrix's long point, on the GPU: B2 H4 T1000
D = E = 64, the harness's gate draw, fp16 and bf16, with and without an initial state, every
tensor against the fp64 recurrence. dg is the one to watch: its per-row terms q⊙dq − k⊙dk nearly
cancel over a sequence, so rounding that accumulates across chunks shows there first (bf16 cannot
run in the interpreter, so this is where bf16 dg is checked). In the "deep row" cases the second
batch row's gates are about −16 per token, so its chunks take the exact path (from torch a rerun,
from JAX inside the single launch of each pass); the state is wiped at every token there, where
dg's terms cancel hardest (docs/design/gla-triton.md), so dg is only required finite. gla/jax-triton
runs where jax-triton is installed (the GPU image lacks it unless carried)."""
from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from lattnbench.kernels.triton.gla import gla_triton  # noqa: E402
from lattnbench.kernels.triton.gla.naive import gla_naive  # noqa: E402
from lattnbench.spec import DEFAULT_GATE_NORM as GATE_NORMALISER  # noqa: E402
from lattnbench.measure.tolerance import TOLERANCE, err_ratio  # noqa: E402

pytestmark = pytest.mark.gpu

B, T, H, D = 2, 1000, 4, 64
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
NAMES = ("o", "final_state", "dq", "dk", "dv", "dg", "dh0")
CASES = [(dt, h0, False) for dt in DTYPES for h0 in (False, True)] + [(dt, True, True) for dt in DTYPES]
#: the deep row's gate normaliser (log σ(x) / 0.05: about −16 per token)
DEEP = 0.05


@pytest.fixture(scope="module", params=CASES,
                ids=lambda c: f"{c[0]}-h0-{'on' if c[1] else 'off'}{'-deep-row' if c[2] else ''}")
def problem(request):
    """(dtype name, inputs and cotangents, fp64 reference outputs and gradients by name, names only
    required finite)."""
    name, with_h0, deep_row = request.param
    dtype = DTYPES[name]
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    x = dict(q=rnd(B, T, H, D).to(dtype), k=rnd(B, T, H, D).to(dtype), v=rnd(B, T, H, D).to(dtype),
             g=torch.nn.functional.logsigmoid(rnd(B, T, H, D)) / GATE_NORMALISER,
             h0=rnd(B, H, D, D) if with_h0 else None, do=rnd(B, T, H, D).to(dtype), ds=rnd(B, H, D, D))
    if deep_row:
        x["g"][1] = x["g"][1] * (GATE_NORMALISER / DEEP)
    leaves = [x[n].double().requires_grad_() for n in ("q", "k", "v", "g", "h0") if x[n] is not None]
    o, s = gla_naive(*leaves[:4], initial_state=leaves[4] if with_h0 else None)
    grads = torch.autograd.grad((o, s), leaves, (x["do"].double(), x["ds"].double()))
    return name, x, dict(zip(NAMES, (o, s, *grads))), ("dg",) if deep_row else ()


def _assert_within_tolerance(name: str, got: dict, ref: dict, finite_only=()) -> None:
    errs = {n: err_ratio(got[n], ref[n]) for n in ref}
    tol = TOLERANCE[name]
    bad = {n: e for n, e in errs.items() if not (e < float("inf") if n in finite_only else e <= tol)}
    assert not bad, f"{name}: errors above {tol}: {bad} (all: {errs})"


def test_gla_triton_every_tensor_within_tolerance(problem):
    name, x, ref, finite_only = problem
    leaves = [x[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "h0") if x[n] is not None]
    o, s = gla_triton(*leaves[:4], initial_state=leaves[4] if len(leaves) > 4 else None)
    grads = torch.autograd.grad((o, s), leaves, (x["do"], x["ds"]))
    _assert_within_tolerance(name, dict(zip(NAMES, (o, s, *grads))), ref, finite_only)


def test_gla_jax_triton_every_tensor_within_tolerance(problem):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from lattnbench.kernels.triton.lightning.jax_bridge import _jax_triton

    try:  # through the bridge: a bare import of jax_triton breaks every later torch-Triton compile
        _jax_triton()
    except ImportError:
        pytest.skip("jax-triton is not installed")

    from lattnbench.kernels.triton.gla.jax_bridge import gla_jax_triton

    name, x, ref, finite_only = problem
    jdt = jnp.float16 if name == "fp16" else jnp.bfloat16

    def arr(t: torch.Tensor, dt):  # exact: the values are representable in dt
        return jnp.asarray(t.float().cpu().numpy()).astype(dt)

    args = [arr(x[n], jdt) for n in ("q", "k", "v")] + [arr(x["g"], jnp.float32)]
    if x["h0"] is not None:
        args.append(arr(x["h0"], jnp.float32))

    def attn(q, k, v, g, h0=None):
        return gla_jax_triton(q, k, v, g, initial_state=h0)

    (o, s), vjp = jax.vjp(attn, *args)
    grads = vjp((arr(x["do"], jdt), arr(x["ds"], jnp.float32)))
    got = {n: np.asarray(a.astype(jnp.float32)) for n, a in zip(NAMES, (o, s, *grads))}
    _assert_within_tolerance(name, got, ref, finite_only)
