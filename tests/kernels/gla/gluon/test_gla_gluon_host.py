"""gla/triton's Gluon parallel launches on the CPU: the rule that picks them, that a CPU call keeps
the Triton launches, and their sm_90 compile (their kernels run on the GPU:
tests/gpu/test_gla_gluon_prep.py)."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import gla_triton
from lattnbench.kernels.common import gluon_compat as compat
from triton_testutil import gluon_aot_metrics


def test_the_rule_names_why_a_call_keeps_the_triton_launches(monkeypatch):
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(host, "PREP_ON", False)
    assert "GLA_GLUON_PREP=0" in host.prep_reason(q, 64)
    assert "GLA_GLUON_INTRA=1" in host.intra_reason(q, q, 64)
    monkeypatch.setattr(host, "INTRA_ON", True)
    assert "E=96" in host.intra_reason(q, torch.zeros(1, 8, 2, 96, dtype=torch.bfloat16), 64)
    assert "float32" in host.intra_reason(q.float(), q.float(), 64)
    monkeypatch.setattr(host, "PREP_ON", True)
    assert "float32" in host.prep_reason(q.float(), 64)
    assert "D=96" in host.prep_reason(torch.zeros(1, 8, 2, 96, dtype=torch.bfloat16), 64)
    assert "chunk 32" in host.prep_reason(q, 32)
    if compat.IMPORT_ERROR is None:
        assert "not cpu" in host.prep_reason(q, 64)


def test_a_cpu_call_with_the_switches_on_runs_the_triton_launches(monkeypatch):
    monkeypatch.setattr(host, "PREP_ON", True)
    monkeypatch.setattr(host, "INTRA_ON", True)
    monkeypatch.setattr(host, "launch_prep", lambda *a: pytest.fail("the Gluon prep launch on a CPU"))
    monkeypatch.setattr(host, "launch_intra", lambda *a: pytest.fail("the Gluon in-chunk launch on a CPU"))
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    q, k, v = (torch.randn(1, 40, 2, 16, generator=gen).requires_grad_() for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 40, 2, 16, generator=gen)).requires_grad_()
    o, s = gla_triton(q, k, v, g)
    grads = torch.autograd.grad((o, s), (q, k, v, g), (torch.randn_like(o), torch.randn_like(s)))
    assert all(torch.isfinite(x).all() for x in (o, s, *grads))


def test_the_parallel_launches_compile_for_sm90_with_their_level_products_unrolled():
    """The prep launch: six levels, each one tf32 wgmma chain over all 128 key channels (16 k-steps
    of 8), unrolled;
    a bounded number of barriers a chunk: two per level (its operands staged in shared memory) and
    those of the loads' and stores' layout changes (33 on Triton 3.6, 46 on 3.9), where the Triton
    launch passes a barrier for every gather of every level and key slice; shared memory within
    the H200's 227 KB. In a fresh process (see the Lightning Gluon test)."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    prep, prep16, intra = gluon_aot_metrics("compile_gla_prep(d=128, dtype='bf16', reverse=True)",
                                            "compile_gla_prep(d=128, dtype='bf16', asynchronous=True)",
                                            "compile_gla_bwd_intra(d=128, e=128, dtype='bf16')")
    assert prep["wgmma"] == 6 * 128 // 8
    assert 12 <= prep["barriers"] <= 48
    assert 0 < prep["shared_bytes"] <= 227 * 1024
    # fp16 operands (GLA_GLUON_PREP_ASYNC): k-steps of 16, each level's product waited on one level
    # later, and the channel-major operands written as vectors: a third of the shared stores or less
    assert prep16["wgmma"] == 6 * 128 // 16
    assert 1 in prep16["wait_depths"]
    assert prep16["shared_stores"] * 3 <= prep["shared_stores"], (prep16["shared_stores"], prep["shared_stores"])
    assert 0 < prep16["shared_bytes"] <= 227 * 1024
    # the in-chunk backward: do·vᵀ (8 k-steps of 16 over E = 128), then per key slice of 32 six
    # levels of two tf32 products over the chunk's 64 rows (8 k-steps of 8 each), the slice loop
    # not unrolled
    assert intra["wgmma"] == 128 // 16 + 6 * 2 * 64 // 8
    assert 0 < intra["shared_bytes"] <= 227 * 1024
