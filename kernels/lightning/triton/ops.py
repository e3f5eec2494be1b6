"""torch entry points of the Triton Lightning Attention kernels (autograd included).

An eager call is host-bound at short sequences, so its path does little: checks on shapes and
dtypes only (``common.checks``), no device sync, one launch-key lookup per kernel launch
(``common.launch``), no autograd node when no gradient is wanted. Under torch.compile the entry
point calls the same launches through the custom ops of ``library`` instead, so the graph has no
break.
Why and what it costs: docs/design/lightning-host-path.md.
"""
from __future__ import annotations


from collections.abc import Callable

import torch

from ...common import checks
from ...common.arith import cdiv, pow2, shape_bucket
from ...common.launch import Launcher, alignment, dot_precision, raw_stream
from . import configs as _cfg
from . import kernels as _k
from .scratch import scratch

Tensor = torch.Tensor

# fixed launch config under the interpreter (autotune cannot run there); tests set TR
_INTERP_META = dict(zip(("BT", "BV", "num_warps", "num_stages"), _cfg.INTERP_CONFIG), TR=0)


def ensure_allocator() -> None:
    """Set Triton's global-scratch allocator when none is set. It is a ContextVar, i.e. per thread:
    the backward runs on autograd's device thread, so both directions call this before launching.
    A user's own allocator is kept."""
    alloc = _cfg.triton_allocation
    if _cfg.TMA_OK and isinstance(alloc._allocator.get(), alloc.NullAllocator):
        import triton

        triton.set_allocator(scratch)


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernels fully write (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


_FWD_LAUNCH = Launcher(_k, "lightning_fwd", "lightning_fwd_kernel", _INTERP_META)
_BWD_LAUNCH = Launcher(_k, "lightning_bwd", "lightning_bwd_kernel", _INTERP_META)


def lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n, align=None, stream=None):
    """Forward launch on contiguous inputs; returns (o, final state or None). ``align``: the
    inputs' alignment, if the caller has it (outputs are fresh, hence aligned)."""
    ensure_allocator()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    dev, dtype = q.device, q.dtype
    if align is None:
        align = alignment(q, k, v, g, h0, cu)
    o = _empty(b, t, h, e, dtype=dtype, device=dev)
    ht = _empty(n, h, d, e, dtype=torch.float32, device=dev) if store_ht else None
    args = (q, k, v, h0 if h0 is not None else g, g, cu if cu is not None else g,
            t, h, hkv, scale, shape_bucket(t, n * h), o, ht if ht is not None else o)
    key = (q.shape, hkv, e, n, dtype, q.get_device(), h0 is not None, None if cu is None else cu.dtype,
           reverse, store_ht, align)

    def spec():
        grid = lambda meta: (cdiv(e, meta["BV"]), n * h)  # noqa: E731
        return grid, dict(KD=d, VD=e, BK=pow2(d), REVERSE=bool(reverse), HAS_H0=h0 is not None,
                          STORE_HT=bool(store_ht), IS_VARLEN=cu is not None, DOT_PREC=dot_precision(dtype))

    _FWD_LAUNCH(key, args, spec, stream if stream is not None else raw_stream(q))
    return o, ht


def lightning_bwd(q, k, v, do, g, scale, h0, dht, reverse, cu, n, align=None, stream=None):
    """The three backward passes, one launch each: dq; dk; dv and dh0. Inputs contiguous;
    ``align`` as in lightning_fwd, of q, k, v, g, h0, cu, do and dS_T."""
    ensure_allocator()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    dev, dtype = q.device, q.dtype
    if align is None:
        align = alignment(q, k, v, g, h0, cu, do, dht)
    dq = _empty(b, t, h, d, dtype=dtype, device=dev)
    gdt = dtype if grp == 1 else torch.float32  # GQA: per query head in fp32, summed below
    dk = _empty(b, t, h, d, dtype=gdt, device=dev)
    dv = _empty(b, t, h, e, dtype=gdt, device=dev)
    dh0 = _empty(n, h, d, e, dtype=torch.float32, device=dev) if h0 is not None else None
    inputs = (q, k, v, do, h0 if h0 is not None else g, dht if dht is not None else g, g,
              cu if cu is not None else g, t, h, hkv, scale, shape_bucket(t, n * h))
    key = (q.shape, hkv, e, n, dtype, q.get_device(), h0 is not None, dht is not None,
           None if cu is None else cu.dtype, reverse, align)
    if stream is None:
        stream = raw_stream(q)
    tail = dh0 if dh0 is not None else g
    for role, out, split in ((0, dq, d), (1, dk, d), (2, dv, e)):
        def spec(role=role, split=split):
            grid = lambda meta: (cdiv(split, meta["BV"]), n * h)  # noqa: E731
            return grid, dict(KD=d, VD=e, BKD=pow2(d), BVD=pow2(e), ROLE=role, REVERSE=bool(reverse),
                              HAS_H0=h0 is not None, HAS_DHT=dht is not None, IS_VARLEN=cu is not None,
                              DOT_PREC=dot_precision(dtype))

        _BWD_LAUNCH((key, role), inputs + (out, tail), spec, stream)
    return _gqa_sum(dq, dk, dv, dh0, grp, dtype)


def _gqa_sum(dq, dk, dv, dh0, grp, dtype):
    """GQA: dk, dv per query head (fp32) summed over each kv head's group, in the input dtype."""
    if grp > 1:
        b, t, h, d = dk.shape
        dk = dk.view(b, t, h // grp, grp, d).sum(3).to(dtype)
        dv = dv.view(b, t, h // grp, grp, dv.shape[3]).sum(3).to(dtype)
    return dq, dk, dv, dh0


def grad_outputs(q: Tensor, v: Tensor, do: Tensor | None, dht: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """dO contiguous in q's dtype (zeros when o got no gradient) and dS_T fp32 contiguous or None.
    This runs on autograd's device thread, where every torch call that releases the GIL costs
    several µs more than on the main thread: it makes as few as it can."""
    if do is None:
        do = torch.zeros(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
    if do.dtype != q.dtype:
        do = do.to(q.dtype)
    if not do.is_contiguous():
        do = do.contiguous()
    if dht is not None and (dht.dtype != torch.float32 or not dht.is_contiguous()):
        dht = dht.float().contiguous()
    return do, dht


class LightningAttnFunction(torch.autograd.Function):
    """Autograd of the fused chunked kernels; inputs contiguous, h0 fp32 or None. ``rest`` is
    (g, scale, reverse, cu, store_ht, n), none of them differentiable: one argument instead of six,
    as apply's own host time grows with its argument count."""

    @staticmethod
    def forward(ctx, q, k, v, h0, rest):
        g, scale, reverse, cu, store_ht, n = rest
        align = alignment(q, k, v, g, h0, cu)
        o, ht = lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n, align)
        ctx.save_for_backward(q, k, v, h0)
        ctx.rest, ctx.align = rest, align
        # an unused S_T then arrives as None (HAS_DHT=False), not as a materialised zero tensor
        ctx.set_materialize_grads(False)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, h0 = ctx.saved_tensors
        g, scale, reverse, cu, _, n = ctx.rest
        do, dht = grad_outputs(q, v, do, dht)
        align = (ctx.align, alignment(do, dht))
        dq, dk, dv, dh0 = lightning_bwd(q, k, v, do, g, scale, h0, dht, reverse, cu, n, align)
        return dq, dk, dv, dh0, None


# the custom op torch.compile traces instead of the launches; ``library`` sets it when it registers
# the ops (the package imports it), so this module does not import its own importer
COMPILED_FWD: Callable | None = None


def lightning_attn_triton(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
    cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Lightning Attention, fused chunked Triton kernels; layout [B, T, H, D].

    ``S_t = exp(γ_h)·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``; returns ``(o, S_T)`` with o in
    the input dtype and S_T fp32 ``[N, H, D, E]`` (None unless ``output_final_state``).
    Differentiable in q, k, v, initial_state and through S_T. ``cu_seqlens`` on the GPU is taken
    as it is (int32 or int64; its values are not read on the host, see ``common.checks``); as a
    list, array or CPU tensor its values are checked and copied to the device once per distinct value.
    """
    n, _, _ = checks.validate(q, k, v, initial_state, cu_seqlens)
    g = checks.gamma_tensor(gamma, q.shape[2], q.device)
    scale, h0, cu, empty = checks.host_args(q, v, n, scale, initial_state, cu_seqlens, output_final_state)
    if empty is not None:
        return empty
    reverse, store_ht = bool(reverse), bool(output_final_state)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if torch.compiler.is_compiling():
        if COMPILED_FWD is None:
            raise RuntimeError("lightning custom ops are not registered: import lattnbench.kernels.lightning.triton")
        o, ht = COMPILED_FWD(q, k, v, g, h0, cu, scale, reverse, store_ht)
        return o, (ht if store_ht else None)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (h0 is not None and h0.requires_grad)):
        return LightningAttnFunction.apply(q, k, v, h0, (g, scale, reverse, cu, store_ht, n))
    return lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n)


def lightning_attn(
    q: Tensor, k: Tensor, v: Tensor, layer_idx: int, num_layers: int, softmax_scale: float | None = None,
    initial_state: Tensor | None = None, reverse: bool = False, cu_seqlens=None,
) -> tuple[Tensor, Tensor]:
    """The seeds' API: decay from ``lightning_decay(H, layer_idx, num_layers)``."""
    from ...decay import lightning_decay

    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, D] (rank 4), got rank {q.dim()}")
    gamma = lightning_decay(q.shape[2], layer_idx, num_layers)
    return lightning_attn_triton(q, k, v, gamma=gamma, scale=softmax_scale, initial_state=initial_state,
                                 output_final_state=True, reverse=reverse, cu_seqlens=cu_seqlens)
