"""--world-size: the tool starts the ranks itself (gloo on the CPU), rank 0 writes the rows.

One run of the real CLI at world size 2 serves every check (each start of ranks imports torch
in two processes): the Triton kernel (interpreter) on packed sequences that cross the shard
boundary, backwards, with h0, against the fp64 reference; then a kernel whose rank 1 dies and
one whose rank 1 hangs. The failures become rows with their reasons, and the finished point stays.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lattnbench.registry import default_registry
from lattnbench.results import row_key
from lattnbench.runner.select import single_rank
from lattnbench.spec import Case

HERE = Path(__file__).parent
BOOT = [sys.executable, "-c", "import sys; sys.argv[0] = 'lattnbench'; from lattnbench.cli import main; main()"]


def test_world_size_2_checks_kernels_and_survives_a_rank_that_dies_or_hangs(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    case = ["--varlen", "7,10,5", "--heads", "2", "--kv-heads", "1", "--dim", "16", "--reverse",
            "--initial-state", "on", "--device", "cpu"]
    # two runs at once: the interpreted kernel without a point timeout (under load it may take
    # longer than any short limit), the faulty plugins with one short enough to catch the hang
    runs = {
        "good": [*BOOT, "check-grad", "--world-size", "2", "-k", "lightning/triton-sp", *case,
                 "--out", str(tmp_path / "good.json")],
        "faulty": [*BOOT, "check-grad", "--world-size", "2", "--kernel", "sp_faults:dies_on_rank1",
                   "--kernel", "sp_faults:hangs_on_rank1", "-k", "plugin/dies_on_rank1,plugin/hangs_on_rank1",
                   *case, "--point-timeout", "6", "--out", str(tmp_path / "faulty.json")],
    }
    procs = {name: subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, cmd in runs.items()}
    done = {name: p.communicate(timeout=180) + (p.returncode,) for name, p in procs.items()}
    assert done["good"][2] == 0, done["good"][1][-3000:]
    assert done["faulty"][2] == 1, done["faulty"][1][-3000:]  # the failed points make the run fail
    good = json.loads((tmp_path / "good.json").read_text())["rows"]
    assert {r["tensor"] for r in good} == {"o", "final_state", "dq", "dk", "dv", "dh0"}
    assert all(r["status"] == "ok" and r["median"] <= r["tol"] and r["world_size"] == 2 for r in good), good
    rows = json.loads((tmp_path / "faulty.json").read_text())["rows"]
    died = [r for r in rows if r["kernel"] == "plugin/dies_on_rank1"]
    assert died and all(r["status"] == "error" and "rank 1 of 2 ended (exit status 7)" in r["reason"] for r in died)
    hung = [r for r in rows if r["kernel"] == "plugin/hangs_on_rank1"]
    assert hung and all(r["status"] == "timeout" for r in hung)
    assert "crash" in done["faulty"][1] and "timeout" in done["faulty"][1]


def test_world_size_is_part_of_a_points_identity_and_old_rows_are_world_size_1():
    one, two = Case(1, 64, 2, 2, 16, 16, "fp32"), Case(1, 64, 2, 2, 16, 16, "fp32", world_size=2)
    assert "world_size" not in one.fields() and two.fields()["world_size"] == 2
    old = {"kernel": "lightning/triton", "seqlen": 64, "metric": "time_ms"}  # written before world_size existed
    assert row_key(old) == row_key({**old, "world_size": 1}) != row_key({**old, "world_size": 2})
    reg = default_registry()
    assert "not sequence parallel" in reg["lightning/triton"].supports(two, "cpu")
    assert reg["lightning/triton-sp"].supports(two, "cpu") is None
    assert "cannot give each" in reg["lightning/triton-sp"].supports(two.with_(seqlen=1, world_size=2), "cpu")


def test_a_world_size_no_chosen_kernel_can_split_is_a_usage_error_naming_those_that_can(tmp_path):
    """Only sequence-parallel kernels have points above world size 1: a selection left with none is
    a one-line usage error (exit 2) that names the kernels that can, and writes no results file;
    a kernel that loses some of its points to the world size is named (in a note)."""
    from typer.testing import CliRunner

    from lattnbench.cli import app

    runner = CliRunner()
    out = tmp_path / "r.json"
    for command in ("speed", "memory", "check-grad"):
        res = runner.invoke(app, [command, "--world-size", "2", "-k", "lightning/triton,gla/triton", "--device", "cpu",
                                  "--out", str(out)])
        assert res.exit_code == 2, (command, res.output)
        line = res.output.strip().splitlines()[-1]
        assert line.startswith("error: nothing to run: --world-size 2") and "lightning/triton-sp" in line, line
        assert "lightning/triton, gla/triton are not sequence parallel" in line, line
        assert not out.exists()
    # a selection that keeps points names the kernels that lose those above world size 1
    reg = default_registry()
    chosen = [reg["lightning/triton"], reg["lightning/triton-sp"]]
    one, two = Case(1, 64, 2, 2, 16, 16, "fp32"), Case(1, 64, 2, 2, 16, 16, "fp32", world_size=2)
    assert single_rank(chosen, [one, two]) == ["lightning/triton"]
    assert single_rank(chosen, [one]) == []
