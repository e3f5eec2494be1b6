"""Shared helpers of the JAX kernel set: input checks (the seeds' messages), GQA, varlen maps and
the chunk-aligned varlen layout."""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST


def is_concrete(x) -> bool:
    """True when x has a value now (numpy, list, or a JAX array outside a trace)."""
    if x is None or isinstance(x, (np.ndarray, list, tuple)):
        return True
    try:
        tracer = jax.core.Tracer
    except AttributeError:  # moved in newer JAX
        from jax._src.core import Tracer as tracer
    return not isinstance(x, tracer)


def concrete_cu(cu_seqlens, what: str = "this implementation") -> np.ndarray:
    """cu_seqlens as an int64 numpy array; a clear error when it is traced."""
    if not is_concrete(cu_seqlens):
        raise ValueError(
            f"cu_seqlens must be concrete (numpy or a JAX array outside jit) for {what}: "
            "close over it, pass it as a static argument, or use impl='recurrent'.")
    return np.asarray(cu_seqlens).astype(np.int64).reshape(-1)


def check_inputs(q, k, v, initial_state=None, cu_seqlens=None, gates=()) -> int:
    """Validate the contract's shapes; return N (B, or the number of packed sequences).

    The cu_seqlens messages are the seeds' (ejKernel's ``recurrent_gla`` / ``lightning_attn``).
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"query, key, value must be [B, T, H, D]; got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    b, t, h, d = q.shape
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or k.shape[2] != v.shape[2] or k.shape[3] != d:
        raise ValueError(f"shape mismatch: query {q.shape}, key {k.shape}, value {v.shape}")
    if h % k.shape[2]:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({k.shape[2]})")
    e = v.shape[3]
    for name, g, last in gates:
        if g is not None and tuple(g.shape) != (b, t, h, last):
            raise ValueError(f"{name} must be {(b, t, h, last)}, got {tuple(g.shape)}")
    n = b
    if cu_seqlens is not None:
        if b != 1:
            raise ValueError(
                f"The batch size is expected to be 1 rather than {b} when using `cu_seqlens`. "
                f"Please flatten variable-length inputs before processing.")
        n = int(np.shape(cu_seqlens)[0]) - 1
        if np.ndim(cu_seqlens) != 1 or n < 1:
            raise ValueError(f"cu_seqlens must be a 1-D array [N + 1] with N >= 1, got shape {np.shape(cu_seqlens)}")
        if initial_state is not None and initial_state.shape[0] != n:
            raise ValueError(
                f"The number of initial states is expected to be equal to the number of input sequences, "
                f"i.e., {n} rather than {initial_state.shape[0]}.")
        if is_concrete(cu_seqlens):
            cu = np.asarray(cu_seqlens).astype(np.int64).reshape(-1)
            if cu[0] != 0 or cu[-1] != t or np.any(np.diff(cu) < 0):
                raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {cu.tolist()}")
    if initial_state is not None and tuple(initial_state.shape) != (n, h, d, e):
        raise ValueError(f"initial_state must be {(n, h, d, e)}, got {tuple(initial_state.shape)}")
    return n


def expand_kv(x, num_heads: int):
    """Repeat kv heads so that query head h reads kv head h // (H / H_kv) (autodiff sums the group)."""
    kv = x.shape[2]
    return x if kv == num_heads else jnp.repeat(x, num_heads // kv, axis=2)


def default_scale(scale, d: int) -> float:
    return d**-0.5 if scale is None else scale


def gamma_array(gamma, h: int, dtype=jnp.float32):
    """Per-head log decay γ as an [H] array (zeros when None)."""
    if gamma is None:
        return None
    g = jnp.asarray(gamma, dtype=dtype).reshape(-1)
    if g.shape[0] != h:
        raise ValueError(f"g_gamma must have one value per query head ({h}), got {g.shape[0]}")
    return g


def flip_cu(cu, t: int):
    """cu_seqlens of the time-reversed packed sequence (sequences in reverse order, each reversed)."""
    return t - cu[::-1]


def varlen_maps(cu, t: int):
    """Per token: sequence id, first-token and last-token flags (works on numpy or traced cu)."""
    xp = np if isinstance(cu, np.ndarray) else jnp
    pos = xp.arange(t)
    seq = xp.searchsorted(cu[1:], pos, side="right")
    start = pos == cu[seq]
    end = pos == cu[seq + 1] - 1
    return seq, start, end


def varlen_layout(cu, t, c):
    """Chunk-aligned layout of packed sequences (all numpy, static), for the chunked forms: each
    sequence starts a new chunk of c tokens. Returns (src: the token each padded position reads,
    t for padding, which reads an appended zero row; dst: the padded position of each token;
    flag: chunks that start a sequence; seq: the sequence of each chunk; last: each sequence's
    last chunk, -1 when it is empty)."""
    lens = np.diff(cu)
    nch = -(-lens // c)
    coff = np.concatenate([[0], np.cumsum(nch)])
    tp = int(coff[-1]) * c
    src = np.full(max(tp, c), t, np.int64)                # padding reads the zero row at index t
    dst = np.empty(t, np.int64)
    for i, (bos, n) in enumerate(zip(cu[:-1], lens)):
        p0 = coff[i] * c
        src[p0 : p0 + n] = np.arange(bos, bos + n)
        dst[bos : bos + n] = np.arange(p0, p0 + n)
    nc = max(int(coff[-1]), 1)
    flag = np.zeros(nc, bool)
    seq = np.zeros(nc, np.int64)
    for i in range(len(lens)):
        if nch[i]:
            flag[coff[i]] = True
            seq[coff[i] : coff[i + 1]] = i
    last = np.where(nch > 0, coff[1:] - 1, -1)
    return src, dst, flag, seq, last
