"""The end terms of the three-pass backward in one Triton launch, in place of a dozen torch calls.

Why: the backward runs on autograd's device thread, where each torch call costs the host several
µs more than on the main thread, and below n = 8192 a fwd+bwd is host-bound. After its three
passes the backward adds the last token's dS_T correction to dk and dv and makes dS_0:

    dk[:, last] += w_h·dS_T·v_last,   dv[:, last] += w_h·dS_Tᵀ·k_last,
    dS_0 = scale·λ_h·S_end + λ_h^T·w_h·dS_T

with ``w_h = 1 − scale·λ_h·c_h`` and ``c_h = exp(min(−γ_h, −floor)) / scale`` (``backward``). The
same terms in torch calls are ``backward.end_terms_torch``, the reference this launch is tested
against (fp32 here, any dtype there).
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from ...common.arith import pow2
from ...common.launch import PlainLauncher, alignment

Tensor = torch.Tensor


@triton.jit
def _last_share(g_ptr, i_h, FLOOR: tl.constexpr):
    """w of head i_h: the share of dS_T the capped start state leaves to the last token."""
    gam = tl.load(g_ptr + i_h).to(tl.float32)
    return -(tl.exp(tl.minimum(gam - FLOOR, 0.0)) - 1.0)


@triton.jit
def _row_index(i_b, i_h, T, H, last):
    """Row ``last`` of head i_h of sequence i_b in [B, T, H, ·], int64: times the head dim it is
    an element offset past 2^31 in the last sequences of a large batch (B5 T131072 H32 D128)."""
    return (i_b.to(tl.int64) * T + last) * H + i_h


@triton.jit
def end_terms_kernel(
    dht, k, v, dk, dv, s_end, dh0, g, T, H, scale, last,
    D: tl.constexpr, E: tl.constexpr, BD: tl.constexpr, BE: tl.constexpr, FLOOR: tl.constexpr,
    HAS_DHT: tl.constexpr, WANT_DH0: tl.constexpr,
):
    """grid (B·H,): the last token's correction of dk and dv (rows ``last`` of [B, T, H, ·]) and
    dS_0 from the dv pass's final state. A head whose w is 0 (every head above the floor) adds
    nothing to dk and dv: without dS_0 to make, its program returns after reading γ. The host
    cannot skip the launch without reading device data, and a launch whose programs all run their
    loop takes about 13 µs on an H200, 1.4 % of a fwd+bwd at B4 T8192 H32 D = E = 128.

    The per-program bases are int64 scalars, as in the forward kernels: a [B, T, H, 128] tensor
    passes 2^31 elements at B5 T131072 H32, where an int32 ``row * E`` wraps negative. Offsets
    inside a tile stay int32."""
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // H, i_bh % H
    o_e = tl.arange(0, BE)
    m_e = o_e < E
    gam = tl.load(g + i_h).to(tl.float32)
    if HAS_DHT and not WANT_DH0:
        if _last_share(g, i_h, FLOOR) == 0.0:
            return
    if HAS_DHT:
        w = _last_share(g, i_h, FLOOR)
        row = _row_index(i_b, i_h, T, H, last)
        row_d, row_e = row * D, row * E
        v_last = tl.load(v + row_e + o_e, mask=m_e, other=0.0).to(tl.float32)
        dv_acc = tl.zeros([BE], dtype=tl.float32)
    st = i_bh.to(tl.int64) * (D * E)  # state i_bh of [B, H, D, E]
    for d0 in range(0, D, BD):
        o_d = d0 + tl.arange(0, BD)
        m_d = o_d < D
        m = m_d[:, None] & m_e[None, :]
        de = o_d[:, None] * E + o_e[None, :]
        if HAS_DHT:
            wd = tl.load(dht + st + de, mask=m, other=0.0) * w                     # [BD, BE]
            k_last = tl.load(k + row_d + o_d, mask=m_d, other=0.0).to(tl.float32)
            dk_row = dk + row_d + o_d
            dk_new = tl.load(dk_row, mask=m_d, other=0.0).to(tl.float32) + tl.sum(wd * v_last[None, :], axis=1)
            tl.store(dk_row, dk_new.to(dk.dtype.element_ty), mask=m_d)
            dv_acc += tl.sum(wd * k_last[:, None], axis=0)
        if WANT_DH0:
            t0 = tl.load(s_end + st + de, mask=m, other=0.0) * (scale * tl.exp(gam))
            if HAS_DHT:
                t0 += tl.exp(T * gam) * wd
            tl.store(dh0 + st + de, t0, mask=m)
    if HAS_DHT:
        dv_row = dv + row_e + o_e
        dv_new = tl.load(dv_row, mask=m_e, other=0.0).to(tl.float32) + dv_acc
        tl.store(dv_row, dv_new.to(dv.dtype.element_ty), mask=m_e)


_BD = 32  # state rows per tile: a [32, 128] fp32 tile is 32 registers a thread over 4 warps
_END = PlainLauncher(sys.modules[__name__], "end_terms_kernel")


def _empty(*shape, dtype, device) -> Tensor:
    """Allocation of every buffer a launch fully writes (tests patch it to NaN-fill)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def end_terms(dht: Tensor | None, k: Tensor, v: Tensor, dk: Tensor, dv: Tensor, s_end: Tensor | None,
              g: Tensor, scale: float, floor: float, last: int, stream: int | None = None) -> Tensor | None:
    """Adds the last token's dS_T correction into rows ``last`` of dk and dv (in place) and returns
    dS_0 from ``s_end``, the dv pass's final state (None when it is None)."""
    if dht is None and s_end is None:
        return None
    b, t, h, d = k.shape
    e = v.shape[3]
    dh0 = _empty(b, h, d, e, dtype=torch.float32, device=k.device) if s_end is not None else None
    ph = dht if dht is not None else s_end
    args = (ph, k, v, dk, dv, s_end if s_end is not None else ph, dh0 if dh0 is not None else ph, g, t, h,
            float(scale), int(last))
    key = (k.shape, v.shape, k.dtype, dk.dtype, k.get_device(), int(last), dht is not None, s_end is not None,
           alignment(dht, k, v, dk, dv, s_end, g))

    def spec():
        return (lambda meta: (b * h,)), dict(D=d, E=e, BD=_BD, BE=pow2(e), FLOOR=float(floor),
                                             HAS_DHT=dht is not None, WANT_DH0=s_end is not None)

    _END(key, args, spec, stream)
    return dh0
