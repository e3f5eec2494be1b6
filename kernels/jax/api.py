"""Public JAX API, matching the seeds (ejKernel's ``recurrent``, ``lightning_attn``, ``recurrent_gla``).

Same argument names and meanings, the same ValueErrors for bad varlen input, plus ``impl=``:

- ``"recurrent"``: token-by-token ``lax.scan`` with a chunk-checkpointed custom VJP (every gate)
- ``"chunked"``:   Lightning Attention-2 block-parallel form (γ per head, GLA's g / gk; not gv)
- ``"naive"``:     the references (quadratic for Lightning, token loop otherwise), fp32 or fp64
- ``"triton"``:    the bundled Triton kernel through jax-triton (GPU; γ only, no varlen)

Layout ``[B, T, H, D]``; key/value may have fewer heads (GQA). Returns ``(o, final_state)``:
``o`` in the input dtype, ``final_state [N, H, D, E]`` in fp32. With ``cu_seqlens`` the batch is 1
(packed), states restart per sequence, ``initial_state`` is ``[N, H, D, E]``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..decay import lightning_decay
from . import naive as _naive
from ..common.jax_helpers import check_inputs
from .chunked import chunked_attention
from .recurrent import recurrent_attention

IMPLS = ("recurrent", "chunked", "naive", "triton")


def _check_impl(impl):
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


def _seed_varlen_checks(query, initial_state, cu_seqlens):
    """The seeds' two ValueErrors (raised before anything else, with their messages)."""
    if cu_seqlens is not None:
        if query.shape[0] != 1:
            raise ValueError(
                f"The batch size is expected to be 1 rather than {query.shape[0]} when using `cu_seqlens`. "
                f"Please flatten variable-length inputs before processing.")
        if initial_state is not None and initial_state.shape[0] != len(cu_seqlens) - 1:
            raise ValueError(
                f"The number of initial states is expected to be equal to the number of input sequences, "
                f"i.e., {len(cu_seqlens) - 1} rather than {initial_state.shape[0]}.")


def _compute_dtype(x):
    return jnp.float64 if x.dtype == jnp.float64 else jnp.float32


def _run_naive(fn, query, key, value, initial_state, **kw):
    """The references compute in the dtype given: fp32 (fp64 under x64) in, input dtype out."""
    cdt = _compute_dtype(query)
    cast = lambda x: None if x is None else x.astype(cdt)  # noqa: E731
    kw = {name: (cast(val) if hasattr(val, "astype") and name in ("g", "gk", "gv") else val)
          for name, val in kw.items()}
    o, s = fn(cast(query), cast(key), cast(value), initial_state=cast(initial_state), **kw)
    return o.astype(query.dtype), s.astype(jnp.promote_types(cdt, jnp.float32))


def _run_triton(query, key, value, gamma, scale, initial_state, reverse, cu_seqlens):
    if cu_seqlens is not None:
        raise ValueError("impl='triton' does not take cu_seqlens; use impl='chunked' for packed varlen")
    try:
        import jax
        if jax.default_backend() != "gpu":
            raise RuntimeError(f"the JAX backend is {jax.default_backend()!r}")
        from ..lightning.triton.jax_bridge import lightning_attn_jax_triton
    except (ImportError, RuntimeError) as exc:
        raise RuntimeError(
            "impl='triton' is unavailable: it needs a CUDA GPU, jax-triton and "
            f"lattnbench.kernels.lightning.triton.jax_bridge ({exc}); use impl='chunked'") from exc
    try:
        return lightning_attn_jax_triton(query, key, value, gamma=gamma, scale=scale,
                                         initial_state=initial_state, reverse=reverse)
    except ImportError as exc:  # jax-triton is imported lazily by the bridge
        raise RuntimeError(f"impl='triton' is unavailable: {exc}; use impl='chunked'") from exc


def recurrent(query, key, value, g=None, g_gamma=None, gk=None, gv=None, softmax_scale=None,
              initial_state=None, reverse=False, cu_seqlens=None, impl="recurrent", chunk=None):
    """General gated linear recurrence (the seeds' ``recurrent``):

        S_t = (exp(g_t + gk_t + γ) ⊗ exp(gv_t)) ⊙ S_{t−1} + k_t v_tᵀ,   o_t = softmax_scale · S_tᵀ q_t

    g, gk [B,T,H,D], gv [B,T,H,E], g_gamma [H] (log decays, ≤ 0); gradients for q, k, v, g, gk, gv
    and initial_state. ``chunk``: block length of the chosen implementation (default 64; 128 for
    Lightning's chunked form).
    """
    _check_impl(impl)
    _seed_varlen_checks(query, initial_state, cu_seqlens)
    d = query.shape[-1]
    e = value.shape[-1]
    check_inputs(query, key, value, initial_state, cu_seqlens,
                 gates=(("g", g, d), ("gk", gk, d), ("gv", gv, e)))
    kw = {} if chunk is None else {"chunk": chunk}
    if impl == "recurrent":
        return recurrent_attention(query, key, value, g=g, g_gamma=g_gamma, gk=gk, gv=gv, scale=softmax_scale,
                                   initial_state=initial_state, reverse=reverse, cu_seqlens=cu_seqlens, **kw)
    if impl == "naive":
        return _run_naive(_naive.recurrent_naive, query, key, value, initial_state, g=g, g_gamma=g_gamma,
                          gk=gk, gv=gv, scale=softmax_scale, reverse=reverse, cu_seqlens=cu_seqlens)
    if impl == "triton":
        if g is not None or gk is not None or gv is not None:
            raise ValueError("impl='triton' supports the per-head decay g_gamma only (no g, gk, gv)")
        return _run_triton(query, key, value, g_gamma, softmax_scale, initial_state, reverse, cu_seqlens)
    if gv is not None:
        raise ValueError("impl='chunked' does not support gv (value-side gates); use impl='recurrent'")
    gsum = g if gk is None else (gk if g is None else g + gk)
    return chunked_attention(query, key, value, g=gsum, g_gamma=g_gamma, scale=softmax_scale,
                             initial_state=initial_state, reverse=reverse, cu_seqlens=cu_seqlens, **kw)


def lightning_attn(query, key, value, layer_idx, num_layers, softmax_scale=None, initial_state=None,
                   reverse=False, cu_seqlens=None, impl="chunked", chunk=None):
    """Lightning Attention with the seeds' layer-dependent decay
    ``g_gamma = −(8/H)(1 − layer_idx/num_layers)·arange(H)`` (``lattnbench.kernels.decay``)."""
    _check_impl(impl)
    _seed_varlen_checks(query, initial_state, cu_seqlens)
    if softmax_scale is None:
        softmax_scale = key.shape[-1] ** -0.5
    gamma = jnp.asarray(lightning_decay(query.shape[2], layer_idx, num_layers))
    if impl == "naive":
        check_inputs(query, key, value, initial_state, cu_seqlens)
        return _run_naive(_naive.lightning_naive, query, key, value, initial_state, gamma=gamma,
                          scale=softmax_scale, reverse=reverse, cu_seqlens=cu_seqlens)
    return recurrent(query, key, value, g_gamma=gamma, softmax_scale=softmax_scale, initial_state=initial_state,
                     reverse=reverse, cu_seqlens=cu_seqlens, impl=impl, chunk=chunk)


def recurrent_gla(query, key, value, g=None, g_gamma=None, softmax_scale=None, initial_state=None,
                  reverse=False, cu_seqlens=None, impl="chunked", chunk=None):
    """Gated Linear Attention: ``S_t = diag(exp(g_t + γ)) S_{t−1} + k_t v_tᵀ`` (the seeds' ``recurrent_gla``)."""
    _check_impl(impl)
    _seed_varlen_checks(query, initial_state, cu_seqlens)
    if softmax_scale is None:
        softmax_scale = key.shape[-1] ** -0.5
    return recurrent(query, key, value, g=g, g_gamma=g_gamma, softmax_scale=softmax_scale,
                     initial_state=initial_state, reverse=reverse, cu_seqlens=cu_seqlens, impl=impl, chunk=chunk)
