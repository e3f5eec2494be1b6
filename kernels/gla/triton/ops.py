"""torch entry points of the Triton GLA kernels (autograd included, dg too)."""
from __future__ import annotations

import torch

from ...common import checks
from ...common.launch import Launcher, PlainLauncher, alignment, dot_precision, raw_stream
from ..gluon import host as _gluon_host
from . import configs as _cfg
from . import kernels as _k

Tensor = torch.Tensor

# fixed launch config under the interpreter (autotune cannot run there); tests may change it
_INTERP_META = dict(zip(("BT", "BS", "num_warps", "num_stages"), _cfg.INTERP_CONFIG))


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernels fully write (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _flags(q: Tensor) -> dict:
    return dict(DOT_PREC=dot_precision(q.dtype))


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


# the parallel launches (no carried state: programs over chunks), then the sweeps
_PREP = PlainLauncher(_k, "gla_prep_kernel")
_FWD = Launcher(_k, "gla_fwd", "gla_fwd_kernel", _INTERP_META)
_BWD_H = Launcher(_k, "gla_bwd_h", "gla_bwd_h_kernel", _INTERP_META)
_BWD_DH = Launcher(_k, "gla_bwd_dh", "gla_bwd_dh_kernel", _INTERP_META)
_BWD_INTRA = PlainLauncher(_k, "gla_bwd_intra_kernel")
_BWD_EXIT = PlainLauncher(_k, "gla_bwd_exit_kernel")
_BWD_V = Launcher(_k, "gla_bwd_v", "gla_bwd_v_kernel", _INTERP_META)


def _chunk() -> int:
    """The chunk every launch runs at: the interpreter's config chunk (tests may change it), else
    ``configs.CHUNK``."""
    return _INTERP_META["BT"] if _cfg.INTERPRET else _cfg.CHUNK



def gla_prep(q, k, g, reverse, cu, n):
    """(qd, kd, bl, A): the decayed operands q⊙e^B, k⊙e^{Bl−B} per query head (bf16 for bf16
    inputs, fp32 otherwise: fp16 would underflow where fp32 keeps them), the chunk totals Bl
    [slots, H, D] fp32 and the intra-chunk scores A [B, T, H, BT] (input dtype), from one parallel
    launch, ``kernels.gla_prep_kernel`` or, where ``gluon.host.prep_reason`` allows, its Gluon
    form."""
    b, t, h, d = q.shape
    bt = _chunk()
    gdt = q.dtype if q.dtype == torch.bfloat16 else torch.float32
    qd = _empty(b, t, h, d, dtype=gdt, device=q.device)
    kd = _empty(b, t, h, d, dtype=gdt, device=q.device)
    bl = _empty(_cfg.chunk_slots(b, t, n, _chunk()), h, d, dtype=torch.float32, device=q.device)
    scores = _empty(b, t, h, bt, dtype=q.dtype, device=q.device)
    grid = _cfg.prep_grid(t, n * h)
    spec = lambda: (lambda meta: grid,  # noqa: E731
                    dict(KD=d, REVERSE=bool(reverse), IS_VARLEN=cu is not None,
                         **_cfg.prep_meta(d, bt, dot_precision(q.dtype))))
    key = ("prep", q.shape, k.shape, q.dtype, g.dtype, q.device, n, cu is not None, bool(reverse), bt,
           alignment(q, k, g, cu))
    args = (q, k, g, cu if cu is not None else g, t, h, k.shape[2], qd, kd, bl, scores)
    if _gluon_host.prep_reason(q, bt) is None:
        _gluon_host.launch_prep(key, args, grid, d, reverse, cu is not None, bt, raw_stream(q))
    else:
        _PREP(key, args, spec, raw_stream(q))
    return qd, kd, bl, scores


def gla_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n):
    """Forward launches on contiguous inputs; returns (o, final state or None, the prep launch's
    (qd, kd, bl, A), which the backward's sweeps take again)."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    pre = gla_prep(q, k, g, reverse, cu, n)
    o = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    ht = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if store_ht else None
    args = pre + (v, h0 if h0 is not None else g, cu if cu is not None else g, t, h, hkv, float(scale),
                  _cfg.shape_bucket(t, n * h), o, ht if ht is not None else o)
    spec = lambda: (lambda meta: (_cfg.cdiv(e, meta["BS"]), n * h),  # noqa: E731
                    dict(KD=d, VD=e, BK=_cfg.pow2(d), SPLIT=e, REVERSE=bool(reverse), HAS_H0=h0 is not None,
                         STORE_HT=store_ht, IS_VARLEN=cu is not None, **_flags(q)))
    key = ("fwd", q.shape, k.shape, v.shape, q.dtype, g.dtype, q.device, n, store_ht, h0 is not None, cu is not None,
           bool(reverse), alignment(q, k, v, g, h0, cu))
    _FWD(key, args, spec, raw_stream(q))
    return o, ht, pre


def gla_bwd(q, k, v, g, do, scale, h0, dht, reverse, cu, n, pre):
    """The backward launches: the state entering each chunk (D-slices, forward sweep); the state
    gradient leaving each chunk, dg's entry-to-exit pairs and dh0 (D-slices, backward sweep); dq
    whole, dk's and dg's parts from each chunk's rows and entry state (parallel over chunks); what
    the exit state adds to dk (in place) and dg (written in g's dtype; parallel; not run where the
    Gluon in-chunk launch takes these terms itself, ``gluon.host.intra_exit``, and dk and dg
    leave that launch final); dv (E-slices, backward sweep). GQA sums dk, dv over each kv head's
    query heads (per query head in fp32 first). The per-chunk states are scratch, freed on return."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    grp = h // hkv
    qd, kd, bl, scores = pre
    gdt = q.dtype if grp == 1 else torch.float32
    dq = _empty(*q.shape, dtype=q.dtype, device=q.device)
    dk = _empty(b, t, h, d, dtype=gdt, device=q.device)
    dv = _empty(b, t, h, e, dtype=gdt, device=q.device)
    bt = _chunk()
    gluon_intra = _gluon_host.intra_reason(q, v, bt) is None
    # the Gluon in-chunk launch with the exit terms in it: dk and dg leave it final
    fused = gluon_intra and _gluon_host.intra_exit()
    # dg's in-chunk part stays fp32 until the exit launch adds the rest; that launch writes dg in
    # g's dtype, so a 16-bit g costs no cast launch (for fp32 g it adds in place). The fused launch
    # writes dg whole, in g's dtype, and needs no fp32 part
    dg = _empty(*q.shape, dtype=g.dtype, device=q.device)
    dgq = dg if g.dtype == torch.float32 or fused else _empty(*q.shape, dtype=torch.float32, device=q.device)
    dh0 = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if h0 is not None else None
    slots = _cfg.chunk_slots(b, t, n, _chunk())
    hc = _empty(slots, h, d, e, dtype=q.dtype, device=q.device)
    dhc = _empty(slots, h, d, e, dtype=q.dtype, device=q.device)
    thr = _empty(slots, h, d, dtype=torch.float32, device=q.device)
    ph = g  # placeholder pointer for absent tensors
    bucket = _cfg.shape_bucket(t, n * h)
    flags = dict(KD=d, VD=e, REVERSE=bool(reverse), IS_VARLEN=cu is not None, **_flags(q))
    cu_arg = cu if cu is not None else ph
    dht_arg = dht if dht is not None else ph
    key = ("bwd", q.shape, k.shape, v.shape, q.dtype, g.dtype, q.device, n, h0 is not None, dht is not None,
           cu is not None, bool(reverse), alignment(q, k, v, g, do, h0, dht, cu))
    stream = raw_stream(q)
    d_sliced = lambda **more: lambda: (lambda meta: (_cfg.cdiv(d, meta["BS"]), n * h),  # noqa: E731
                                       dict(flags, BV=_cfg.pow2(e), SPLIT=d, HAS_H0=h0 is not None, **more))
    _BWD_H(key, (kd, bl, v, h0 if h0 is not None else ph, cu_arg, t, h, hkv, bucket, hc), d_sliced(), stream)
    _BWD_DH(key, (qd, bl, do, dht_arg, cu_arg, hc, t, h, hkv, float(scale), bucket,
                  dhc, thr, dh0 if dh0 is not None else ph), d_sliced(HAS_DHT=dht is not None), stream)
    grid = _cfg.prep_grid(t, n * h)
    # the launch's scratch (its in-block pairs), sized by the launch taken
    scratch = _gluon_host.intra_scratch(grid) if gluon_intra else _cfg.intra_scratch(grid, d, bt)
    wsc = _empty(scratch, dtype=torch.float32, device=q.device)
    if fused:
        _gluon_host.launch_intra(key, (q, k, v, g, do, hc, dhc, thr, cu_arg, t, h, hkv, float(scale), dq, dk, dg, wsc),
                                 grid, d, e, reverse, cu is not None, stream, exit_terms=True)
    else:
        # the in-chunk launch writes dk's and dg's first parts into dk and dgq, the exit launch adds the rest
        _intra_unfused(key, (q, k, v, g, do, hc, cu_arg, t, h, hkv, float(scale), dq, dk, dgq, wsc), grid, gluon_intra,
                       flags, d, e, reverse, cu is not None, stream)
        _BWD_EXIT(key, (k, v, g, dhc, thr, cu_arg, dk, dgq, t, h, hkv, float(scale), dk, dg),
                  lambda: (lambda meta: grid, dict(flags, **_cfg.exit_meta(d, e, bt))), stream)
    _BWD_V(key, (qd, kd, bl, scores, do, dht_arg, cu_arg, t, h, hkv, float(scale), bucket, dv),
           lambda: (lambda meta: (_cfg.cdiv(e, meta["BS"]), n * h),
                    dict(flags, BK=_cfg.pow2(d), SPLIT=e, HAS_DHT=dht is not None)), stream)
    if grp > 1:
        dk = dk.view(b, t, hkv, grp, d).sum(3).to(q.dtype)
        dv = dv.view(b, t, hkv, grp, e).sum(3).to(q.dtype)
    return dq, dk, dv, dg, dh0


def _intra_unfused(key, args, grid, gluon_intra, flags, d, e, reverse, varlen, stream):
    """The in-chunk launch without the exit terms, Gluon or Triton, on ``gla_bwd_intra_kernel``'s
    arguments: dq whole, dk's in-chunk part and dg's in-chunk suffix sums (fp32)."""
    bt = _chunk()
    if gluon_intra:
        _gluon_host.launch_intra(key, args, grid, d, e, reverse, varlen, stream)
    else:
        _BWD_INTRA((*key, _cfg.intra_pairs(bt)), args,
                   lambda: (lambda meta: grid, dict(flags, **_cfg.intra_meta(d, e, bt))), stream)


class GLAFunction(torch.autograd.Function):
    """Autograd of the fused chunked GLA kernels; inputs contiguous, g in any float dtype (the
    kernels cumulate it in fp32), h0 fp32 (or None); dg comes back in g's dtype."""

    @staticmethod
    def forward(ctx, q, k, v, g, scale, h0, reverse, cu, store_ht, n):
        o, ht, pre = gla_fwd(q, k, v, g, scale, h0, reverse, cu, store_ht, n)
        ctx.save_for_backward(q, k, v, g, h0, cu, *pre)
        ctx.scale, ctx.reverse, ctx.n = scale, reverse, n
        ctx.set_materialize_grads(False)  # an unused S_T arrives as None (HAS_DHT=False)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, h0, cu, *pre = ctx.saved_tensors
        if do is None:
            do = torch.zeros(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
        do = do.to(q.dtype).contiguous()
        if dht is not None:
            dht = dht.float().contiguous()
        dq, dk, dv, dg, dh0 = gla_bwd(q, k, v, g, do, ctx.scale, h0, dht, ctx.reverse, cu, ctx.n, tuple(pre))
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
    args = checks.host_args(q, v, n, scale, initial_state, cu_seqlens, output_final_state)
    if args.empty is not None:
        return args.empty
    return GLAFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), args.scale, args.h0,
                             bool(reverse), args.cu, bool(output_final_state), n)
