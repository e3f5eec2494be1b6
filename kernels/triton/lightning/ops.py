"""torch entry points of the Triton Lightning Attention kernels (autograd included)."""
from __future__ import annotations

import math

import numpy as np
import torch

from . import configs as _cfg
from . import kernels as _k
from .launch import Launcher

Tensor = torch.Tensor

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# fixed launch config under the interpreter (autotune cannot run there); tests set TR
_INTERP_META = dict(zip(("BT", "BV", "num_warps", "num_stages"), _cfg.INTERP_CONFIG), TR=0)


def _scratch(size: int, alignment: int, stream) -> Tensor:
    """Triton's global scratch (the device-side tensor descriptors of the TR=3 configs)."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    return torch.empty(size, dtype=torch.int8, device=device)


def ensure_allocator() -> None:
    """Set Triton's global-scratch allocator when none is set. It is a ContextVar, i.e. per thread:
    the backward runs on autograd's device thread, so both directions call this before launching.
    A user's own allocator is kept."""
    alloc = _cfg.triton_allocation
    if _cfg.TMA_OK and isinstance(alloc._allocator.get(), alloc.NullAllocator):
        import triton

        triton.set_allocator(_scratch)


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernels fully write (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _dot_prec(dtype: torch.dtype) -> str:
    # fp32 inputs need IEEE fp32 dots (TF32 misses the fp32 tolerance); fp16/bf16 ignore it
    return "ieee" if dtype == torch.float32 else "tf32"


def validate(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None, cu_seqlens) -> tuple[int, list[int] | None]:
    """Check the contract's shapes; return (N, cu_seqlens as a list or None). Raises ValueError."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must be [B, T, H, D] (rank 4), got rank {x.dim()}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in _DTYPES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {q.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError("q, k, v must be on one device")
    b, t, h, d = q.shape
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or k.shape[3] != d or k.shape[2] != v.shape[2]:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[2] == 0 or h % k.shape[2]:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({k.shape[2]})")
    if d == 0 or v.shape[3] == 0:
        raise ValueError("head dims must be positive")
    n, cu = b, None
    if cu_seqlens is not None:
        if b != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1, got {b}")
        cu = [int(x) for x in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)]
        if len(cu) < 2 or cu[0] != 0 or cu[-1] != t or any(x > y for x, y in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {cu}")
        n = len(cu) - 1
    if initial_state is not None:
        want = (n, h, d, v.shape[3])
        if not isinstance(initial_state, torch.Tensor) or tuple(initial_state.shape) != want:
            got = tuple(initial_state.shape) if hasattr(initial_state, "shape") else type(initial_state).__name__
            raise ValueError(f"initial_state must be [N, H, D, E] = {want}, got {got}")
    return n, cu


def _gamma_tensor(gamma, h: int, device) -> Tensor:
    if gamma is None:
        return torch.zeros(h, dtype=torch.float32, device=device)
    if isinstance(gamma, torch.Tensor):
        if (gamma.dtype == torch.float32 and gamma.device == device and gamma.dim() == 1
                and gamma.numel() == h and not gamma.requires_grad and gamma.is_contiguous()):
            return gamma  # the common case, as the harness and lightning_attn pass it: no torch calls
        g = gamma.detach().to(device=device, dtype=torch.float32).reshape(-1)
    else:
        arr = np.asarray(gamma, dtype=np.float32).reshape(-1)
        if arr.size == h and (arr > 0).any():
            raise ValueError("gamma must be <= 0 (a decay)")
        g = torch.as_tensor(arr, device=device)
    if g.numel() != h:
        raise ValueError(f"gamma must have one value per query head ({h}), got {g.numel()}")
    return g.contiguous()


def _aligned(*xs) -> bool:
    """Every given tensor (None skipped) starts on a 16-byte boundary, as Triton specializes on."""
    return all(x is None or x.data_ptr() % 16 == 0 for x in xs)


def _raw_stream(x: Tensor) -> int | None:
    """The current device's current CUDA stream as a raw handle, the one Triton's own launch would
    take (None off the GPU / unknown torch)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    dev = getattr(torch._C, "_cuda_getDevice", None)
    return get(dev()) if get is not None and dev is not None and x.is_cuda else None


_FWD_LAUNCH = Launcher(_k, "lightning_fwd", "lightning_fwd_kernel", _INTERP_META)
_BWD_LAUNCH = Launcher(_k, "lightning_bwd", "lightning_bwd_kernel", _INTERP_META)


def lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n, aligned=False):
    """Forward launch on contiguous inputs; returns (o, final state or None). ``aligned``: the
    caller checked that q, k, v, g, h0 and cu are 16-byte aligned (outputs are fresh)."""
    ensure_allocator()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    o = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    ht = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if store_ht else None
    grid = lambda meta: (_cfg.cdiv(e, meta["BV"]), n * h)  # noqa: E731
    args = (q, k, v, h0 if h0 is not None else g, g, cu if cu is not None else g,
            t, h, hkv, float(scale), _cfg.shape_bucket(t, n * h), o, ht if ht is not None else o)
    kw = dict(KD=d, VD=e, BK=_cfg.pow2(d), REVERSE=bool(reverse),
              HAS_H0=h0 is not None, STORE_HT=store_ht, IS_VARLEN=cu is not None,
              DOT_PREC=_dot_prec(q.dtype))
    _FWD_LAUNCH(grid, args, kw, aligned=aligned)
    return o, ht


def lightning_bwd(q, k, v, do, g, scale, h0, dht, reverse, cu, n, aligned=False):
    """The three backward passes, one launch each: dq; dk; dv and dh0. Inputs contiguous;
    ``aligned`` as in lightning_fwd, for do and dS_T too."""
    ensure_allocator()
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    dq = _empty(*q.shape, dtype=q.dtype, device=q.device)
    gdt = q.dtype if grp == 1 else torch.float32  # GQA: per query head in fp32, summed below
    dk = _empty(b, t, h, d, dtype=gdt, device=q.device)
    dv = _empty(b, t, h, e, dtype=gdt, device=q.device)
    dh0 = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if h0 is not None else None
    inputs = (q, k, v, do, h0 if h0 is not None else g, dht if dht is not None else g, g,
              cu if cu is not None else g, t, h, hkv, float(scale), _cfg.shape_bucket(t, n * h))
    kw = dict(KD=d, VD=e, BKD=_cfg.pow2(d), BVD=_cfg.pow2(e),
              REVERSE=bool(reverse), HAS_H0=h0 is not None, HAS_DHT=dht is not None,
              IS_VARLEN=cu is not None, DOT_PREC=_dot_prec(q.dtype))
    stream = _raw_stream(q)
    for role, out, split in ((0, dq, d), (1, dk, d), (2, dv, e)):
        grid = lambda meta, split=split: (_cfg.cdiv(split, meta["BV"]), n * h)  # noqa: E731
        args = inputs + (out, dh0 if dh0 is not None else g)
        _BWD_LAUNCH(grid, args, dict(kw, ROLE=role), aligned=aligned, stream=stream)
    return _gqa_sum(dq, dk, dv, dh0, grp, q.dtype)


def _gqa_sum(dq, dk, dv, dh0, grp, dtype):
    """GQA: dk, dv per query head (fp32) summed over each kv head's group, in the input dtype."""
    if grp > 1:
        b, t, h, d = dk.shape
        dk = dk.view(b, t, h // grp, grp, d).sum(3).to(dtype)
        dv = dv.view(b, t, h // grp, grp, dv.shape[3]).sum(3).to(dtype)
    return dq, dk, dv, dh0


class LightningAttnFunction(torch.autograd.Function):
    """Autograd of the fused chunked kernels; inputs contiguous, h0 fp32 or None."""

    @staticmethod
    def forward(ctx, q, k, v, g, scale, h0, reverse, cu, store_ht, n):
        aligned = _aligned(q, k, v, g, h0, cu)
        o, ht = lightning_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n, aligned)
        ctx.save_for_backward(q, k, v, g, h0, cu)
        ctx.scale, ctx.reverse, ctx.n, ctx.aligned = scale, reverse, n, aligned
        # an unused S_T then arrives as None (HAS_DHT=False), not as a materialised zero tensor
        ctx.set_materialize_grads(False)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, h0, cu = ctx.saved_tensors
        # this runs on autograd's device thread, where every torch call that releases the GIL
        # costs several µs more than on the main thread: make as few as possible
        if do is None:
            do = torch.zeros(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        if not do.is_contiguous():
            do = do.contiguous()
        if dht is not None and (dht.dtype != torch.float32 or not dht.is_contiguous()):
            dht = dht.float().contiguous()
        aligned = ctx.aligned and _aligned(do, dht)
        dq, dk, dv, dh0 = lightning_bwd(q, k, v, do, g, ctx.scale, h0, dht, ctx.reverse, cu, ctx.n, aligned)
        return dq, dk, dv, None, None, dh0, None, None, None, None


def lightning_attn_triton(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
    cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Lightning Attention, fused chunked Triton kernels; layout [B, T, H, D].

    ``S_t = exp(γ_h)·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``; returns ``(o, S_T)`` with o in
    the input dtype and S_T fp32 ``[N, H, D, E]`` (None unless ``output_final_state``).
    Differentiable in q, k, v, initial_state and through S_T.
    """
    n, cu = validate(q, k, v, initial_state, cu_seqlens)
    b, t, h, d = q.shape
    if scale is None:
        scale = d**-0.5
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    g = _gamma_tensor(gamma, h, q.device)
    cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device=q.device)
    h0 = None if initial_state is None else initial_state.to(device=q.device, dtype=torch.float32).contiguous()
    if t == 0:
        e = v.shape[3]
        o = q.new_zeros(b, 0, h, e)
        ht = h0.clone() if h0 is not None else torch.zeros(n, h, d, e, device=q.device)
        return o, (ht if output_final_state else None)
    return LightningAttnFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), g, scale, h0,
                                       bool(reverse), cu_t, bool(output_final_state), n)


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
