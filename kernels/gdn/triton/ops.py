"""torch entry point of the GDN Triton kernels: the forward's two launches, the backward's four."""
from __future__ import annotations

import torch

from ...common import checks
from ...common.launch import Launcher, PlainLauncher, alignment, dot_precision, raw_stream
from . import backward as _kb
from . import configs as _cfg
from . import kernels as _k

Tensor = torch.Tensor

# fixed launch config of the sweep under the interpreter (autotune cannot run there); tests may
# change it. The prep launch takes BT from here too: both must cut the same chunks.
_INTERP_META = dict(BT=_cfg.INTERP_CHUNK, BV=_cfg.INTERP_BV, num_warps=4, num_stages=1)

def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernels fully write (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def validate(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, initial_state: Tensor | None,
             cu_seqlens) -> int:
    """The contract's shapes (q, k, v, initial_state, cu_seqlens as for the other Triton kernels)
    and g, beta [B, T, H] per query head, float tensors on q's device; returns N. Raises ValueError."""
    n, _, _ = checks.validate(q, k, v, initial_state, cu_seqlens)
    want = tuple(q.shape[:3])
    for name, x in (("g", g), ("beta", beta)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if tuple(x.shape) != want:
            raise ValueError(f"{name} must be [B, T, H] = {want} (per query head), got {tuple(x.shape)}")
        if not x.is_floating_point() or x.dtype == torch.float64:
            raise ValueError(f"{name} must be float32, float16 or bfloat16, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} must be on q's device")
    return n


_PREP = PlainLauncher(_k, "gdn_prep_kernel")
_FWD = Launcher(_k, "gdn_fwd", "gdn_fwd_kernel", _INTERP_META)
_BWD_STATE = PlainLauncher(_kb, "gdn_bwd_state_kernel")
_BWD_CHUNK = PlainLauncher(_kb, "gdn_bwd_chunk_kernel")
_BWD_WY = PlainLauncher(_kb, "gdn_bwd_wy_kernel")


def _chunk() -> int:
    """The chunk both launches run at: the interpreter's (tests may change it), else ``configs.CHUNK``."""
    return _INTERP_META["BT"] if _cfg.INTERPRET else _cfg.CHUNK


def gdn_prep(k, v, g, beta, cu, n, h):
    """(u [B, T, H, E] fp32, w [B, T, H, D] in k's dtype, fp32 for fp16 k) from one parallel launch,
    ``kernels.gdn_prep_kernel``. u stays fp32: ν = u − w S takes it as it is, so its rounding would
    reach every later state. w is an operand of the sweep's w·S product, which for 16-bit inputs
    runs on 16-bit operands anyway; stored so, it frees the sweep's registers for a D = 128 head.
    Its rows scale as e^{G}: fp16 would flush them at strong gates, where the forward's products
    do not need them but the backward's dh0 does, so fp16 inputs keep w in fp32."""
    b, t, hkv, d = k.shape
    e = v.shape[3]
    bt = _chunk()
    u = _empty(b, t, h, e, dtype=torch.float32, device=k.device)
    w = _empty(b, t, h, d, dtype=torch.float32 if k.dtype == torch.float16 else k.dtype, device=k.device)
    grid = _cfg.prep_grid(t, n * h)
    spec = lambda: (lambda meta: grid,  # noqa: E731
                    dict(KD=d, VD=e, IS_VARLEN=cu is not None, **_cfg.prep_meta(d, e, bt, dot_precision(k.dtype))))
    key = ("prep", k.shape, v.shape, h, k.dtype, g.dtype, beta.dtype, k.device, n, cu is not None, bt,
           alignment(k, v, g, beta, cu))
    _PREP(key, (k, v, g, beta, cu if cu is not None else g, t, h, hkv, u, w), spec, raw_stream(k))
    return u, w


def gdn_fwd(q, k, v, g, beta, scale, h0, cu, store_ht, n, store_hc=False):
    """Both launches on contiguous inputs; returns (o, final state or None, chunk-entry states
    hc [slots, H, D, E] fp32 or None): hc only with ``store_hc``, for the backward."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    u, w = gdn_prep(k, v, g, beta, cu, n, h)
    o = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    ht = _empty(n, h, d, e, dtype=torch.float32, device=q.device) if store_ht else None
    hc = (_empty(_cfg.chunk_slots(b, t, n, _chunk()), h, d, e, dtype=torch.float32, device=q.device)
          if store_hc else None)
    args = (q, k, g, u, w, h0 if h0 is not None else g, cu if cu is not None else g, t, h, hkv, float(scale),
            _cfg.shape_bucket(t, n * h), o, ht if ht is not None else o, hc if hc is not None else o)
    spec = lambda: (lambda meta: (_cfg.cdiv(e, meta["BV"]), n * h),  # noqa: E731
                    dict(KD=d, VD=e, BK=_cfg.pow2(d), HAS_H0=h0 is not None, STORE_HT=store_ht, STORE_HC=store_hc,
                         IS_VARLEN=cu is not None, DOT_PREC=dot_precision(q.dtype)))
    key = ("fwd", q.shape, k.shape, v.shape, q.dtype, g.dtype, q.device, n, store_ht, store_hc, h0 is not None,
           cu is not None, alignment(q, k, g, h0, cu))
    _FWD(key, args, spec, raw_stream(q))
    return o, ht, hc


def gdn_bwd(q, k, v, g, beta, scale, h0, cu, hc, do, dht, n):
    """(dq, dk, dv, dg, dbeta, dh0 or None) from the forward's inputs and chunk-entry states hc:
    the prep launch again (u, w), the reverse sweep, the chunk launch, the WY launch; a GQA
    group's query heads are summed here."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    bt = _chunk()
    prec = dot_precision(q.dtype)
    u, w = gdn_prep(k, v, g, beta, cu, n, h)
    f32 = dict(dtype=torch.float32, device=q.device)
    nu, dnu = _empty(b, t, h, e, **f32), _empty(b, t, h, e, **f32)
    dhc = _empty(*hc.shape, **f32)
    dh0 = _empty(n, h, d, e, **f32) if h0 is not None else None
    cu_arg = cu if cu is not None else g
    args = (q, k, g, u, w, do, dht if dht is not None else g, hc, cu_arg, t, h, hkv, float(scale), nu, dnu, dhc,
            dh0 if dh0 is not None else dnu)

    def spec():
        meta = _cfg.bwd_meta(bt, _INTERP_META["BV"], prec)
        return (lambda _: (_cfg.cdiv(e, meta["BV"]), n * h),
                dict(KD=d, VD=e, BK=_cfg.pow2(d), HAS_DHT=dht is not None, HAS_H0=h0 is not None,
                     IS_VARLEN=cu is not None, WIDE_STATE_TERMS=q.dtype == torch.float16, **meta))
    key = ("bwd-state", q.shape, k.shape, v.shape, q.dtype, g.dtype, q.device, n, dht is not None, h0 is not None,
           cu is not None, bt, alignment(q, k, g, do, dht, cu))
    _BWD_STATE(key, args, spec, raw_stream(q))
    grid = _cfg.prep_grid(t, n * h)
    dq = _empty(b, t, h, d, dtype=q.dtype, device=q.device)
    dks, dws = _empty(b, t, h, d, **f32), _empty(b, t, h, d, **f32)
    dgs = _empty(b, t, h, **f32)
    args = (q, k, g, do, nu, dnu, hc, dhc, cu_arg, t, h, hkv, float(scale), dq, dks, dws, dgs)
    spec = lambda: (lambda _: grid,  # noqa: E731
                    dict(KD=d, VD=e, IS_VARLEN=cu is not None, **_cfg.chunk_meta(d, e, bt, prec)))
    key = ("bwd-chunk", q.shape, k.shape, v.shape, q.dtype, g.dtype, q.device, n, cu is not None, bt,
           alignment(q, k, g, do, cu))
    _BWD_CHUNK(key, args, spec, raw_stream(q))
    dk = _empty(b, t, h, d, **f32)
    dv = _empty(b, t, h, e, **f32)
    dbeta = _empty(b, t, h, **f32)
    dg = _empty(b, t, h, **f32)
    args = (k, v, g, beta, u, w, dnu, dws, dks, dgs, cu_arg, t, h, hkv, dk, dv, dbeta, dg)
    spec = lambda: (lambda _: grid,  # noqa: E731
                    dict(KD=d, VD=e, IS_VARLEN=cu is not None, **_cfg.wy_meta(d, e, bt, prec)))
    key = ("bwd-wy", k.shape, v.shape, h, k.dtype, g.dtype, beta.dtype, k.device, n, cu is not None, bt,
           alignment(k, v, g, beta, cu))
    _BWD_WY(key, args, spec, raw_stream(q))
    group = h // hkv
    dk = dk.view(b, t, hkv, group, d).sum(3)
    dv = dv.view(b, t, hkv, group, e).sum(3)
    return dq, dk, dv, dg, dbeta, dh0


class GDNFunction(torch.autograd.Function):
    """The forward launches, keeping the chunk-entry states when a gradient may follow; the
    backward's launches. Gradients for q, k, v, g, beta and the initial state, in their dtypes."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, scale, h0, cu, store_ht, n):
        store_hc = any(ctx.needs_input_grad[:5]) or (h0 is not None and ctx.needs_input_grad[6])
        o, ht, hc = gdn_fwd(q, k, v, g, beta, scale, h0, cu, store_ht, n, store_hc=store_hc)
        if store_hc:
            ctx.save_for_backward(q, k, v, g, beta, h0, hc)
            ctx.scale, ctx.cu, ctx.n = scale, cu, n
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, beta, h0, hc = ctx.saved_tensors
        dq, dk, dv, dg, dbeta, dh0 = gdn_bwd(q, k, v, g, beta, ctx.scale, h0, ctx.cu, hc, do.contiguous(),
                                             None if dht is None else dht.contiguous(), ctx.n)
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dg.to(g.dtype), dbeta.to(beta.dtype), None,
                None if dh0 is None else dh0.to(h0.dtype), None, None, None)


def gdn_triton(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
    cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Gated delta rule, fused chunked Triton kernels (WY form), with their backward; layout [B, T, H, D].

    ``S_t = e^{g_t}(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, ``o_t = scale·S_tᵀ q_t``: q
    [B, T, H, D], k [B, T, H_kv, D] (L2-normalised by the caller; used as given), v
    [B, T, H_kv, E], g ≤ 0 and beta [B, T, H] per query head, initial_state [N, H, D, E].
    Returns ``(o, S_T)``: o in the input dtype, S_T fp32 [N, H, D, E] (None unless
    ``output_final_state``). Differentiable in q, k, v, g, beta and initial_state. No reverse: it
    raises ``NotImplementedError``.
    """
    if reverse:
        raise NotImplementedError("gdn/triton has no reverse")
    n = validate(q, k, v, g, beta, initial_state, cu_seqlens)
    args = checks.host_args(q, v, n, scale, initial_state, cu_seqlens, output_final_state)
    if args.empty is not None:
        return args.empty
    return GDNFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.contiguous(),
                             args.scale, args.h0, args.cu, bool(output_final_state), n)
