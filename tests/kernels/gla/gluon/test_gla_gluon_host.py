"""gla/triton's Gluon prep launch on the CPU: the rule that picks it, that a CPU call keeps the
Triton launch, and its sm_90 compile (its kernels run on the GPU: tests/gpu/test_gla_gluon_prep.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import gla_triton
from lattnbench.kernels.common import gluon_compat as compat


def test_the_rule_names_why_a_call_keeps_the_triton_prep_launch(monkeypatch):
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    assert "GLA_GLUON_PREP=1" in host.prep_reason(q, 64)
    monkeypatch.setattr(host, "ON", True)
    assert "float32" in host.prep_reason(q.float(), 64)
    assert "D=96" in host.prep_reason(torch.zeros(1, 8, 2, 96, dtype=torch.bfloat16), 64)
    assert "chunk 32" in host.prep_reason(q, 32)
    if compat.IMPORT_ERROR is None:
        assert "not cpu" in host.prep_reason(q, 64)


def test_a_cpu_call_with_the_switch_on_runs_the_triton_prep_launch(monkeypatch):
    monkeypatch.setattr(host, "ON", True)
    monkeypatch.setattr(host, "launch_prep", lambda *a: pytest.fail("the Gluon launch on a CPU"))
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    q, k, v = (torch.randn(1, 40, 2, 16, generator=gen) for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 40, 2, 16, generator=gen))
    o, s = gla_triton(q, k, v, g)
    assert torch.isfinite(o).all() and torch.isfinite(s).all()


def test_the_prep_launch_compiles_for_sm90_with_one_wgmma_per_level_over_all_of_d():
    """Six levels, each one tf32 wgmma chain over all 128 key channels (16 k-steps of 8), unrolled;
    a bounded number of barriers a chunk: two per level (its operands staged in shared memory) and
    those of the loads' and stores' layout changes (33 on Triton 3.6, 46 on 3.9), where the Triton
    launch passes a barrier for every gather of every level and key slice; shared memory within
    the H200's 227 KB. In a fresh process (see the Lightning Gluon test)."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    code = ("import json; from lattnbench.static.gluon_aot import compile_gla_prep; "
            "m = compile_gla_prep(d=128, dtype='bf16', reverse=True); m.pop('ptx'); print('METRICS', json.dumps(m))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("METRICS ")]
    assert run.returncode == 0 and line, run.stderr[-2000:]
    m = json.loads(line[0].removeprefix("METRICS "))
    assert m["wgmma"] == 6 * 128 // 8
    assert 12 <= m["barriers"] <= 48
    assert 0 < m["shared_bytes"] <= 227 * 1024
