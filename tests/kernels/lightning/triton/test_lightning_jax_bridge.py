"""The jax-triton bridge: argument checks and what it hands to jax-triton (its kernels need a GPU;
here jax-triton is a stand-in that checks every launch against its kernel's signature and records
it)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from lattnbench.kernels.lightning.triton.jax_bridge import lightning_attn_jax_triton  # noqa: E402
from triton_testutil import SignatureCheckingJaxTriton  # noqa: E402


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_varlen_not_implemented():
    with pytest.raises(NotImplementedError):
        lightning_attn_jax_triton(_x(1, 4, 2, 16), _x(1, 4, 2, 16), _x(1, 4, 2, 16), cu_seqlens=[0, 4])


@pytest.mark.parametrize("case", ["rank", "shape", "heads", "h0", "gamma"])
def test_bad_input_raises(case):
    q, k, v = _x(1, 4, 4, 16), _x(1, 4, 2, 16), _x(1, 4, 2, 8)
    kw = {}
    if case == "rank":
        q = q[0]
    elif case == "shape":
        k = _x(1, 4, 2, 8)
    elif case == "heads":
        k, v = _x(1, 4, 3, 16), _x(1, 4, 3, 8)
    elif case == "h0":
        kw["initial_state"] = _x(1, 4, 16, 16)
    elif case == "gamma":
        kw["gamma"] = [0.0, -1.0]
    with pytest.raises(ValueError):
        lightning_attn_jax_triton(q, k, v, **kw)


def test_scalars_reach_jax_triton_as_fp32_not_fp64(monkeypatch):
    """jax-triton types a Python float as fp64; an fp64 scale turns the kernel's MMA accumulator
    into f64, which does not compile for sm_90 ("Unsupported mma result type"). Every float scalar
    must be an np.float32."""
    import jax.numpy as jnp

    from lattnbench.kernels.lightning.triton import jax_bridge

    fake = SignatureCheckingJaxTriton()
    monkeypatch.setattr(jax_bridge, "jax_triton", lambda: fake)
    q, k, v = (jnp.asarray(_x(1, 8, 2, 16)) for _ in range(3))
    jax_bridge._fwd_call(q, k, v, jnp.zeros(2, jnp.float32), None, 0.25, False)
    jax_bridge._bwd_call(q, k, v, q, jnp.zeros(2, jnp.float32), None, jnp.zeros((1, 2, 16, 16), jnp.float32),
                         0.25, False)
    calls = [(c["name"], c["args"], c["meta"].get("ROLE")) for c in fake.launches]
    assert [(name, role) for name, _, role in calls] == [("lightning_fwd_kernel", None)] + [
        ("lightning_bwd_kernel", role) for role in (0, 1, 2)]
    for _, args, _ in calls:
        scalars = [a for a in args if not hasattr(a, "shape") or np.ndim(a) == 0]
        assert not any(type(a) is float for a in scalars), scalars
        assert any(isinstance(a, np.float32) and a == np.float32(0.25) for a in scalars)


@pytest.mark.parametrize("d,e,dtype,want", [
    (16, 16, "bfloat16", (1, 128, 8)), (128, 96, "float16", (1, 128, 8)), (192, 64, "bfloat16", (0, 64, 4)),
    (64, 130, "float16", (0, 64, 4)), (48, 96, "float32", (0, 32, 4)), (192, 64, "float32", (0, 32, 4))])
def test_launch_config_orientation(monkeypatch, d, e, dtype, want):
    """The transposed pass (TR=1, BV=128) for head dims up to 128; the row-wise config when a padded
    head dim passes 128; fp32 (IEEE dots) the torch path's small fp32 config at any head dim. Every
    launch of a call carries the same TR, BV and warps."""
    import jax.numpy as jnp

    from lattnbench.kernels.lightning.triton import jax_bridge

    fake = SignatureCheckingJaxTriton()
    monkeypatch.setattr(jax_bridge, "jax_triton", lambda: fake)
    dt = getattr(jnp, dtype)
    q, k = jnp.asarray(_x(1, 8, 2, d), dt), jnp.asarray(_x(1, 8, 2, d), dt)
    v = jnp.asarray(_x(1, 8, 2, e), dt)
    g = jnp.zeros(2, jnp.float32)
    jax_bridge._fwd_call(q, k, v, g, None, 0.25, False)
    jax_bridge._bwd_call(q, k, v, jnp.asarray(_x(1, 8, 2, e), dt), g, None, jnp.zeros((1, 2, d, e), jnp.float32),
                         0.25, False)
    metas = [(c["meta"]["TR"], c["meta"]["BV"], c["num_warps"]) for c in fake.launches]
    assert len(metas) == 4
    assert set(metas) == {want}
