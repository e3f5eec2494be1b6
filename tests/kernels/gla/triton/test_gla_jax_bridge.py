"""The host side of the jax-triton GLA bridge (its kernels need a GPU and jax-triton): input
checks before any launch, the registry entry's reason where it cannot run, and every launch of a
fwd+bwd against its kernel's signature, with a stand-in for jax-triton."""
from __future__ import annotations

import numpy as np
import pytest

from lattnbench.kernels.gla.triton import jax_bridge
from lattnbench.registry import default_registry
from triton_testutil import SignatureCheckingJaxTriton


def _arrays(g_heads=2, d=16):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 5, 2, d), dtype=np.float32)
    kv = rng.standard_normal((1, 5, 1, d), dtype=np.float32)
    g = -rng.random((1, 5, g_heads, d), dtype=np.float32)
    return q, kv, kv, g


def test_checks_accept_gqa_and_keep_g_in_its_dtype():
    # the kernels cumulate g in fp32 on load, so a bf16 / fp16 g costs no fp32 copy
    q, k, v, g = _arrays()
    *_, gh, h0 = jax_bridge.check_call(q, k, v, g.astype(np.float16), None, None)
    assert str(gh.dtype) == "float16" and h0 is None
    np.testing.assert_allclose(np.asarray(gh), g, rtol=1e-3)


@pytest.mark.parametrize("args, exc, needle", [
    (dict(g_heads=1), ValueError, "per query head"),
    (dict(cu=[0, 5]), NotImplementedError, "cu_seqlens"),
    (dict(h0=np.zeros((1, 2, 16, 8), np.float32)), ValueError, "initial_state"),
])
def test_bad_calls_fail_before_any_launch(monkeypatch, args, exc, needle):
    monkeypatch.setattr(jax_bridge, "jax_triton", lambda: pytest.fail("jax-triton imported"))
    q, k, v, g = _arrays(args.get("g_heads", 2))
    with pytest.raises(exc, match=needle):
        jax_bridge.gla_jax_triton(q, k, v, g, initial_state=args.get("h0"), cu_seqlens=args.get("cu"))


def test_registry_entry_says_why_it_cannot_run_on_the_cpu():
    reason = default_registry()["gla/jax-triton"].available("cpu")
    assert reason is not None and ("jax_triton" in reason or "cuda" in reason)
    assert "varlen" not in default_registry()["gla/jax-triton"].features


@pytest.mark.parametrize("h0, reverse", [(False, False), (True, True)])
def test_every_launch_matches_its_kernel_and_each_pass_launches_once(monkeypatch, h0, reverse):
    # the torch path's launches, one per pass, none depending on the gate values, all at one chunk
    # (the per-chunk operands and entry states one launch hands the next)
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    fake = SignatureCheckingJaxTriton()
    monkeypatch.setattr(jax_bridge, "jax_triton", lambda: fake)
    monkeypatch.setattr(jax_bridge, "_FN", None)
    q, k, v, g = (jnp.asarray(x) for x in _arrays(d=24))
    args = (q, k, v, g) + ((jnp.zeros((1, 2, 24, 24), jnp.float32),) if h0 else ())

    def attn(*xs):
        return jax_bridge.gla_jax_triton(*xs[:4], initial_state=xs[4] if h0 else None, reverse=reverse)

    out, vjp = jax.vjp(attn, *args)
    vjp(tuple(jnp.ones_like(x) for x in out))
    names = [launch["name"] for launch in fake.launches]
    assert names == ["gla_prep_kernel", "gla_fwd_kernel", "gla_bwd_h_kernel", "gla_bwd_dh_kernel",
                     "gla_bwd_intra_kernel", "gla_bwd_exit_kernel", "gla_bwd_v_kernel"]
    metas = {launch["name"]: launch["meta"] for launch in fake.launches}
    assert all(m["REVERSE"] == reverse for m in metas.values())
    assert {m["BT"] for m in metas.values()} == {64}
    assert metas["gla_bwd_h_kernel"]["HAS_H0"] == h0
