"""A family defined in one test-local file (toy_family.py), registered at runtime, runs through
speed, memory, check-grad, report and gate on the CPU with no harness change."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench import registry
from lattnbench.cli import app
from lattnbench.registry import entry

HERE = Path(__file__).resolve().parent
TORCH, JAX, WRONG = "toy_family:toy_torch", "toy_family:toy_jax", "toy_family:toy_wrong"
SMALL = ("--device", "cpu", "--n", "24,40", "--heads", "2", "--dim", "8")
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


@pytest.fixture(autouse=True)
def toy(monkeypatch):
    """toy_family importable here and in any worker process; registry caches fresh."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    for clear in (entry._importable.cache_clear, entry._load.cache_clear, registry.default_registry.cache_clear):
        clear()
    yield
    registry.default_registry.cache_clear()


def test_toy_family_speed_and_memory(tmp_path):
    speed = tmp_path / "s.json"
    res = invoke("speed", "--kernel", TORCH, "--kernel", JAX, "-k", "plugin/toy-torch,plugin/toy-jax", *SMALL,
                 "--mode", "fwd,fwdbwd", "--budget", "0.01", "--out", speed)
    assert res.exit_code == 0, res.output
    rows = rows_of(speed)
    assert len(rows) == 8 and {r["family"] for r in rows} == {"toy"}
    assert all(r["status"] == "ok" and r["median"] > 0 for r in rows)
    assert "gate_norm" not in rows[0]  # the toy family is not gated: its rows carry no gate fields

    mem = tmp_path / "m.json"
    res = invoke("memory", "--kernel", JAX, "-k", "plugin/toy-jax", *SMALL, "--out", mem)
    assert res.exit_code == 0, res.output
    rows = rows_of(mem)
    assert rows and all(r["status"] == "ok" and r["metric"] == "peak_mb" and r["median"] > 0 for r in rows)

    report = invoke("report", speed, "--format", "md")
    assert report.exit_code == 0 and "plugin/toy-torch" in report.output and "plugin/toy-jax" in report.output


def test_toy_family_check_grad_and_gate(tmp_path):
    good = tmp_path / "good.json"
    res = invoke("check-grad", "--kernel", TORCH, "--kernel", JAX, "-k", "plugin/toy-torch,plugin/toy-jax",
                 *SMALL, "--initial-state", "both", "--out", good)
    rows = rows_of(good)
    assert res.exit_code == 0, [(r["kernel"], r["tensor"], r["status"], r["reason"]) for r in rows]
    assert {r["tensor"] for r in rows} == {"o", "final_state", "dq", "dk", "dv", "dh0"}
    assert all(r["status"] == "ok" and r["median"] <= r["tol"] for r in rows)

    bad = tmp_path / "bad.json"
    res = invoke("check-grad", "--kernel", TORCH, "--kernel", WRONG, "-k", "plugin/toy-torch,plugin/toy-wrong",
                 *SMALL, "--initial-state", "both", "--out", bad)
    rows = rows_of(bad)
    assert res.exit_code == 1
    wrong = [r for r in rows if r["kernel"] == "plugin/toy-wrong"]
    assert wrong and {r["status"] for r in wrong} == {"fail"} and all(r["median"] > r["tol"] for r in wrong)
    assert all(r["status"] == "ok" for r in rows if r["kernel"] == "plugin/toy-torch")

    same = invoke("gate", good, "--baseline", good, "--reference", "none")
    assert same.exit_code == 0, same.output
    regressed = invoke("gate", bad, "--baseline", good, "--reference", "none")
    assert regressed.exit_code == 1, regressed.output
    assert "FAIL plugin/toy-wrong" in regressed.output and "FAIL plugin/toy-torch" not in regressed.output
