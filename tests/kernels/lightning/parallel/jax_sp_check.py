"""Run in a fresh process (XLA reads the device count once): with 4 host devices, the shard_map
kernel at 2 and 4 devices against the single-device naive reference, outputs and every gradient,
with h0, GQA and reverse, on shards of one chunk and of several. Prints the failures; exit 1 when
there are any."""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from lattnbench.kernels.jax import naive  # noqa: E402
from lattnbench.kernels.lightning.parallel.jax_sp import lightning_attn_shard_map, sequence_mesh  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/kernels: the tests' compile options
from jax_compile import FAST_COMPILE  # noqa: E402

TOL = float(sys.argv[1])




def loss_grads(fn, q, k, v, h0, do, ds):
    def f(q, k, v, h0):
        o, s = fn(q, k, v, h0)
        return jnp.sum(o * do) + jnp.sum(s * ds)
    both = jax.jit(lambda *a: (jax.grad(f, argnums=(0, 1, 2, 3))(*a), fn(*a)),  # eager shard_map is slow
                   compiler_options=FAST_COMPILE)
    return both(q, k, v, h0)


def err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b * b)))


def main() -> int:
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(3)
    failures = []
    # shards of one chunk (12 and 8 tokens) and of several (130 tokens: a full 128 and a partial one)
    for world, reverse, (b, t, h, hk, d, e) in [(2, False, (2, 24, 4, 2, 8, 6)), (4, True, (1, 32, 2, 1, 8, 8)),
                                                (2, True, (1, 260, 2, 1, 8, 4))]:
        draw = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
        q, k, v, do = draw(b, t, h, d), draw(b, t, hk, d), draw(b, t, hk, e), draw(b, t, h, e)
        h0, ds = draw(b, h, d, e), draw(b, h, d, e)
        gamma = -jnp.asarray(rng.uniform(0.05, 0.7, h), jnp.float32)
        mesh = sequence_mesh(world)
        sp = lambda q, k, v, h0: lightning_attn_shard_map(q, k, v, gamma, None, h0, reverse, mesh=mesh)  # noqa: E731
        ref = lambda q, k, v, h0: naive.lightning_naive(q, k, v, gamma, None, h0, reverse)  # noqa: E731
        (gs, outs), (gr, outr) = loss_grads(sp, q, k, v, h0, do, ds), loss_grads(ref, q, k, v, h0, do, ds)
        for name, x, y in zip(("o", "final_state", "dq", "dk", "dv", "dh0"), (*outs, *gs), (*outr, *gr)):
            if not err(x, y) <= TOL:
                failures.append(f"P{world} rev={reverse} {name}: err {err(x, y):.3g} > {TOL:g}")
    print("\n".join(failures) or "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
