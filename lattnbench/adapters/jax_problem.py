"""JAX adapter: jitted fwd / fwd+grad / grad-alone callables, grads, compiled memory analysis.

Decay, packed lengths, scale and direction are closed over as constants (they are not
trained and must be static for the kernels' shapes); the differentiable inputs are arguments.
"""
from __future__ import annotations

import os
from collections.abc import Callable

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from lattnbench.adapters.base import Problem  # noqa: E402
from lattnbench.errors import Unsupported  # noqa: E402
from lattnbench.operators.inputs import UNIT_EPS  # noqa: E402
from lattnbench.registry.entry import KernelEntry  # noqa: E402
from lattnbench.spec import Case  # noqa: E402

DTYPES = {"fp64": jnp.float64, "fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}


def jax_device(device: str):
    kind = "gpu" if device.startswith("cuda") else "cpu"
    try:
        return jax.devices(kind)[0]
    except RuntimeError:
        raise Unsupported(f"JAX has no {kind} backend here") from None


class JaxProblem(Problem):
    """JAX arrays placed once on the JAX device; jitted calls; gradients from jax.vjp."""

    def __init__(self, entry: KernelEntry, case: Case, device: str, seed: int = 0,
                 arrays: dict[str, np.ndarray] | None = None, tensors: dict[str, jax.Array] | None = None) -> None:
        self.dev = jax_device(device)
        if case.dtype == "fp64" and not jax.config.jax_enable_x64:
            raise Unsupported("fp64 in JAX needs JAX_ENABLE_X64=1")
        super().__init__(entry, case, device, seed)
        self.arrays = tensors if tensors is not None else self._build(arrays, seed)
        if entry.sequence_parallel:
            self.arrays = _split_over_devices(self.arrays, case)
        self.diff = self.differentiable(self.arrays)
        self._f = self._closure()
        self._fwd = jax.jit(self._f)
        self._fb = jax.jit(self._fwd_and_grad)

    def inputs(self) -> dict[str, jax.Array]:
        return self.arrays

    def _build(self, arrays, seed) -> dict[str, jax.Array]:
        out = {}
        if arrays is None:  # draw on the device
            key = jax.random.PRNGKey(seed)
            for i, (name, shape) in enumerate(self.fam.shapes(self.case).items()):
                want = DTYPES[self.stored_dtype(name)]
                with jax.default_device(self.dev):
                    x = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
                    how = self.fam.draw(name)
                    if how == "gate":
                        x = jax.nn.log_sigmoid(x) / self.case.gate_norm
                    elif how == "scaled":
                        x = x * self.case.input_scale
                    elif how == "unit":
                        x = x * jax.lax.rsqrt((x * x).sum(-1, keepdims=True) + UNIT_EPS)
                    elif how == "sigmoid":
                        x = jax.nn.sigmoid(x)
                    out[name] = x.astype(want)
        else:
            for name, x in arrays.items():
                want = DTYPES[self.stored_dtype(name)]
                out[name] = jax.device_put(jnp.asarray(x, dtype=want), self.dev)
        return out

    def _closure(self) -> Callable:
        fn, c = self.fn, self.const
        names = self.diff
        gamma = None if c.gamma is None else jnp.asarray(c.gamma)
        cu = c.cu_seqlens

        def f(*xs):
            return self.call(fn, dict(zip(names, xs)), gamma, cu)
        return f

    def _args(self):
        return [self.arrays[n] for n in self.diff]

    def _cots(self, outs):
        cots = [self.arrays["do"].astype(outs[0].dtype)]
        if len(outs) > 1:
            cots.append(self.arrays["dS"].astype(outs[1].dtype))
        return tuple(cots)

    def _fwd_and_grad(self, args, do, ds):
        outs, pullback = jax.vjp(self._f, *args)
        cots = (do.astype(outs[0].dtype),) + ((ds.astype(outs[1].dtype),) if len(outs) > 1 else ())
        return outs, pullback(cots)

    def fwd(self):
        return self._fwd(*self._args())

    def fwdbwd(self):
        return self._fb(self._args(), self.arrays["do"], self.arrays.get("dS", self.arrays["do"]))

    def bwd_callable(self) -> Callable[[], object]:
        """Backward alone: residuals computed once (jitted forward), then only the pullback runs."""
        outs, pullback = jax.jit(lambda *a: jax.vjp(self._f, *a))(*self._args())
        cots = self._cots(outs)
        apply = jax.jit(lambda p, c: p(c))
        return lambda: apply(pullback, cots)

    def sync(self, result=None) -> None:
        if result is not None:
            jax.block_until_ready(result)

    def results(self, eager: bool = False) -> dict[str, jax.Array | None]:
        """Outputs and gradients by tensor name; ``eager`` runs the same call without ``jax.jit``
        (check-grad's fallback for a kernel whose gradient cannot be traced)."""
        if eager:
            with jax.disable_jit():
                outs, grads = self._fwd_and_grad(self._args(), self.arrays["do"],
                                                 self.arrays.get("dS", self.arrays["do"]))
        else:
            outs, grads = self.fwdbwd()
        return self.named(outs, grads)

    def peak_mb(self, mode: str) -> tuple[float, str]:
        """XLA's compiled memory analysis: temporaries + outputs (arguments excluded), in MB."""
        if mode == "fwd":
            lowered = self._fwd.lower(*self._args())
        else:
            lowered = self._fb.lower(self._args(), self.arrays["do"], self.arrays.get("dS", self.arrays["do"]))
        stats = lowered.compile().memory_analysis()
        if stats is None:
            raise Unsupported("this JAX backend gives no memory analysis")
        peak = stats.temp_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
        return peak / 2**20, "xla.memory_analysis(temp+output)"


def _split_over_devices(arrays: dict, case: Case) -> dict:
    """A sequence-parallel kernel's inputs, placed once where its shard_map wants them: [B, T, ...]
    tensors split along T over the mesh axis, the states replicated."""
    from lattnbench.kernels.lightning.parallel.jax_sp import sequence_mesh, shardings

    found = len(jax.devices())
    if found != case.world_size:
        raise Unsupported(f"world size {case.world_size} needs as many JAX devices; this process sees {found}")
    if case.seqlen % case.world_size:
        raise Unsupported(f"T={case.seqlen} must be a multiple of the {case.world_size} devices")
    split, whole = shardings(sequence_mesh(case.world_size))
    return {n: jax.device_put(x, split if n in ("q", "k", "v", "do", "g") else whole) for n, x in arrays.items()}


def is_oom(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
