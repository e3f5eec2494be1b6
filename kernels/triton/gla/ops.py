"""torch entry points of the Triton GLA kernels (autograd included, dg too)."""
from __future__ import annotations

import math

import torch

from ..lightning import checks
from ..lightning.launch import Launcher, PlainLauncher
from ..lightning.ops import _alignment, _raw_stream
from . import configs as _cfg
from . import kernels as _k

Tensor = torch.Tensor

# fixed launch config under the interpreter (autotune cannot run there); tests may change it
_INTERP_META = dict(zip(("BT", "BS", "num_warps", "num_stages"), _cfg.INTERP_CONFIG))


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernels fully write (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _dot_prec(dtype: torch.dtype) -> str:
    # fp32 inputs need IEEE fp32 dots (TF32 misses the fp32 tolerance); fp16 gate operands are
    # fp32 (tf32 has fp16's mantissa and fp32's range); bf16 ignores it
    return "ieee" if dtype == torch.float32 else "tf32"


def _flags(q: Tensor) -> dict:
    return dict(DOT_PREC=_dot_prec(q.dtype), GATE_BF16=q.dtype == torch.bfloat16, SAFE_DEPTH=_cfg.SAFE_DEPTH)


def validate(q: Tensor, k: Tensor, v: Tensor, g: Tensor, initial_state: Tensor | None,
             cu_seqlens) -> int:
    """The contract's shapes (q, k, v, initial_state, cu_seqlens as for Lightning) and g
    [B, T, H, D] per query head, a float tensor on q's device; returns N. Raises ValueError."""
    n, _, _ = checks.validate(q, k, v, initial_state, cu_seqlens)
    if not isinstance(g, torch.Tensor):
        raise ValueError(f"g must be a torch.Tensor, got {type(g).__name__}")
    if tuple(g.shape) != tuple(q.shape):
        raise ValueError(f"g must be [B, T, H, D] = {tuple(q.shape)} (per query head), got {tuple(g.shape)}")
    if not g.is_floating_point() or g.dtype == torch.float64:
        raise ValueError(f"g must be float32, float16 or bfloat16, got {g.dtype}")
    if g.device != q.device:
        raise ValueError("g must be on q's device")
    return n


# the decayed operands of every chunk, one parallel launch before the sweeps that take them
_PREP = PlainLauncher(_k, "gla_prep_kernel")
# each pass: the fast launch, then the exact rerun of the rows the forward flagged deep
_FWD = Launcher(_k, "gla_fwd", "gla_fwd_kernel", _INTERP_META)
_FWD_X = Launcher(_k, "gla_fwd_exact", "gla_fwd_kernel", _INTERP_META)
_BWD_Q = Launcher(_k, "gla_bwd_q", "gla_bwd_q_kernel", _INTERP_META)
_BWD_Q_X = Launcher(_k, "gla_bwd_q_exact", "gla_bwd_q_kernel", _INTERP_META)
_BWD_K = Launcher(_k, "gla_bwd_k", "gla_bwd_k_kernel", _INTERP_META)
_BWD_K_X = Launcher(_k, "gla_bwd_k_exact", "gla_bwd_k_kernel", _INTERP_META)
_BWD_V = Launcher(_k, "gla_bwd_v", "gla_bwd_v_kernel", _INTERP_META)
_BWD_V_X = Launcher(_k, "gla_bwd_v_exact", "gla_bwd_v_kernel", _INTERP_META)


def _twice(fast: Launcher, exact: Launcher, key, fast_args: tuple, exact_args: tuple, spec, stream) -> None:
    """A pass's fast launch, then its exact rerun (which returns at once in unflagged rows)."""
    def variant(is_exact: bool):
        def variant_spec():
            grid, kw = spec()
            return grid, dict(kw, PATH="exact" if is_exact else "fast")
        return variant_spec

    fast(key, fast_args, variant(False), stream)
    exact(key, exact_args, variant(True), stream)


def _pre_chunk() -> int:
    """The chunk of the decayed operands, which the forward and the dv pass sweep at: the
    interpreter's config chunk (tests may change it), else ``configs.PRE_CHUNK``."""
    return _INTERP_META["BT"] if _cfg.INTERPRET else _cfg.PRE_CHUNK


def gla_prep(q, k, g, reverse, cu, n):
    """(qd, kd, bl): the decayed operands q⊙e^B, k⊙e^{Bl−B} per query head (bf16 for bf16 inputs,
    fp32 otherwise: fp16 would underflow where fp32 keeps them) and the chunk totals Bl
    [(total rows) // BT + N, H, D] fp32, from one parallel launch (``kernels.gla_prep_kernel``)."""
    b, t, h, d = q.shape
    bt = _pre_chunk()
    gdt = q.dtype if q.dtype == torch.bfloat16 else torch.float32
    qd = _empty(b, t, h, d, dtype=gdt, device=q.device)
    kd = _empty(b, t, h, d, dtype=gdt, device=q.device)
    bl = _empty(b * t // bt + n, h, d, dtype=torch.float32, device=q.device)
    grid, bd = _cfg.prep_grid(t, n * h, d, bt)
    spec = lambda: (lambda meta: grid,  # noqa: E731
                    dict(KD=d, REVERSE=bool(reverse), IS_VARLEN=cu is not None, BT=bt, BD=bd,
                         num_warps=_cfg.PREP_WARPS, num_stages=1))
    key = ("prep", q.shape, k.shape, q.dtype, q.device, n, cu is not None, bool(reverse), bt,
           _alignment(q, k, g, cu))
    _PREP(key, (q, k, g, cu if cu is not None else g, t, h, k.shape[2], qd, kd, bl), spec, _raw_stream(q))
    return qd, kd, bl


def gla_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n):
    """Forward launches on contiguous inputs; returns (o, final state or None, the rows' deep flags
    [N·H] int32, which the backward's exact reruns follow, and the decayed operands (qd, kd, bl),
    which the dv pass sweeps again)."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    pre = gla_prep(q, k, g, reverse, cu, n)
    o = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    ht = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if store_ht else None
    deep = _empty(n * h, dtype=torch.int32, device=q.device)
    head = (q, k, v, g) + pre + (h0 if h0 is not None else g, cu if cu is not None else g)
    tail = (t, h, hkv, float(scale), _cfg.shape_bucket(t, n * h), o, ht if ht is not None else o)
    spec = lambda: (lambda meta: (_cfg.cdiv(e, meta["BS"]), n * h),  # noqa: E731
                    dict(KD=d, VD=e, BK=_cfg.pow2(d), SPLIT=e, REVERSE=bool(reverse), HAS_H0=h0 is not None,
                         STORE_HT=store_ht, IS_VARLEN=cu is not None, PRE=True, **_flags(q)))
    key = ("fwd", q.shape, k.shape, v.shape, q.dtype, q.device, n, store_ht, h0 is not None, cu is not None,
           bool(reverse), _alignment(q, k, v, g, h0, cu))
    _twice(_FWD, _FWD_X, key, head + (g,) + tail + (deep,), head + (deep,) + tail + (deep,), spec, _raw_stream(q))
    return o, ht, deep, pre


# the shortest chunk the dq pass may run with (the interpreter's config included): it sizes the
# buffer of chunk entry states; fixed at import, as the autotune list is
_QK_MIN_CHUNK = min(c.kwargs["BT"] for c in _cfg.autotune_configs(_cfg.BWD_Q_CONFIGS))


def gla_bwd(q, k, v, g, do, scale, h0, dht, reverse, cu, n, deep, pre):
    """The three backward passes, each a fast launch and the exact rerun of the rows ``deep`` flags:
    dq (D-slices, forward sweep); dk, dg, dh0 (D-slices, backward sweep); dv (E-slices). GQA sums
    dk, dv over each kv head's query heads (per query head in fp32 first). The dq pass hands the dk
    pass the state entering each chunk (input dtype) and dg's value after the last row, in scratch
    buffers freed on return; the dv pass sweeps the forward's decayed operands ``pre``."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    gdt = q.dtype if grp == 1 else torch.float32
    dq = _empty(*q.shape, dtype=q.dtype, device=q.device)
    dk = _empty(b, t, h, d, dtype=gdt, device=q.device)
    dv = _empty(b, t, h, e, dtype=gdt, device=q.device)
    dg = _empty(*q.shape, dtype=torch.float32, device=q.device)
    dh0 = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if h0 is not None else None
    hc = _empty(b * t // _QK_MIN_CHUNK + n, h, d, e, dtype=q.dtype, device=q.device)
    gend = _empty(n, h, d, dtype=torch.float32, device=q.device)
    ph = g  # placeholder pointer for absent tensors
    common = (t, h, hkv, float(scale), _cfg.shape_bucket(t, n * h))
    flags = dict(KD=d, VD=e, REVERSE=bool(reverse), HAS_DHT=dht is not None, IS_VARLEN=cu is not None,
                 **_flags(q))
    cu_arg = cu if cu is not None else ph
    dht_arg = dht if dht is not None else ph
    key = ("bwd", q.shape, k.shape, v.shape, q.dtype, q.device, n, h0 is not None, dht is not None,
           cu is not None, bool(reverse), _alignment(q, k, v, g, do, h0, dht, cu))
    stream = _raw_stream(q)
    d_sliced = lambda: (lambda meta: (_cfg.cdiv(d, meta["BS"]), n * h),  # noqa: E731
                        dict(flags, BV=_cfg.pow2(e), SPLIT=d, HAS_H0=h0 is not None))
    args = (k, v, g, do, h0 if h0 is not None else ph, dht_arg, cu_arg, deep) + common + (dq, hc, gend)
    _twice(_BWD_Q, _BWD_Q_X, key, args, args, d_sliced, stream)
    args = (q, k, v, g, do, dht_arg, cu_arg, dq, hc, gend, deep) + common + (dk, dg, dh0 if dh0 is not None else ph)
    _twice(_BWD_K, _BWD_K_X, key, args, args, d_sliced, stream)
    args = (q, k, g) + tuple(pre) + (do, dht_arg, cu_arg, deep) + common + (dv,)
    _twice(_BWD_V, _BWD_V_X, key, args, args,
           lambda: (lambda meta: (_cfg.cdiv(e, meta["BS"]), n * h),
                    dict(flags, BK=_cfg.pow2(d), SPLIT=e, PRE=True)), stream)
    if grp > 1:
        dk = dk.view(b, t, hkv, grp, d).sum(3).to(q.dtype)
        dv = dv.view(b, t, hkv, grp, e).sum(3).to(q.dtype)
    return dq, dk, dv, dg, dh0


class GLAFunction(torch.autograd.Function):
    """Autograd of the fused chunked GLA kernels; inputs contiguous, g and h0 fp32 (or h0 None)."""

    @staticmethod
    def forward(ctx, q, k, v, g, scale, h0, reverse, cu, store_ht, n):
        o, ht, deep, pre = gla_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n)
        ctx.save_for_backward(q, k, v, g, h0, cu, deep, *pre)
        ctx.scale, ctx.reverse, ctx.n = scale, reverse, n
        ctx.set_materialize_grads(False)  # an unused S_T arrives as None (HAS_DHT=False)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, h0, cu, deep, *pre = ctx.saved_tensors
        if do is None:
            do = torch.zeros(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
        do = do.to(q.dtype).contiguous()
        if dht is not None:
            dht = dht.float().contiguous()
        dq, dk, dv, dg, dh0 = gla_bwd(q, k, v, g, do, ctx.scale, h0, dht, ctx.reverse, cu, ctx.n, deep, pre)
        return dq, dk, dv, dg, None, dh0, None, None, None, None


def gla_triton(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
    cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Gated Linear Attention, fused chunked Triton kernels; layout [B, T, H, D].

    ``S_t = diag(exp(g_t))·S_{t−1} + k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``, g [B, T, H, D] ≤ 0 per
    query head (log gates). Returns ``(o, S_T)``: o in the input dtype, S_T fp32 [N, H, D, E]
    (None unless ``output_final_state``). Differentiable in q, k, v, g, initial_state and S_T.
    """
    n = validate(q, k, v, g, initial_state, cu_seqlens)
    b, t, h, d = q.shape
    scale = d**-0.5 if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    h0 = None if initial_state is None else initial_state.to(device=q.device, dtype=torch.float32).contiguous()
    gf = g.to(torch.float32).contiguous()
    if t == 0:
        e = v.shape[3]
        ht = h0.clone() if h0 is not None else torch.zeros(n, h, d, e, device=q.device)
        return q.new_zeros(b, 0, h, e), (ht if output_final_state else None)
    cu_t = None if cu_seqlens is None else checks.cu_tensor(cu_seqlens, t, q.device)
    return GLAFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), gf, scale, h0, bool(reverse),
                             cu_t, bool(output_final_state), n)
