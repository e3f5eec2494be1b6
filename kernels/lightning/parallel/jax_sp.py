"""Sequence-parallel Lightning Attention in JAX: ``shard_map`` over one mesh axis (LASP-2).

Each device holds a contiguous shard of T/P tokens. The local chunked kernel
(``lattnbench.kernels.jax.chunked_attention``) runs with zero carried state and gives ``o⁰`` and
the shard's state ``L``; one ``all_gather`` of the ``[B, H, D, E]`` states (their size does not
depend on T) lets every device combine the prefix it needs,
``carry(p) = λ^{p·T_r} h0 + Σ_{j<p} λ^{(p−1−j)·T_r} L_j`` in scan order, and the correction
``o_t += scale·λ^{t+1}·carryᵀ q_t`` finishes the output. Gradients come from JAX's autodiff
through ``shard_map`` (the all-gather transposes to a reduce-scatter) and the local kernel's
custom VJP. Packed varlen is not taken here: its shards differ in structure per device, which
one SPMD program cannot express.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "sp"
F32 = jnp.float32


@lru_cache(maxsize=None)
def sequence_mesh(devices: int | None = None) -> Mesh:
    """A one-axis mesh (``sp``) over the first ``devices`` devices of the default backend (all if None)."""
    found = jax.devices()
    n = len(found) if devices is None else devices
    if n > len(found):
        raise ValueError(f"a mesh of {n} devices was asked for, but JAX sees {len(found)}")
    return Mesh(np.array(found[:n]), (AXIS,))


def shardings(mesh: Mesh) -> tuple[NamedSharding, NamedSharding]:
    """(tokens split along T, replicated): where the inputs of ``lightning_attn_shard_map`` live."""
    return NamedSharding(mesh, P(None, AXIS)), NamedSharding(mesh, P())


def _local_chunked(q, k, v, gamma, scale, zeros, reverse):
    from ...jax import chunked_attention

    return chunked_attention(q, k, v, g_gamma=gamma, scale=scale, initial_state=zeros, reverse=reverse)


def _shard_body(q, k, v, h0, gamma, scale, reverse, world, local):
    # zero carried state, typed per device (a kernel's own zeros would be replicated, and its
    # scan carry would then change type inside shard_map)
    zeros = lax.pcast(jnp.zeros(h0.shape, F32), (AXIS,), to="varying")
    o0, state = local(q, k, v, gamma, scale, zeros, reverse)
    t_r = q.shape[1]
    rank = lax.axis_index(AXIS)
    pos = (world - 1 - rank) if reverse else rank
    log_step = gamma.astype(F32) * t_r                        # log λ^{T_r}, [H]
    # the same [P, B, H, D, E] on every device (rank order): the final state is replicated
    states = lax.all_gather(state.astype(F32), AXIS, to="invarying")
    if reverse:
        states = states[::-1]                                  # scan order
    j = jnp.arange(world)
    before = j < pos
    hops = jnp.where(before, pos - 1 - j, 0).astype(F32)
    coef = jnp.where(before[:, None], jnp.exp(hops[:, None] * log_step[None, :]), 0.0)      # [P, H]
    carry = jnp.exp(pos * log_step)[None, :, None, None] * h0 + jnp.einsum("jh,jbhde->bhde", coef, states)
    ends = jnp.exp((world - 1 - j).astype(F32)[:, None] * log_step[None, :])
    total = jnp.exp(world * log_step)[None, :, None, None] * h0 + jnp.einsum("jh,jbhde->bhde", ends, states)
    steps = jnp.arange(t_r, dtype=F32)
    steps = (t_r - steps) if reverse else (steps + 1)
    w = jnp.exp(steps[:, None] * gamma.astype(F32)[None, :])  # [T_r, H]
    fix = jnp.einsum("th,bthd,bhde->bthe", w, q.astype(F32), carry, precision=lax.Precision.HIGHEST)
    return (o0.astype(F32) + scale * fix).astype(o0.dtype), total


def lightning_attn_shard_map(q, k, v, gamma=None, scale=None, initial_state=None, reverse=False,
                             mesh: Mesh | None = None, local=None):
    """Lightning Attention with T split over ``mesh``'s ``sp`` axis; layout [B, T, H, D].

    Returns ``(o, S_T)`` like the single-device kernels (o split along T, S_T replicated, fp32).
    T must be a multiple of the axis size. ``local(q, k, v, gamma, scale, h0, reverse) -> (o, S)``
    is the per-shard kernel (default: the pure-JAX chunked one).
    """
    mesh = sequence_mesh() if mesh is None else mesh
    world = mesh.shape[AXIS]
    b, t, h, d = q.shape
    e = v.shape[-1]
    if t % world:
        raise ValueError(f"T={t} must be a multiple of the {world} devices of the mesh axis {AXIS!r}")
    gamma = jnp.zeros((h,), F32) if gamma is None else jnp.asarray(gamma, F32).reshape(h)
    scale = d**-0.5 if scale is None else float(scale)
    h0 = jnp.zeros((b, h, d, e), F32) if initial_state is None else initial_state.astype(F32)
    if h0.shape != (b, h, d, e):
        raise ValueError(f"initial_state must be [B, H, D, E] = {(b, h, d, e)}, got {h0.shape}")
    local = _local_chunked if local is None else local

    def body(q_, k_, v_, h0_, g_):
        return _shard_body(q_, k_, v_, h0_, g_, scale, bool(reverse), world, local)

    split, whole = P(None, AXIS), P()
    mapped = jax.shard_map(body, mesh=mesh, in_specs=(split, split, split, whole, whole),
                           out_specs=(split, whole))
    return mapped(q, k, v, h0, gamma)
