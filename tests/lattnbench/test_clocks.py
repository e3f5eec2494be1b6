"""Waiting for the GPU to cool before a point (``clocks.settle``), with a fake NVML and clock."""
from __future__ import annotations

import pytest

from lattnbench.measure import clocks
from lattnbench.runner.plan import Task
from lattnbench.spec import Case, SpecError
from lattnbench.suite import load_suite


class FakeGPU:
    """Temperatures read one after another; sleeping moves the fake clock on."""

    def __init__(self, temps):
        self.temps, self.now, self.slept = list(temps), 0.0, 0

    def read(self):
        t = self.temps.pop(0) if len(self.temps) > 1 else self.temps[0]
        return {"temp_c": t, "sm_mhz": 1980}

    def sleep(self, s):
        self.now += s
        self.slept += 1

    def clock(self):
        return self.now


def test_settle_waits_until_the_target_temperature():
    gpu = FakeGPU([62, 58, 55, 51, 49, 47])
    got = clocks.settle(50, read=gpu.read, sleep=gpu.sleep, clock=gpu.clock)
    assert got == {"settle_s": 2.0, "settle_temp_c": 49, "settle_reached": True}
    assert gpu.slept == 4


def test_settle_gives_up_after_its_limit_and_says_so():
    gpu = FakeGPU([70])
    got = clocks.settle(50, max_s=3.0, read=gpu.read, sleep=gpu.sleep, clock=gpu.clock)
    assert got["settle_reached"] is False and got["settle_temp_c"] == 70 and got["settle_s"] == 3.0


def test_a_cool_gpu_does_not_wait_and_no_nvml_is_none():
    gpu = FakeGPU([40])
    assert clocks.settle(50, read=gpu.read, sleep=gpu.sleep, clock=gpu.clock)["settle_s"] == 0.0
    assert gpu.slept == 0
    assert clocks.settle(50, read=lambda: None, sleep=gpu.sleep, clock=gpu.clock) is None


def test_the_target_travels_with_the_task():
    case = Case(batch=1, seqlen=64, heads=2, kv_heads=2, dim_qk=16, dim_v=16)
    t = Task("speed", "lightning/triton", case, ("fwd",), 0.2, settle_c=45.0)
    assert Task.from_json(t.to_json()) == t
    assert Task.from_json(Task("speed", "lightning/triton", case).to_json()).settle_c is None


def test_a_suite_sets_it_per_speed_section(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nkernels = ["lightning/naive-torch"]\n[axes]\nn = 64\n'
                    '[speed]\nsettle = 45\n')
    (m,) = load_suite(str(path)).measurements
    assert m.settle_c == 45.0
    path.write_text('name = "s"\nkernels = ["lightning/naive-torch"]\n[axes]\nn = 64\n[speed]\nsettle = -3\n')
    with pytest.raises(SpecError, match="settle"):
        load_suite(str(path))


def test_a_cpu_point_never_waits(monkeypatch):
    from lattnbench.harness.points import Sweeper
    from lattnbench.registry import default_registry

    monkeypatch.setattr(clocks, "settle", lambda *a, **k: pytest.fail("settle on a CPU"))
    rows = []
    case = Case(batch=1, seqlen=32, heads=2, kv_heads=2, dim_qk=16, dim_v=16, dtype="fp32")
    Sweeper("cpu", rows.extend, {}, budget_s=0.02, settle_c=45.0).speed(
        default_registry()["lightning/naive-torch"], case, ["fwd"])
    assert rows[0]["status"] == "ok" and "settle_s" not in rows[0]
