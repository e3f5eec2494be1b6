"""lightning/gluon past 2^31 elements, on the CPU: at B5 T131072 H32 D=E=128 a [B, T, H, 128] tensor
holds 2.7e9 elements, so a program's base offset into it must be int64 (the B4 shape holds exactly
2^31 and still fits int32). Nothing here allocates that much: the end-term launch's row offsets run
in a probe kernel, the compiled kernels' scalar pointer offsets are read from their TTIR / TTGIR,
and the forward's TMA descriptors and grid are built over meta tensors with the launch captured.
"""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from lattnbench.kernels.common import gluon_compat as compat
from lattnbench.kernels.lightning.gluon import configs as gcfg
from lattnbench.kernels.lightning.gluon import end_terms
from lattnbench.kernels.lightning.gluon import ops as gops
from lattnbench.kernels.lightning.gluon.backward import backward_by_forwards
from triton_testutil import gluon_aot_metrics

B, T, H, D = 5, 131072, 32, 128  # the long suite's check-rows shape past 2^31 elements
INT32_MAX = 2**31 - 1


@triton.jit
def _row_offsets_probe(out, T, H, last, E: tl.constexpr):
    """out[i_bh]: the element offset of row ``last`` of program i_bh, as end_terms_kernel makes it."""
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // H, i_bh % H
    tl.store(out + i_bh, end_terms._row_index(i_b, i_h, T, H, last) * E)


@pytest.mark.parametrize("last", [T - 1, 0], ids=["forward", "reverse"])
def test_the_end_terms_row_offsets_past_2_31_elements_are_exact(last):
    """The offset of the corrected row of every (b, h) at B5: the last sequence's pass 2^31, where
    the int32 ``(i_b·T + last)·H + i_h`` times E wrapped negative (the illegal access)."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = torch.zeros(B * H, dtype=torch.int64, device=dev)
    _row_offsets_probe[(B * H,)](out, T, H, last, E=D)
    bh = torch.arange(B * H, dtype=torch.int64)
    want = ((bh // H * T + last) * H + bh % H) * D
    assert want.max() > INT32_MAX  # the case does cross 2^31
    assert torch.equal(out.cpu(), want)


@pytest.fixture(scope="module")
def compiled():
    """Both kernels of lightning/gluon that take pointers, compiled for sm_90 in a fresh process."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    end, fwd = gluon_aot_metrics("compile_end_terms()",
                                 "compile_forward(d=128, e=128, dtype='bf16', reverse=False, has_h0=True, store_ht=True)")
    return {"end_terms": end, "forward": fwd}


def test_the_end_term_launch_offsets_every_tensor_in_int64(compiled):
    """Each scalar pointer offset of the end-term launch is int64 but the decay vector's (an offset
    below H); the tile offsets on top stay int32, and the kernel does not spill."""
    m = compiled["end_terms"]
    by_base = {}
    for _, base, ty in m["scalar_offsets"]:
        by_base.setdefault(base, set()).add(ty)
    assert {"k", "v", "dk", "dv", "dht", "s_end", "dh0"} <= set(by_base), by_base
    assert all(tys == {"i64"} for base, tys in by_base.items() if base != "g"), by_base
    assert m["spilled_bytes"] == 0 and m["registers"] <= 128, m


def test_the_forward_offsets_its_states_in_int64(compiled):
    """The forward moves q, k, v, o by TMA (coordinates below 2^31, see below); its only scalar
    offsets are the decay's (``%gam``, i32, below H) and the states' h0 load and final-state
    store (int64)."""
    offsets = compiled["forward"]["scalar_offsets"]
    assert all(res.startswith("gam") for res, _, ty in offsets if ty != "i64"), offsets
    assert sum(ty == "i64" for _, _, ty in offsets) >= 2, offsets


def test_the_descriptors_and_grid_at_b5_t131072_fit_tma_and_launch_limits(monkeypatch):
    """The forward and the backward's three passes at B5 T131072 H32 D128, over meta tensors with
    the launches captured: every TMA descriptor within the hardware's limits and Triton's (it hands
    the kernel a descriptor's shape as int32), every box coordinate a program issues within int32,
    the grid within CUDA's."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    launches = []

    def capture(key, args, spec, stream=None):
        launches.append((args, spec()))
    monkeypatch.setattr(gops, "_FWD_LAUNCH", capture)
    monkeypatch.setattr(gops, "_DESCRIPTOR_TEMPLATES", {})
    meta = dict(dtype=torch.bfloat16, device="meta")
    q, k, v, do = (torch.empty(B, T, H, D, **meta) for _ in range(4))
    g = torch.empty(H, dtype=torch.float32, device="meta")
    h0, dht = (torch.empty(B, H, D, D, dtype=torch.float32, device="meta") for _ in range(2))
    assert q.numel() > INT32_MAX
    gops.gluon_fwd(q, k, v, g, D**-0.5, h0, False, True)
    ends = []
    backward_by_forwards(gops.gluon_fwd, q, k, v, do, dht, g, D**-0.5, h0, False, want_dh0=True,
                         end=lambda *a, **kw: ends.append(a))
    assert len(launches) == 4 and len(ends) == 1
    for args, (grid, kw) in launches:
        descs, (t, heads, kv_heads) = args[:4], args[7:10]
        for desc in descs:
            nbytes = desc.base.element_size()
            assert all(0 < n <= INT32_MAX for n in desc.shape), desc.shape   # kernel arg i32; TMA ≤ 2^32
            assert desc.strides[-1] == 1
            assert all(s * nbytes % 16 == 0 and s * nbytes < 2**40 for s in desc.strides[:-1]), desc.strides
            assert all(n <= 256 for n in desc.block_shape), desc.block_shape
            # the largest coordinates a program passes: its last chunk's row, its last column tile
            bt = desc.block_shape[1]
            assert (t + bt - 1) // bt * bt <= INT32_MAX and desc.shape[2] <= INT32_MAX
        assert max(t, heads, kv_heads) <= INT32_MAX
        x, y = grid({})
        assert x >= 1 and y == B * H and y <= 65535
        assert kw["num_warps"] == gcfg.config_for(D).num_warps
