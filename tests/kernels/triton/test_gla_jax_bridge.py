"""The host side of the jax-triton GLA bridge (its kernels need a GPU and jax-triton): input
checks before any launch, and the registry entry's reason where it cannot run."""
from __future__ import annotations

import numpy as np
import pytest

from lattnbench.kernels.triton.gla import jax_bridge
from lattnbench.registry import default_registry


def _arrays(g_heads=2, d=16):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 5, 2, d), dtype=np.float32)
    kv = rng.standard_normal((1, 5, 1, d), dtype=np.float32)
    g = -rng.random((1, 5, g_heads, d), dtype=np.float32)
    return q, kv, kv, g


def test_checks_accept_gqa_and_cast_g_to_fp32():
    q, k, v, g = _arrays()
    *_, gf, h0 = jax_bridge.check_call(q, k, v, g.astype(np.float16), None, None)
    assert str(gf.dtype) == "float32" and h0 is None
    np.testing.assert_allclose(np.asarray(gf), g, rtol=1e-3)


@pytest.mark.parametrize("args, exc, needle", [
    (dict(g_heads=1), ValueError, "per query head"),
    (dict(cu=[0, 5]), NotImplementedError, "cu_seqlens"),
    (dict(h0=np.zeros((1, 2, 16, 8), np.float32)), ValueError, "initial_state"),
])
def test_bad_calls_fail_before_any_launch(monkeypatch, args, exc, needle):
    monkeypatch.setattr(jax_bridge, "_jax_triton", lambda: pytest.fail("jax-triton imported"))
    q, k, v, g = _arrays(args.get("g_heads", 2))
    with pytest.raises(exc, match=needle):
        jax_bridge.gla_jax_triton(q, k, v, g, initial_state=args.get("h0"), cu_seqlens=args.get("cu"))


def test_registry_entry_says_why_it_cannot_run_on_the_cpu():
    reason = default_registry()["gla/jax-triton"].available("cpu")
    assert reason is not None and ("jax_triton" in reason or "cuda" in reason)
    assert "varlen" not in default_registry()["gla/jax-triton"].features
