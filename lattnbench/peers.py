"""Adapters for other projects' kernels, registered whether or not their package is installed.

``lattnbench list`` shows each with the reason when its package is missing. Every adapter hands
its kernel exactly the function the reference computes (same decay, same scale) so that an
agreement check means something, and declares what it cannot do so that such a case is
recorded as ``unsupported`` rather than crashing.
"""
from __future__ import annotations

from collections.abc import Callable

from lattnbench.registry import KernelEntry
from lattnbench.spec import Case


def _fla_chunk() -> Callable:
    import torch
    from fla.ops.simple_gla import chunk_simple_gla

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        cu = None if cu_seqlens is None else cu_seqlens.to(torch.long)
        return chunk_simple_gla(q, k, v, g_gamma=gamma, scale=scale, initial_state=initial_state,
                                output_final_state=True, cu_seqlens=cu)
    return fn


def _opennlplab() -> Callable:
    from lightning_attn.ops import lightning_attn_func

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        # official layout [B, H, N, D]; decay exp(-s) with s = -γ; no scale (entry pins scale 1)
        slopes = (-gamma).float().reshape(-1, 1, 1)
        o = lightning_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), slopes)
        return o.transpose(1, 2), None
    return fn


def _official_case(case: Case) -> str | None:
    for dim in {case.dim_qk, case.dim_v}:
        if dim & (dim - 1) or dim < 32:
            return f"head dim {dim}: the official kernel needs powers of two >= 32"
    return None


def _flash_attn() -> Callable:
    from flash_attn import flash_attn_func

    def fn(q, k, v, scale):
        return flash_attn_func(q, k, v, softmax_scale=scale, causal=True)
    return fn


def entries() -> list[KernelEntry]:
    return [
        KernelEntry("lightning/fla-chunk", "lightning", "torch", _fla_chunk, devices=("cuda",),
                    requires=("fla",), origin="peer",
                    features=frozenset({"initial_state", "varlen", "dv", "any_dim"}),
                    description="fla-core chunk_simple_gla with g_gamma"),
        KernelEntry("lightning/opennlplab", "lightning", "torch", _opennlplab, devices=("cuda",),
                    requires=("lightning_attn",), origin="peer", fixed_scale=1.0, final_state=False,
                    features=frozenset({"dv"}), case_check=_official_case,
                    description="official lightning_attn 0.0.5 lightning_attn_func (scale 1, no state)"),
        KernelEntry("softmax/flash-attn", "softmax", "torch", _flash_attn, devices=("cuda",),
                    requires=("flash_attn",), origin="peer", dtypes=("bf16", "fp16"),
                    features=frozenset({"gqa", "any_dim"}),
                    description="flash_attn_func (FlashAttention-2/3 package)"),
    ]
