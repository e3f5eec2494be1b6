"""PyTorch references for the kernel contract that every bundled kernel honours.

Three independent formulations, each computing in the dtype it is given (pass fp64 for a
reference): the quadratic form of Lightning Attention, a token-by-token loop of the general
recurrence, and an fp64 chunked form for sequences too long for the quadratic one. Tests
check them against each other and against a brute-force loop, forming the chain of trust.

Layout ``[B, T, H, D]``; k and v may have fewer (kv) heads than q (GQA). Every function
returns ``(o, final_state)`` with ``final_state`` of shape ``[N, H, D, E]`` (N = B, or the
number of sequences with ``cu_seqlens``).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor


def expand_kv(x: Tensor, num_heads: int) -> Tensor:
    """Repeat kv heads so that query head h reads kv head h // (H / H_kv)."""
    kv_heads = x.shape[2]
    if num_heads % kv_heads:
        raise ValueError(f"query heads ({num_heads}) must be a multiple of kv heads ({kv_heads})")
    return x if kv_heads == num_heads else x.repeat_interleave(num_heads // kv_heads, dim=2)


def check_inputs(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None, cu_seqlens) -> int:
    """Validate shapes of the contract; return N, the number of sequences."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, T, H, D]; got ranks {q.dim()}, {k.dim()}, {v.dim()}")
    b, t, h, d = q.shape
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or k.shape[2] != v.shape[2] or k.shape[3] != d:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if h % k.shape[2]:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({k.shape[2]})")
    n = b
    if cu_seqlens is not None:
        if b != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1, got {b}")
        cu = [int(x) for x in cu_seqlens]
        if cu[0] != 0 or cu[-1] != t or any(a > c for a, c in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {cu}")
        n = len(cu) - 1
    if initial_state is not None:
        want = (n, h, d, v.shape[3])
        if tuple(initial_state.shape) != want:
            raise ValueError(f"initial_state must be {want}, got {tuple(initial_state.shape)}")
    return n


def per_sequence(
    fn: Callable[..., tuple[Tensor, Tensor]],
    q: Tensor, k: Tensor, v: Tensor, gates: dict[str, Tensor | None],
    initial_state: Tensor | None, cu_seqlens, **kw,
) -> tuple[Tensor, Tensor]:
    """Run a dense implementation once per packed sequence and stitch the results.

    ``gates`` are per-token tensors ([B, T, ...]) sliced with the sequence, passed by keyword.
    """
    cu = [int(x) for x in cu_seqlens]
    outs, states = [], []
    for i, (bos, eos) in enumerate(zip(cu, cu[1:])):
        sl = slice(bos, eos)
        h0 = None if initial_state is None else initial_state[i : i + 1]
        g_i = {name: None if g is None else g[:, sl] for name, g in gates.items()}
        o, s = fn(q[:, sl], k[:, sl], v[:, sl], initial_state=h0, **g_i, **kw)
        outs.append(o)
        states.append(s)
    return torch.cat(outs, dim=1), torch.cat(states, dim=0)


def _gamma(gamma, h: int, like: Tensor) -> Tensor:
    if gamma is None:
        return torch.zeros(h, dtype=like.dtype, device=like.device)
    g = torch.as_tensor(gamma, device=like.device).to(like.dtype).reshape(-1)
    if g.numel() != h:
        raise ValueError(f"gamma must have one value per query head ({h}), got {g.numel()}")
    return g


def lightning_naive(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, reverse: bool = False, cu_seqlens=None,
) -> tuple[Tensor, Tensor]:
    """Quadratic form: o = scale·((Q Kᵀ) ⊙ M) V + decayed S_0 term, M[t,s] = exp(γ(t−s)), s ≤ t."""
    n = check_inputs(q, k, v, initial_state, cu_seqlens)
    if cu_seqlens is not None:
        return per_sequence(lightning_naive, q, k, v, {}, initial_state, cu_seqlens,
                             gamma=gamma, scale=scale, reverse=reverse)
    b, t, h, d = q.shape
    e = v.shape[3]
    scale = d**-0.5 if scale is None else scale
    k, v = expand_kv(k, h), expand_kv(v, h)
    g = _gamma(gamma, h, q)
    pos = torch.arange(t, device=q.device, dtype=q.dtype)
    dist = (pos[None, :] - pos[:, None]) if reverse else (pos[:, None] - pos[None, :])  # [t, s]
    causal = dist >= 0
    logm = torch.where(causal, g[:, None, None] * dist, torch.full_like(dist, float("-inf")))
    mask = torch.exp(logm)  # [h, t, s]
    scores = torch.einsum("bthd,bshd->bhts", q, k) * mask
    o = scale * torch.einsum("bhts,bshe->bthe", scores, v)
    # state after the last step: S = exp(γT) S0 + Σ_s exp(γ·(distance to the end)) k_s v_sᵀ
    to_end = pos if reverse else (t - 1 - pos)
    w = torch.exp(g[:, None] * to_end[None, :])  # [h, s]
    final = torch.einsum("hs,bshd,bshe->bhde", w, k, v)
    if initial_state is not None:
        s0 = initial_state.to(q.dtype)
        steps = (t - pos) if reverse else (pos + 1)
        w0 = torch.exp(g[:, None] * steps[None, :])  # [h, t]
        o = o + scale * torch.einsum("ht,bthd,bhde->bthe", w0, q, s0)
        final = final + torch.exp(g * t)[None, :, None, None] * s0
    del n
    return o.to(q.dtype), final


def recurrent_naive(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor | None = None, g_gamma=None,
    gk: Tensor | None = None, gv: Tensor | None = None, scale: float | None = None,
    initial_state: Tensor | None = None, reverse: bool = False, cu_seqlens=None,
) -> tuple[Tensor, Tensor]:
    """Token-by-token general recurrence S_t = (exp(g+gk+γ) ⊗ exp(gv)) ⊙ S_{t−1} + k_t v_tᵀ."""
    check_inputs(q, k, v, initial_state, cu_seqlens)
    if cu_seqlens is not None:
        return per_sequence(recurrent_naive, q, k, v, {"g": g, "gk": gk, "gv": gv}, initial_state, cu_seqlens,
                             g_gamma=g_gamma, scale=scale, reverse=reverse)
    b, t, h, d = q.shape
    e = v.shape[3]
    scale = d**-0.5 if scale is None else scale
    k, v = expand_kv(k, h), expand_kv(v, h)
    gam = _gamma(g_gamma, h, q)
    state = torch.zeros(b, h, d, e, dtype=q.dtype, device=q.device)
    if initial_state is not None:
        state = state + initial_state.to(q.dtype)
    out = torch.empty(b, t, h, e, dtype=q.dtype, device=q.device)
    order = range(t - 1, -1, -1) if reverse else range(t)
    for i in order:
        log_k = gam[None, :, None].expand(b, h, d)
        if g is not None:
            log_k = log_k + g[:, i].to(q.dtype)
        if gk is not None:
            log_k = log_k + gk[:, i].to(q.dtype)
        decay = torch.exp(log_k)[..., None]
        if gv is not None:
            decay = decay * torch.exp(gv[:, i].to(q.dtype))[..., None, :]
        state = decay * state + k[:, i, :, :, None] * v[:, i, :, None, :]
        out[:, i] = scale * torch.einsum("bhd,bhde->bhe", q[:, i], state)
    return out, state


def lightning_chunked(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, reverse: bool = False, cu_seqlens=None,
    chunk: int = 256,
) -> tuple[Tensor, Tensor]:
    """Lightning Attention-2 chunked form, memory O(T·chunk): the long-sequence reference.

    Inside a chunk the quadratic form; across chunks the state recurrence. Run it in fp64.
    """
    check_inputs(q, k, v, initial_state, cu_seqlens)
    if cu_seqlens is not None:
        return per_sequence(lightning_chunked, q, k, v, {}, initial_state, cu_seqlens,
                             gamma=gamma, scale=scale, reverse=reverse, chunk=chunk)
    if reverse:
        flip = lambda x: x.flip(1)  # noqa: E731 - reverse = forward on the flipped sequence
        o, s = lightning_chunked(flip(q), flip(k), flip(v), gamma, scale, initial_state, False, None, chunk)
        return flip(o), s
    b, t, h, d = q.shape
    e = v.shape[3]
    scale = d**-0.5 if scale is None else scale
    kx, vx = expand_kv(k, h), expand_kv(v, h)
    g = _gamma(gamma, h, q)
    state = torch.zeros(b, h, d, e, dtype=q.dtype, device=q.device)
    if initial_state is not None:
        state = state + initial_state.to(q.dtype)
    out = torch.empty(b, t, h, e, dtype=q.dtype, device=q.device)
    for start in range(0, t, chunk):
        stop = min(start + chunk, t)
        o_c, _ = lightning_naive(q[:, start:stop], kx[:, start:stop], vx[:, start:stop], g, scale, state)
        # lightning_naive already includes the carried state term; recompute the state cheaply
        c = stop - start
        pos = torch.arange(c, device=q.device, dtype=q.dtype)
        w = torch.exp(g[:, None] * (c - 1 - pos)[None, :])
        state = torch.exp(g * c)[None, :, None, None] * state + torch.einsum(
            "hs,bshd,bshe->bhde", w, kx[:, start:stop], vx[:, start:stop])
        out[:, start:stop] = o_c
    return out, state


def softmax_naive(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, causal: bool = True) -> Tensor:
    """Causal softmax attention, materialising the score matrix (the FlashAttention reference)."""
    b, t, h, d = q.shape
    scale = d**-0.5 if scale is None else scale
    k, v = expand_kv(k, h), expand_kv(v, h)
    scores = torch.einsum("bthd,bshd->bhts", q, k) * scale
    if causal:
        keep = torch.ones(t, k.shape[1], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    p = torch.softmax(scores.float() if q.dtype in (torch.float16, torch.bfloat16) else scores, dim=-1)
    return torch.einsum("bhts,bshe->bthe", p.to(v.dtype), v)
