"""How the JAX kernel tests compile their graphs (torch-free, so that a fresh-process check script
can take it too)."""
from __future__ import annotations

import jax


def _fast_compile() -> dict:
    """Compile options for the test graphs: little backend optimisation (3-4x faster compiles on
    CPU), and where this XLA has them switchable, XLA:CPU's elemental emitters instead of its MLIR
    fusion emitters, which take some 3x longer to compile these graphs (the same operations; every
    result is still held to its dtype's tolerance)."""
    opts = {"xla_backend_optimization_level": 0}
    try:
        jax.jit(lambda x: x + 1, compiler_options={"xla_cpu_use_fusion_emitters": False}).lower(1.0).compile()
    except Exception:  # noqa: BLE001 - an XLA without the option
        return opts
    return {**opts, "xla_cpu_use_fusion_emitters": False}


FAST_COMPILE = _fast_compile()


def fast_jit(fn):
    """fn jitted with FAST_COMPILE: on CPU one such compile costs far less than running fn eagerly,
    where every primitive is dispatched (and compiled) on its own."""
    return jax.jit(fn, compiler_options=FAST_COMPILE)
