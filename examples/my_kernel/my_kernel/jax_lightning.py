"""A token-by-token Lightning recurrence in JAX (``lax.scan``): the JAX side of the plugin API.

JAX plugins get JAX arrays (q, k, v, initial_state as arguments being differentiated; gamma
and cu_seqlens as constants) and are called inside ``jax.jit`` by lattnbench.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def recurrent_lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Lightning recurrence S_t = exp(γ)·S_{t-1} + k_t v_tᵀ, o_t = scale·S_tᵀ q_t, in JAX (example plugin)."""
    if cu_seqlens is not None:  # never reached: lattnbench_features excludes varlen
        raise NotImplementedError("recurrent_lightning has no varlen")
    b, t, h, d = q.shape
    group = h // k.shape[2]
    f32 = jnp.float32
    k = jnp.repeat(k, group, axis=2)
    v = jnp.repeat(v, group, axis=2)
    e = v.shape[3]
    decay = jnp.exp(jnp.asarray(gamma, f32))[None, :, None, None]
    s0 = jnp.zeros((b, h, d, e), f32) if initial_state is None else initial_state.astype(f32)
    xs = tuple(jnp.moveaxis(x.astype(f32), 1, 0) for x in (q, k, v))  # time-major
    if reverse:
        xs = tuple(x[::-1] for x in xs)

    def step(state, x):
        q_t, k_t, v_t = x
        state = decay * state + k_t[..., :, None] * v_t[..., None, :]
        o_t = scale * jnp.einsum("bhd,bhde->bhe", q_t, state, precision=jax.lax.Precision.HIGHEST)
        return state, o_t

    final, o = jax.lax.scan(step, s0, xs)
    if reverse:
        o = o[::-1]
    return jnp.moveaxis(o, 0, 1).astype(q.dtype), final


recurrent_lightning.lattnbench_name = "plugin/my-jax-recurrent"
recurrent_lightning.lattnbench_framework = "jax"
recurrent_lightning.lattnbench_features = ("initial_state", "reverse", "gqa", "dv", "any_dim")
