"""XLA's compiled cost and memory analyses of the JAX kernels on the CPU backend.

For each kernel, shape and mode (``fwd``: outputs and final state; ``fwdbwd``: the gradients of
a scalar loss of both) the function is lowered from abstract inputs and compiled, never run:
``cost_analysis()`` gives flops and bytes accessed, ``memory_analysis()`` the temporaries and
outputs. The numbers are of one XLA (rows carry jax and jaxlib) and one backend (CPU here, so CI
computes them without a GPU).

``KERNELS`` maps a registry name to a function ``(q, k, v, g) -> (o, state)`` (``g`` is None for
Lightning); tests pass their own table to measure a fixture kernel under a product name.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: (batch, seqlen, heads, dim_qk = dim_v) of the fixed shapes, fp32
SHAPES = ((1, 256, 2, 64), (1, 1024, 2, 64))
MODES = ("fwd", "fwdbwd")


@dataclass(frozen=True)
class XlaJob:
    """One compile: a kernel at a shape in a mode."""

    kernel: str
    shape: tuple[int, int, int, int]
    mode: str


def shape_label(shape: tuple[int, int, int, int]) -> str:
    """The shape as rows name it: ``B1 T256 H2 D64 fp32``."""
    b, t, h, d = shape
    return f"B{b} T{t} H{h} D{d} fp32"


def _lightning(impl: str) -> Callable:
    def fn(q, k, v, g):
        import numpy as np

        from lattnbench.kernels.decay import lightning_decay
        from lattnbench.kernels.jax import recurrent

        gamma = np.asarray(lightning_decay(q.shape[2], 0, 2), dtype=np.float32)
        return recurrent(q, k, v, g_gamma=gamma, impl=impl)
    return fn


def _gla(impl: str) -> Callable:
    def fn(q, k, v, g):
        from lattnbench.kernels.jax import recurrent_gla

        return recurrent_gla(q, k, v, g=g, impl=impl)
    return fn


KERNELS: dict[str, Callable] = {
    "lightning/jax-chunked": _lightning("chunked"),
    "lightning/jax-recurrent": _lightning("recurrent"),
    "gla/jax-chunked": _gla("chunked"),
    "gla/jax-recurrent": _gla("recurrent"),
}


def default_jobs(kernels: Mapping[str, Callable] = KERNELS) -> list[XlaJob]:
    """Every kernel at every shape in both modes."""
    return [XlaJob(name, shape, mode) for name in kernels for shape in SHAPES for mode in MODES]


def versions() -> dict:
    """jax and jaxlib versions (rows carry them)."""
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}


def _first(analysis):
    """cost_analysis() is a dict in recent JAX, a list of one dict in older ones."""
    if isinstance(analysis, (list, tuple)):
        return analysis[0] if analysis else {}
    return analysis or {}


def compile_job(job: XlaJob, kernels: Mapping[str, Callable] = KERNELS) -> dict:
    """Compile one job on the CPU backend; its metrics (name → number)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp

    fn = kernels[job.kernel]
    b, t, h, d = job.shape
    spec = jax.ShapeDtypeStruct((b, t, h, d), jnp.float32)
    gated = job.kernel.startswith("gla/")

    def fwd(q, k, v, g):
        return fn(q, k, v, g if gated else None)

    if job.mode == "fwd":
        target = fwd
    else:
        def loss(q, k, v, g):
            o, s = fwd(q, k, v, g)
            return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)
        target = jax.grad(loss, argnums=(0, 1, 2, 3) if gated else (0, 1, 2))
    compiled = jax.jit(target).lower(spec, spec, spec, spec).compile()
    cost = _first(compiled.cost_analysis())
    mem = compiled.memory_analysis()
    return {"flops": float(cost.get("flops", 0.0)), "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
            "temp_bytes": int(getattr(mem, "temp_size_in_bytes", 0)),
            "output_bytes": int(getattr(mem, "output_size_in_bytes", 0))}
