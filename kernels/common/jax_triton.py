"""What the jax-triton bridges share: the jax-triton import (``jax_triton``), the host-side
checks of q, k, v and the initial state (``check_qkv``) and the dots' precision
(``dot_precision``).

jax-triton is imported lazily: importing it (0.3.1) sets ``triton.knobs.cache.dir`` to ``''``,
which breaks every later torch-Triton compile, so the knob is restored right after the import.
"""
from __future__ import annotations

_JT = None


def jax_triton():
    """Import jax_triton once, restoring Triton's cache-dir knob that the import clobbers."""
    global _JT
    if _JT is None:
        import triton

        knobs = getattr(triton, "knobs", None)
        saved = knobs.cache.dir if knobs is not None else None
        import jax_triton as jt

        if knobs is not None:
            knobs.cache.dir = saved
        _JT = jt
    return _JT


def dot_precision(dtype) -> str:
    """``launch.dot_precision`` for a JAX dtype: IEEE for fp32 inputs, tf32 for 16-bit ones."""
    import jax.numpy as jnp

    return "ieee" if dtype == jnp.float32 else "tf32"


def check_qkv(q, k, v, initial_state, cu_seqlens):
    """The bridge's host-side checks of q, k, v, the initial state and cu_seqlens (no GPU
    needed), shared by the bridges; raises ValueError / NotImplementedError. Returns
    (q, k, v, initial_state fp32 or None) as JAX arrays."""
    import jax.numpy as jnp

    if cu_seqlens is not None:
        raise NotImplementedError("cu_seqlens is not supported by the jax-triton bridge")
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be [B, T, H, D]; got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    b, t, h, d = q.shape
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or k.shape[3] != d or k.shape[2] != v.shape[2]:
        raise ValueError(f"shape mismatch: q {q.shape}, k {k.shape}, v {v.shape}")
    if h % k.shape[2]:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({k.shape[2]})")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (jnp.float32, jnp.float16, jnp.bfloat16):
        raise ValueError(f"q, k, v must share one of fp32/fp16/bf16, got {q.dtype}, {k.dtype}, {v.dtype}")
    e = v.shape[3]
    if initial_state is not None:
        initial_state = jnp.asarray(initial_state, jnp.float32)
        if initial_state.shape != (b, h, d, e):
            raise ValueError(f"initial_state must be {(b, h, d, e)}, got {initial_state.shape}")
    return q, k, v, initial_state
