"""The CI gate's threshold against real CPU runs: unchanged code passes, a slow-down fails."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "results/cpu/ci.json"
GATE = ["--baseline", str(BASE), "--threshold", "100%", "--reference", "lightning/naive-torch"]


def ci_threshold() -> str:
    """The threshold .ci/run uses (this test must follow it)."""
    line = next(x for x in (ROOT / ".ci/run").read_text().splitlines() if x.strip().startswith("lattnbench gate"))
    return line.split("--threshold")[1].split()[0]


def test_ci_uses_the_threshold_tested_here():
    assert ci_threshold() == "100%"


@pytest.mark.parametrize("run", sorted((ROOT / "results/cpu/ci-spread").glob("run*.json.gz")), ids=lambda p: p.name.split(".")[0])
def test_reruns_of_unchanged_code_pass(run):
    res = CliRunner().invoke(app, ["gate", str(run), *GATE])
    assert res.exit_code == 0, res.output[-1500:]


def _slowed(tmp_path, kernel: str, factor: float) -> Path:
    doc = json.loads(BASE.read_text())
    for r in doc["rows"]:
        if r["kernel"] == kernel and r["metric"] == "time_ms" and r["status"] == "ok":
            for k in ("median", "p20", "p80"):
                r[k] *= factor
            r["samples_ms"] = [x * factor for x in r["samples_ms"]]
    out = tmp_path / "slow.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_2_5x_slowdown_of_one_kernel_fails(tmp_path):
    res = CliRunner().invoke(app, ["gate", str(_slowed(tmp_path, "lightning/jax-chunked", 2.5)), *GATE, "--json"])
    assert res.exit_code == 1
    bad = {p["kernel"] for p in json.loads(res.stdout)["points"] if p["verdict"] == "REGRESSION"}
    assert bad == {"lightning/jax-chunked"}


def test_a_correctness_failure_fails(tmp_path):
    doc = json.loads(BASE.read_text())
    row = next(r for r in doc["rows"] if r["kernel"] == "lightning/triton" and r["metric"] == "err_ratio")
    row.update(status="fail", median=10 * row["tol"], err=10 * row["tol"])
    out = tmp_path / "wrong.json"
    out.write_text(json.dumps(doc))
    assert CliRunner().invoke(app, ["gate", str(out), *GATE]).exit_code == 1


UNCHANGED = ROOT / "results/cpu/gate-unchanged"


@pytest.mark.parametrize("cur, base", [("run2", "run1"), ("run1", "run2")])
def test_two_default_cpu_runs_of_unchanged_code_pass_the_gate_with_its_defaults(cur, base):
    """`lattnbench speed` twice on a busy 2-core CPU: ratios moved by up to 2.3x, and the gate's
    defaults (the CPU threshold, the interval wholly beyond it) call that noise."""
    doc = json.loads((UNCHANGED / f"{base}.json").read_text())
    assert "threshold" not in doc and "reference" not in doc  # the defaults decide
    res = CliRunner().invoke(app, ["gate", str(UNCHANGED / f"{cur}.json"),
                                   "--baseline", str(UNCHANGED / f"{base}.json")])
    assert res.exit_code == 0, res.output[-1500:]
    assert res.output.startswith("passed: ") and "threshold 100%: the default for CPU runs" in res.output


def test_the_default_cpu_threshold_still_catches_a_3x_slowdown(tmp_path):
    doc = json.loads((UNCHANGED / "run1.json").read_text())
    for r in doc["rows"]:
        if r["kernel"] == "lightning/jax-chunked" and r["status"] == "ok":
            for k in ("median", "p20", "p80"):
                r[k] *= 3
            r["samples_ms"] = [x * 3 for x in r["samples_ms"]]
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(doc))
    res = CliRunner().invoke(app, ["gate", str(slow), "--baseline", str(UNCHANGED / "run1.json"), "--json"])
    assert res.exit_code == 1
    assert {p["kernel"] for p in json.loads(res.stdout)["points"] if p["verdict"] == "REGRESSION"} == \
        {"lightning/jax-chunked"}


H200_GATE = ROOT / "results/h200/gpu-gate"


@pytest.mark.parametrize("run", sorted(H200_GATE.glob("rerun-*.json")), ids=lambda p: p.stem)
def test_h200_reruns_of_one_commit_pass_the_gpu_gate(run):
    """The committed GPU-gate example: the same commit measured again passes at the suite's 5 %."""
    res = CliRunner().invoke(app, ["gate", str(run), "--baseline", str(H200_GATE / "base.json")])
    assert res.exit_code == 0, res.output[-1500:]
    assert json.loads(run.read_text())["env"]["commit"] == json.loads((H200_GATE / "base.json").read_text())["env"]["commit"]


def test_h200_slowed_probe_fails_the_gpu_gate_on_its_points_only():
    res = CliRunner().invoke(app, ["gate", str(H200_GATE / "slowed.json"), "--baseline", str(H200_GATE / "base.json")],
                             terminal_width=200)
    assert res.exit_code == 1, res.output[-1500:]
    failed = [line for line in res.output.splitlines() if line.startswith("REGRESSION")]
    assert len(failed) == 4 and all("plugin/lightning-probe" in line for line in failed)
    assert not any("sdpa-flash" in line for line in failed)
