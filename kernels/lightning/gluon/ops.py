"""torch entry point of the Gluon Lightning kernel.

``lightning_attn_gluon`` has the contract and options of ``lightning_attn_triton``. It runs the
Gluon forward where ``gluon_path`` says it can (a CUDA sm_90 device, Gluon importable, bf16 /
fp16, D and E in {64, 128}, no varlen); every other call goes to the Triton kernel whole, so the
function is correct everywhere and fast where the Gluon kernel applies. The backward of a Gluon
forward runs on Gluon kernels (``backward``) where ``configs.backward_reason`` allows: a dq pass of
the forward kernel and the one-kernel dk / dv pass (``gluon_dkdv``; with ``configs.FUSED_DKDV`` off,
two more forward passes). Otherwise the Triton kernel's three backward passes
(``LightningAttnFunction.backward``) run it: the forward saves the same tensors the Triton forward
saves, so either can.
"""
from __future__ import annotations

import copy
import functools

import torch

from ...common import checks
from ...common.launch import LazyLauncher, alignment, raw_stream
from ..triton import ops as triton_ops
from ...common import gluon_compat as compat
from . import configs as _cfg
from .backward import backward_by_forwards

Tensor = torch.Tensor


def device_reason(device: torch.device) -> str | None:
    """None when the Gluon forward can run on ``device``, else why not (one line)."""
    return compat.sm90_reason(device, "the Gluon forward")


# CUDA devices device_reason accepted: later calls skip its device query (a visible share of a
# short call's host time)
_SM90_READY: set[int] = set()


def gluon_path(q: Tensor, v: Tensor, cu_seqlens=None) -> str | None:
    """None when a call with these inputs takes the Gluon forward, else why the Triton kernel runs
    it instead: the options (``configs.fallback_reason``), then the device (``device_reason``)."""
    reason = _cfg.fallback_reason(str(q.dtype).removeprefix("torch."), q.shape[3], v.shape[3],
                                  cu_seqlens is not None)
    if reason is not None or q.get_device() in _SM90_READY:
        return reason
    reason = device_reason(q.device)
    if reason is None:
        _SM90_READY.add(q.get_device())
    return reason


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer the kernel fully writes (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


@functools.lru_cache(maxsize=None)
def _layout(block: tuple[int, ...], dtype: torch.dtype):
    """The NVMMA shared layout of a ``block`` tile (built once: it costs more host time than the
    descriptor that carries it)."""
    elem = compat.gl.bfloat16 if dtype == torch.bfloat16 else compat.gl.float16
    return compat.gl.NVMMASharedLayout.get_default_for(list(block), elem)


# a validated descriptor per (shape, dtype, box), its base cleared: later ones are its copies
_DESCRIPTOR_TEMPLATES: dict[tuple, object] = {}


def _descriptor(x: Tensor, width: int, cfg_bt: int):
    """A TMA descriptor over ``x`` [B, T, heads, dim] viewed as [B, T, heads·dim], box
    [1, BT, width]: rows outside [0, T) read as zeros and are not written.

    The descriptor's own checks (ranks, box, strides, layout) depend on the shape alone, and cost
    more host time than the launch, so each shape is checked once; later calls copy that
    descriptor with the new base, whose 16-byte alignment (the one check that reads it) is
    checked here, by a full descriptor where it fails."""
    key = (x.shape, x.dtype, width, cfg_bt)
    template = _DESCRIPTOR_TEMPLATES.get(key)
    if template is None or x.data_ptr() % 16:
        b, t, heads, dim = x.shape
        block = (1, cfg_bt, width)
        desc = compat.TensorDescriptor(x, [b, t, heads * dim], [t * heads * dim, heads * dim, 1], list(block),
                                       _layout(block, x.dtype))
        template = copy.copy(desc)
        template.base = None  # holds no tensor alive
        _DESCRIPTOR_TEMPLATES[key] = template
        return desc
    desc = object.__new__(type(template))  # a copy without the checks: fields as the template's
    desc.__dict__.update(template.__dict__)
    desc.base = x
    return desc


_FWD_LAUNCH = LazyLauncher(".kernels", __package__, "lightning_fwd_kernel")


def gluon_fwd(q: Tensor, k: Tensor, v: Tensor, g: Tensor, scale: float, h0: Tensor | None, reverse: bool,
              store_ht: bool, h0_mode: int = _cfg.H0_PLAIN, pdl: bool = False) -> tuple[Tensor, Tensor | None]:
    """The Gluon forward on contiguous inputs the Gluon path takes; returns (o, S_T or None).
    ``h0_mode``: how the start state comes from ``h0`` (``configs.H0_*``, for the backward's passes);
    ``pdl``: a programmatic dependent launch after a kernel whose outputs it does not read
    (``configs.PDL``).
    After the first call of a shape and flag set, the launch goes straight to the compiled kernel
    (``PlainLauncher``): only the four descriptors are made per call, as they carry the pointers."""
    b, t, h, d = q.shape
    hkv, e = k.shape[2], v.shape[3]
    cfg = _cfg.config_for(e)
    o = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    ht = _empty(b, h, d, e, dtype=torch.float32, device=q.device) if store_ht else None
    args = (_descriptor(q, d, _cfg.BT), _descriptor(k, d, _cfg.BT), _descriptor(v, cfg.bv, _cfg.BT),
            _descriptor(o, cfg.bv, _cfg.BT), h0 if h0 is not None else g, ht if ht is not None else g, g,
            t, h, hkv, scale)
    mode = _cfg.H0_NONE if h0 is None else h0_mode
    key = (q.shape, hkv, e, q.dtype, q.get_device(), bool(reverse), mode, bool(store_ht), alignment(h0, g),
           bool(pdl))

    def spec():
        grid = lambda meta: (e // cfg.bv, b * h)  # noqa: E731
        return grid, dict(
            E=e, S_LAYOUT=_layout((d, cfg.bv), q.dtype), REVERSE=bool(reverse), H0_MODE=mode,
            STORE_HT=bool(store_ht), NBUF=cfg.load_stages, NS=cfg.state_stages, NO=cfg.out_stages,
            LOAD_WARPS=cfg.worker_warps[0], STATE_WARPS=cfg.worker_warps[1], LOAD_REGS=cfg.worker_regs[0],
            STATE_REGS=cfg.worker_regs[1], num_warps=cfg.num_warps, maxnreg=cfg.maxnreg,
            **(dict(PDL_WAIT=True, launch_pdl=True) if pdl else {}))

    _FWD_LAUNCH(key, args, spec, raw_stream(q))
    return o, ht


_DKDV_LAUNCH = LazyLauncher(".dkdv", __package__, "lightning_dkdv_kernel")


def gluon_dkdv(q: Tensor, k: Tensor, v: Tensor, do: Tensor, g: Tensor, scale: float, dht: Tensor | None,
               reverse: bool, want_s_end: bool, pdl_trigger: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """(dk, dv, R after the last chunk or None) of the backward in one pass (``dkdv``), on
    contiguous [B, T, H, ·] inputs with H = H_kv; ``reverse`` is the pass's direction (the
    forward's reversed); ``dht`` fp32 [B, H, D, E] or None; ``pdl_trigger``: a programmatic
    dependent launch after it may start as its programs start. The ``backward.DkDv`` contract."""
    b, t, h, d = q.shape
    e = v.shape[3]
    cfg = _cfg.DKDV_CONFIG
    dk = _empty(b, t, h, d, dtype=q.dtype, device=q.device)
    dv = _empty(b, t, h, e, dtype=q.dtype, device=q.device)
    s_end = _empty(b, h, d, e, dtype=torch.float32, device=q.device) if want_s_end else None
    args = (_descriptor(q, d, _cfg.BT), _descriptor(k, d, _cfg.BT), _descriptor(v, e, _cfg.BT),
            _descriptor(do, e, _cfg.BT), _descriptor(dk, d, _cfg.BT), _descriptor(dv, e, _cfg.BT),
            dht if dht is not None else g, s_end if s_end is not None else g, g, t, h, scale)
    key = (q.shape, e, q.dtype, q.get_device(), bool(reverse), dht is not None, bool(want_s_end),
           alignment(dht, g), bool(pdl_trigger))

    def spec():
        grid = lambda meta: (b * h,)  # noqa: E731
        return grid, dict(
            REVERSE=bool(reverse), FROM_DST=dht is not None, STORE_HT=bool(want_s_end), NBUF=cfg.load_stages,
            NS=cfg.state_stages, NO=cfg.out_stages, LOAD_WARPS=cfg.worker_warps[0], STATE_WARPS=cfg.worker_warps[1],
            LOAD_REGS=cfg.worker_regs[0], STATE_REGS=cfg.worker_regs[1], S_LAYOUT=_layout((d, e), q.dtype),
            num_warps=cfg.num_warps, maxnreg=cfg.maxnreg, **(dict(PDL_TRIGGER=True) if pdl_trigger else {}))

    _DKDV_LAUNCH(key, args, spec, raw_stream(q))
    return dk, dv, s_end


# the backward's dq pass and dk / dv pass as programmatic dependent launches (``configs.PDL``)
_PDL_DQ_PASS = functools.partial(gluon_fwd, pdl=True)
_PDL_DKDV = functools.partial(gluon_dkdv, pdl_trigger=True)


# why a forward's backward takes the Triton passes (None: the Gluon ones), per (dtype, heads, kv heads,
# rows) and the switches' values: a forward under autograd asks on every call, and formatting the
# refusal costs more host time than the rule
_BACKWARD_REASONS: dict[tuple, str | None] = {}


def gluon_backward_path(q: Tensor, k: Tensor) -> str | None:
    """None when the backward of a Gluon forward on these inputs runs on the Gluon kernel, else why
    the Triton kernel's backward does."""
    b, t, h, _ = q.shape
    key = (q.dtype, h, k.shape[2], b * t * h, _cfg.BACKWARD_MODE, _cfg.BACKWARD_ON_GLUON)
    if key not in _BACKWARD_REASONS:
        _BACKWARD_REASONS[key] = _cfg.backward_reason(str(q.dtype).removeprefix("torch."), h, k.shape[2], b * t * h)
    return _BACKWARD_REASONS[key]


class GluonForwardFunction(triton_ops.LightningAttnFunction):
    """The Gluon forward; its backward by the Gluon passes (``backward``), or the Triton kernel's
    (inherited), for which the forward saves what it reads (q, k, v, h0, the non-differentiable
    rest, the inputs' alignment)."""

    @staticmethod
    def forward(ctx, q, k, v, h0, rest):
        g, scale, reverse, cu, store_ht, n = rest
        o, ht = gluon_fwd(q, k, v, g, scale, h0, reverse, store_ht)
        ctx.save_for_backward(q, k, v, h0)
        ctx.rest, ctx.align = rest, alignment(q, k, v, g, h0, cu)
        ctx.on_gluon = gluon_backward_path(q, k) is None
        ctx.fused_dkdv = _cfg.FUSED_DKDV
        ctx.pdl = _cfg.PDL
        ctx.set_materialize_grads(False)
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        if not ctx.on_gluon:
            return triton_ops.LightningAttnFunction.backward(ctx, do, dht)
        q, k, v, h0 = ctx.saved_tensors
        g, scale, reverse, _, _, _ = ctx.rest
        do, dht = triton_ops.grad_outputs(q, v, do, dht)
        fwd, dkdv = gluon_fwd, (gluon_dkdv if ctx.fused_dkdv else None)
        if ctx.fused_dkdv and ctx.pdl:  # the dq pass right after dkdv, launched as it starts
            fwd, dkdv = _PDL_DQ_PASS, _PDL_DKDV
        dq, dk, dv, dh0 = backward_by_forwards(fwd, q, k, v, do, dht, g, scale, h0, reverse,
                                               want_dh0=h0 is not None, stream=raw_stream(q), dkdv=dkdv)
        return dq, dk, dv, dh0, None


def lightning_attn_gluon(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, output_final_state: bool = True, reverse: bool = False,
    cu_seqlens=None,
) -> tuple[Tensor, Tensor | None]:
    """Lightning Attention with the Gluon sm_90 forward; layout [B, T, H, D]; returns (o, S_T).

    Same contract as ``lightning_attn_triton``. Calls ``gluon_path`` refuses run the Triton kernel
    instead (fp32, D or E not 64 / 128, varlen, no sm_90, no Gluon); ``gluon_backward_path`` says
    which backward a Gluon forward's gradients come from.
    """
    n, _, _ = checks.validate(q, k, v, initial_state, cu_seqlens)
    if gluon_path(q, v, cu_seqlens) is not None or q.shape[1] == 0 or torch.compiler.is_compiling():
        return triton_ops.lightning_attn_triton(q, k, v, gamma=gamma, scale=scale, initial_state=initial_state,
                                                output_final_state=output_final_state, reverse=reverse,
                                                cu_seqlens=cu_seqlens)
    g = checks.gamma_tensor(gamma, q.shape[2], q.device)
    # T > 0 and no varlen here (those take the Triton path above)
    scale, h0, _, _ = checks.host_args(q, v, n, scale, initial_state, None, output_final_state)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    store_ht = bool(output_final_state)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (h0 is not None and h0.requires_grad)):
        return GluonForwardFunction.apply(q, k, v, h0, (g, scale, bool(reverse), None, store_ht, n))
    return gluon_fwd(q, k, v, g, scale, h0, bool(reverse), store_ht)
