"""``lattnbench compare``: runs side by side, faster / slower / within noise, at 80 columns and as JSON."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.results import ResultsWriter
from tests.lattnbench.speed_rows import base, one_run

ROOT = Path(__file__).resolve().parents[2]
RUN1, RUN2 = ROOT / "results/cpu/gate-unchanged/run1.json", ROOT / "results/cpu/gate-unchanged/run2.json"


def invoke(*args, width: int = 80):
    return CliRunner().invoke(app, ["compare", *map(str, args)], env={"COLUMNS": str(width)})


def write(path: Path, times: dict[str, float], runs: int = 1) -> Path:
    w = ResultsWriter(path, "t", {})
    for r in range(runs):
        for kernel, t in times.items():
            row = one_run(base(kernel, 4096), r, t * (1 + 0.01 * r), seed=r)
            w.add({**row, "runs": [{"run": r, "status": "ok", "median": row["median"]}]} if runs > 1 else row)
    return path


def test_two_committed_runs_side_by_side_fit_80_columns():
    res = invoke(RUN1, RUN2)
    assert res.exit_code == 0, res.output
    assert all(len(ln) <= 80 for ln in res.stdout.splitlines())
    assert "A = " in res.stdout and "B/A" in res.stdout and "within noise of 18 points" in res.stdout


def test_verdicts_follow_the_noise_ranges(tmp_path):
    a = write(tmp_path / "a.json", {"lightning/triton": 1.0, "softmax/sdpa-flash": 2.0, "lightning/gluon": 1.0})
    b = write(tmp_path / "b.json", {"lightning/triton": 1.3, "softmax/sdpa-flash": 2.002, "lightning/gluon": 0.7})
    res = invoke(a, b, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    got = {p["kernel"]: (round(p["ratios"][0], 2), p["verdicts"][0]) for p in doc["points"]}
    assert got == {"lightning/triton": (1.3, "slower"), "softmax/sdpa-flash": (1.0, "~"),
                   "lightning/gluon": (0.7, "faster")}
    assert doc["baseline"] == str(a) and doc["counts"] == {"faster": 1, "slower": 1, "~": 1}


def test_three_files(tmp_path):
    a = write(tmp_path / "a.json", {"lightning/triton": 1.0})
    b = write(tmp_path / "b.json", {"lightning/triton": 1.5})
    c = write(tmp_path / "c.json", {"lightning/triton": 0.5})
    res = invoke(a, b, c)
    assert res.exit_code == 0, res.output
    assert "1.50× slower" in res.stdout and "0.50× faster" in res.stdout and "C/A" in res.stdout


@pytest.mark.parametrize("args, needle", [
    ([RUN1], "two or more"),
    ([RUN1, "/nonexistent.json"], "no such results file"),
    ([RUN1, ROOT / "results/h200/seed-readme.json.gz"], "share no timed point"),
    ([RUN1, RUN2, "--timer", "wall"], "unknown timer"),
])
def test_errors_are_one_line_exit_2(args, needle):
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert needle in res.output and len(res.output.strip().splitlines()) == 1
