"""The jax-triton bridge's argument checks (its kernels need a GPU; bench/triton_lightning_dev.py --jax)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from lattnbench.kernels.triton.lightning.jax_bridge import lightning_attn_jax_triton  # noqa: E402


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
