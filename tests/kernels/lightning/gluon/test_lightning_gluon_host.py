"""lightning/gluon on the CPU: the rule of which calls take the Gluon forward, the fallback to the
Triton kernel (same numbers, same errors), the warp_specialize signature probe, the registry
entry's refusals, and an ahead-of-time sm_90 compile of the kernel where this Triton has Gluon."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.common import gluon_compat as compat
from lattnbench.kernels.lightning.gluon import gluon_path, lightning_attn_gluon
from lattnbench.kernels.lightning.gluon import configs as gcfg
from lattnbench.kernels.lightning.gluon import ops as gops
from lattnbench.kernels.lightning.gluon.backward import dkdv_by_forwards, with_start_states
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.kernels.lightning.triton import ops as tops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio
from lattnbench.registry import default_registry
from lattnbench.spec import Case
from triton_testutil import gluon_aot_metrics


def _qkv(gen, b=1, t=40, h=4, hkv=2, d=16, e=32, dtype=torch.float32):
    def rnd(*s):
        return torch.randn(*s, generator=gen).to(dtype)
    return rnd(b, t, h, d), rnd(b, t, hkv, d), rnd(b, t, hkv, e)


@pytest.mark.parametrize("dtype,d,e,varlen,needle", [
    ("float32", 128, 128, False, "dtype float32"),
    ("bfloat16", 96, 128, False, "D=96"),
    ("float16", 128, 32, False, "E=32"),
    ("bfloat16", 64, 128, True, "varlen"),
])
def test_the_fallback_rule_names_what_the_gluon_forward_does_not_take(dtype, d, e, varlen, needle):
    assert needle in gcfg.fallback_reason(dtype, d, e, varlen)


@pytest.mark.parametrize("d,e", [(64, 64), (128, 128), (64, 128), (128, 64)])
def test_the_fallback_rule_takes_half_precision_at_64_and_128(d, e):
    assert gcfg.fallback_reason("bfloat16", d, e, False) is None
    assert gcfg.fallback_reason("float16", d, e, False) is None


def test_on_the_cpu_a_call_runs_the_triton_kernel_whole():
    gen = torch.Generator().manual_seed(7)
    q, k, v = _qkv(gen)
    h0 = torch.randn(1, 4, 16, 32, generator=gen)
    gamma = -torch.rand(4, generator=gen)
    wide = torch.randn(1, 8, 2, 64, generator=gen, dtype=torch.bfloat16)
    assert "CUDA" in gluon_path(wide, wide)  # bf16 at a D, E it takes: refused for the device alone
    got = lightning_attn_gluon(q, k, v, gamma=gamma, initial_state=h0, reverse=True)
    want = lightning_attn_triton(q, k, v, gamma=gamma, initial_state=h0, reverse=True)
    for x, y in zip(got, want):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_bad_input_fails_before_any_path_is_chosen():
    gen = torch.Generator().manual_seed(3)
    q, k, v = _qkv(gen)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        lightning_attn_gluon(q, k[:, :, :1].expand(-1, -1, 3, -1), v[:, :, :1].expand(-1, -1, 3, -1))
    with pytest.raises(ValueError, match="initial_state"):
        lightning_attn_gluon(q, k, v, initial_state=torch.zeros(1, 4, 16, 16))


def test_device_reason_refuses_a_gpu_other_than_sm90(monkeypatch):
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "sm_80" in gops.device_reason(torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert gops.device_reason(torch.device("cuda")) is None
    monkeypatch.setattr(compat, "IMPORT_ERROR", "ImportError: no gluon")
    assert "Gluon" in gops.device_reason(torch.device("cuda"))


def test_the_warp_specialize_probe_tells_the_two_signatures_apart(monkeypatch):
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")

    def older(default_args, default_partition, worker_args, worker_partitions, worker_num_warps, worker_num_regs):
        raise AssertionError("not called")

    def newer(functions_and_args, worker_num_warps, worker_num_regs=None):
        raise AssertionError("not called")

    monkeypatch.setattr(compat.gl, "warp_specialize", older)
    assert compat._list_form() is False
    monkeypatch.setattr(compat.gl, "warp_specialize", newer)
    assert compat._list_form() is True


def test_the_registry_entry_refuses_cpu_fp32_and_a_gpu_without_sm90(monkeypatch):
    entry = default_registry()["lightning/gluon"]
    assert "cuda" in entry.available("cpu")
    case = Case(batch=1, seqlen=64, heads=2, kv_heads=2, dim_qk=64, dim_v=64)
    assert "fp32" in entry.supports(case.with_(dtype="fp32"), "cuda")
    assert entry.supports(case, "cuda") is None
    assert "Triton" in entry.description and "varlen" in entry.description
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no CUDA device" in entry.available("cuda")
    if compat.IMPORT_ERROR is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
        assert "sm_100" in entry.available("cuda")


def test_the_forward_and_the_dkdv_pass_compile_for_sm90_with_async_wgmma_and_warp_specialization():
    """The AOT compiles, in one fresh process (a Triton kernel interpreted in this one leaves
    Triton's language patched).

    The forward: every wgmma on tensor cores, a wait with a group still in flight (the QKᵀ wait
    deferred past the issue of Q·S), per-partition register limits, shared memory within the
    H200's 227 KB, and no spills without h0 / final state (the chunk loops are spill-free).

    The dk / dv pass: its two halves interleaved, so a wait leaves three groups in flight (both
    state products and the second score product issued before the first score is read); the
    forward's register split; its 4-tile ring, state and output buffers within the 227 KB. A few
    scalar spills are not asserted away (Triton 3.6, the GPU image's, spills 56 B, 3.9 120 B)."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    fwd, dkdv = gluon_aot_metrics(
        "compile_forward(d=128, e=128, dtype='bf16', reverse=False, has_h0=False, store_ht=False)",
        "compile_dkdv(d=128, e=128, dtype='bf16', reverse=True, from_dst=True, store_ht=True)")
    cfg = gcfg.config_for(128)
    assert fwd["wgmma"] > 0 and 1 in fwd["wait_depths"] and 0 in fwd["wait_depths"]
    assert {cfg.worker_regs[0], cfg.worker_regs[1]} <= set(fwd["setmaxnreg"])
    assert fwd["registers"] <= cfg.maxnreg and fwd["spilled_bytes"] == 0
    assert 0 < fwd["shared_bytes"] <= 227 * 1024
    assert fwd["tma_stores"] >= 1 and fwd["mbarrier_waits"] >= 4
    cfg = gcfg.DKDV_CONFIG
    assert dkdv["wgmma"] > fwd["wgmma"] and dkdv["wait_depths"] == [0, 1, 2, 3]
    assert {cfg.worker_regs[0], cfg.worker_regs[1]} <= set(dkdv["setmaxnreg"]) and dkdv["registers"] <= cfg.maxnreg
    assert 0 < dkdv["shared_bytes"] <= 227 * 1024
    assert dkdv["tma_loads"] >= 4 and dkdv["tma_stores"] >= 2 and dkdv["mbarrier_waits"] >= 4
    # by default neither is a programmatic dependent launch nor controls one (configs.PDL)
    assert fwd["grid_dependency_waits"] == fwd["grid_dependents"] == dkdv["grid_dependents"] == 0
    assert not fwd["launch_pdl"] and not dkdv["launch_pdl"]


def test_with_pdl_dkdv_lets_the_dq_pass_launch_and_the_dq_pass_waits_before_it_ends():
    """LIGHTNING_GLUON_PDL: the dq pass (the forward from S_0ᵀ) compiles as a programmatic dependent
    launch with one ``griddepcontrol.wait`` a thread, after its partitions join; ``dkdv`` issues
    ``griddepcontrol.launch_dependents`` before its partitions start. Same registers as without."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    dq_pass, dkdv = gluon_aot_metrics(
        f"compile_forward(d=128, e=128, dtype='bf16', h0_mode={gcfg.H0_TRANSPOSED}, store_ht=False, pdl=True)",
        "compile_dkdv(d=128, e=128, dtype='bf16', reverse=True, from_dst=True, store_ht=True, pdl_trigger=True)")
    assert dq_pass["launch_pdl"] and dq_pass["grid_dependency_waits"] >= 1 and dq_pass["grid_dependents"] == 0
    assert dkdv["grid_dependents"] >= 1 and dkdv["grid_dependency_waits"] == 0 and not dkdv["launch_pdl"]
    assert dq_pass["registers"] <= gcfg.config_for(128).maxnreg and dkdv["registers"] <= gcfg.DKDV_CONFIG.maxnreg


def test_the_gluon_backward_takes_long_bf16_calls_without_grouped_heads_unless_told(monkeypatch):
    big = gcfg.GLUON_BACKWARD_MIN_ROWS
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", False)
    assert "LIGHTNING_GLUON_BACKWARD=0" in gcfg.backward_reason("bfloat16", 4, 4, big)
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", True)
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "auto")
    assert gcfg.backward_reason("bfloat16", 4, 4, big) is None
    assert "host-bound" in gcfg.backward_reason("bfloat16", 4, 4, big - 1)
    assert "bf16 only" in gcfg.backward_reason("float16", 4, 4, big)
    assert "grouped heads" in gcfg.backward_reason("bfloat16", 4, 2, big)
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "1")
    assert gcfg.backward_reason("bfloat16", 4, 4, 1) is None
    assert "bf16 only" in gcfg.backward_reason("float16", 4, 4, 1)
    wide = torch.randn(1, 8, 4, 64, dtype=torch.bfloat16)
    assert gops.gluon_backward_path(wide, wide) is None
    assert "grouped" in gops.gluon_backward_path(wide, wide[:, :, :2])
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "auto")
    assert "32 rows" in gops.gluon_backward_path(wide, wide)  # B·T·H = 1·8·4


@pytest.mark.parametrize("on_gluon,fused", [(True, False), (True, True), (False, True)],
                         ids=["gluon-backward-passes", "gluon-backward-dkdv", "triton-backward"])
def test_a_gluon_forward_takes_the_backward_its_rule_names(monkeypatch, on_gluon, fused):
    """The autograd wiring, with the interpreter's Triton forward standing in for the Gluon one
    (same contract) and two of its passes for the dk / dv kernel: three more forward calls when
    the rule says Gluon, or a dq pass and one dk / dv call with that kernel on (as the forward call
    found the switch, though it flips before the backward), none otherwise, and the fp64 gradients
    every way."""
    calls = []

    @with_start_states
    def triton_fwd(q, k, v, g, scale, h0, reverse, store_ht):
        return tops.lightning_fwd(q, k, v, g, scale, h0, reverse, None, store_ht, q.shape[0])

    def stand_in(q, k, v, g, scale, h0, reverse, store_ht, h0_mode=gcfg.H0_PLAIN):
        calls.append(reverse)
        return triton_fwd(q, k, v, g, scale, h0, reverse, store_ht, h0_mode)

    def dkdv_stand_in(q, k, v, do, g, scale, dht, reverse, want_s_end):
        calls.append(("dkdv", reverse))
        return dkdv_by_forwards(triton_fwd)(q, k, v, do, g, scale, dht, reverse, want_s_end)

    monkeypatch.setattr(gops, "gluon_path", lambda q, v, cu_seqlens=None: None)
    monkeypatch.setattr(gops, "gluon_fwd", stand_in)
    monkeypatch.setattr(gops, "gluon_dkdv", dkdv_stand_in)
    monkeypatch.setattr(gcfg, "FUSED_DKDV", fused)
    monkeypatch.setattr(gops, "gluon_backward_path", lambda q, k: None if on_gluon else "off")
    gen = torch.Generator().manual_seed(11)
    q, k, v = _qkv(gen, b=2, t=37, h=4, hkv=4, d=16, e=8)
    h0 = torch.randn(2, 4, 16, 8, generator=gen)
    gamma = -torch.rand(4, generator=gen) * 2
    do, ds = torch.randn(2, 37, 4, 8, generator=gen), torch.randn(2, 4, 16, 8, generator=gen)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, h0)]
    o, s = lightning_attn_gluon(*leaves[:3], gamma=gamma, initial_state=leaves[3], reverse=True)
    monkeypatch.setattr(gcfg, "FUSED_DKDV", not fused)
    grads = torch.autograd.grad((o, s), leaves, (do, ds))
    # the dk and dv passes reverse the forward's order and run first, the dq pass keeps it
    passes = [True, ("dkdv", False), True] if fused else [True, False, False, True]
    assert calls == (passes if on_gluon else [True])
    ref = [x.double().requires_grad_(True) for x in (q, k, v, h0)]
    ro, rs = lightning_naive(*ref[:3], gamma.double(), 16**-0.5, ref[3], True)
    want = torch.autograd.grad((ro, rs), ref, (do.double(), ds.double()))
    errors = [err_ratio(x, y) for x, y in zip(grads, want)]
    assert all(err <= TOLERANCE["fp32"] for err in errors), errors


def test_descriptors_after_the_first_of_a_shape_are_checked_copies_with_their_own_base():
    """A shape's later descriptors carry their own tensor and every field of a full one; a base
    off the 16-byte grid still fails the descriptor's own check."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    b, t, h, d = 2, int(torch.randint(5, 40, ())), 3, 64
    first, second = (torch.randn(b, t, h, d).to(torch.bfloat16) for _ in range(2))
    full = compat.TensorDescriptor(second, [b, t, h * d], [t * h * d, h * d, 1], [1, 64, 32],
                                   gops._layout((1, 64, 32), torch.bfloat16))
    a, c = gops._descriptor(first, 32, 64), gops._descriptor(second, 32, 64)
    assert a.base is first and c.base is second
    assert {**vars(c), "base": None} == {**vars(full), "base": None}
    assert gops._DESCRIPTOR_TEMPLATES[(second.shape, second.dtype, 32, 64)].base is None
    flat = torch.empty(b * t * h * d + 1, dtype=torch.bfloat16)
    off_grid = flat[1:].view(b, t, h, d)  # 2 bytes past an aligned start
    with pytest.raises(AssertionError, match="16-byte"):
        gops._descriptor(off_grid, 32, 64)
