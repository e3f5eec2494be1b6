"""A toy operator family, defined in this one file and registered at import: proof that a family
is one folder's worth of knowledge (here one module) and no harness branch.

The recurrence, per head and channel: ``s_t = s_{t-1} + k_t ⊙ v_t``, ``o_t = scale · q_t ⊙ s_t``
(D = E, state ``[N, H, D]`` in fp32). Kernels are called ``fn(q, k, v, scale, initial_state)``.
"""
from __future__ import annotations

from lattnbench.operators import Family, register
from lattnbench.spec import Case

FEATURES = ("initial_state", "any_dim")


class Toy(Family):
    name = "toy"
    order = 50
    default_features = frozenset(FEATURES)

    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        b, t, h, d = case.batch, case.seqlen, case.heads, case.dim_qk
        s = {"q": (b, t, h, d), "k": (b, t, h, d), "v": (b, t, h, d), "do": (b, t, h, d), "dS": (b, h, d)}
        if case.initial_state:
            s["h0"] = (b, h, d)
        return s

    def call(self, fn, t, gamma, scale, case, cu_seqlens):
        return tuple(fn(t["q"], t["k"], t["v"], scale, t.get("h0")))

    def reference(self, t, case, gamma, scale, cu_seqlens):
        """Token by token in fp64: the definition, not the kernels' cumsum."""
        import torch

        q, k, v = t["q"], t["k"], t["v"]
        s = t["h0"] if "h0" in t else torch.zeros_like(q[:, 0])
        outs = []
        for i in range(q.shape[1]):
            s = s + k[:, i] * v[:, i]
            outs.append(scale * q[:, i] * s)
        return torch.stack(outs, 1), s


register(Toy())


def toy_torch(q, k, v, scale, initial_state):
    """The toy recurrence as one cumsum (torch)."""
    import torch

    s = torch.cumsum(k.float() * v.float(), 1)
    if initial_state is not None:
        s = s + initial_state[:, None]
    return (scale * q.float() * s).to(q.dtype), s[:, -1]


def toy_jax(q, k, v, scale, initial_state):
    """The toy recurrence as one cumsum (JAX)."""
    import jax.numpy as jnp

    def f32(x):
        return x.astype(jnp.float32)
    s = jnp.cumsum(f32(k) * f32(v), 1)
    if initial_state is not None:
        s = s + initial_state[:, None]
    return (scale * f32(q) * s).astype(q.dtype), s[:, -1]


def toy_wrong(q, k, v, scale, initial_state):
    """A plausible bug: the state leaks (each step keeps 0.9 of it). Must FAIL check-grad."""
    import torch

    kv = k.float() * v.float()
    s = initial_state if initial_state is not None else torch.zeros_like(kv[:, 0])
    outs = []
    for i in range(q.shape[1]):
        s = 0.9 * s + kv[:, i]
        outs.append(scale * q[:, i].float() * s)
    return torch.stack(outs, 1).to(q.dtype), s


for _fn, _name in ((toy_torch, "toy-torch"), (toy_jax, "toy-jax"), (toy_wrong, "toy-wrong")):
    _fn.lattnbench_family = "toy"
    _fn.lattnbench_name = f"plugin/{_name}"
toy_jax.lattnbench_framework = "jax"
