"""--breakdown: the kernels (on a CPU, the operators) one timed call launches, measured by
torch.profiler after the point's timers, kept in its row and printed by report."""
from __future__ import annotations

import json
import time

import pytest
import torch
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.harness.points import Sweeper
from lattnbench.measure import breakdown as bd
from lattnbench.runner.plan import Task
from lattnbench.spec import Case, SpecError
from lattnbench.suite import load_suite

runner = CliRunner()


def _sync(_):
    pass


def test_each_operator_is_counted_per_call_and_sorted_by_time():
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    wait_s = 0.03

    def call():
        with torch.profiler.record_function("wait"):  # a range with no operator inside: all self time
            time.sleep(wait_s)
        return torch.exp(torch.mm(torch.mm(a, b), b) * 1e-3)

    got = bd.kernel_breakdown(call, _sync, calls=3, cuda=False)
    by_name = {k["name"]: k for k in got["kernels"]}
    assert by_name["aten::mm"]["launches"] == 2.0 and by_name["aten::exp"]["launches"] == 1.0
    assert by_name["wait"]["launches"] == 1.0
    assert got["calls"] == 3 and "over 3 calls" in got["method"]
    times = [k["ms"] for k in got["kernels"]]
    assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
    assert got["total_ms"] == pytest.approx(sum(times))
    # per call, not summed over the calls: a sleep is never shorter than asked (load only lengthens
    # it), and three calls' worth would be 90 ms
    assert wait_s * 1e3 <= by_name["wait"]["ms"] < 3 * wait_s * 1e3


def test_past_the_top_kernels_the_rest_is_one_other_entry():
    x = torch.randn(64, 64)
    ops = [torch.exp, torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.abs, torch.neg, torch.sqrt,
           torch.log1p, torch.floor, torch.ceil, torch.round, torch.trunc, torch.sign, torch.square, torch.erf]

    def call():
        return [op(x.abs() + 1) for op in ops]

    got = bd.kernel_breakdown(call, _sync, calls=2, cuda=False)
    assert len(got["kernels"]) == bd.TOP + 1 and got["kernels"][-1]["name"] == "other"
    assert got["kernels"][-1]["launches"] >= len(ops) + 2 - bd.TOP
    with pytest.raises(ValueError, match="at least 1"):
        bd.kernel_breakdown(call, _sync, calls=0, cuda=False)


def test_a_failing_profile_keeps_its_reason_and_not_the_point():
    sweeper = Sweeper("cpu", lambda rows: None, {}, breakdown=True)

    class Timed:
        timers = {"device": type("T", (), {"median": 1.0})()}

    def boom():
        raise RuntimeError("profiler went away\nsecond line")

    got = sweeper._breakdown(boom, type("B", (), {"sync": staticmethod(_sync)})(), Timed())
    assert got == {"status": "error", "reason": "RuntimeError: profiler went away"}


def test_speed_breakdown_rows_and_report(tmp_path):
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["speed", "-k", "lightning/naive-torch", "--device", "cpu", "--n", "48", "--heads", "2",
                              "--dim", "8", "--mode", "fwd,fwdbwd", "--budget", "0.02", "--breakdown",
                              "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert {r["mode"] for r in rows} == {"fwd", "fwdbwd"}
    for r in rows:
        names = [k["name"] for k in r["breakdown"]["kernels"]]
        assert r["breakdown"]["calls"] >= 2 and names and r["breakdown"]["total_ms"] > 0
        assert any("bmm" in n or "einsum" in n or "mm" in n for n in names), names
    # the backward's products are in fwd+bwd's breakdown and not in fwd's
    launches = {r["mode"]: sum(k["launches"] for k in r["breakdown"]["kernels"]) for r in rows}
    assert launches["fwdbwd"] > launches["fwd"]
    assert "--breakdown" in doc["invocation"]["args"]  # a resumed run profiles too
    assert "breakdown" not in out.with_suffix(".csv").read_text().splitlines()[0].split(",")

    shown = runner.invoke(app, ["report", str(out), "--format", "md"], catch_exceptions=False)
    assert shown.exit_code == 0 and "| kernel" in shown.output and "launches" in shown.output
    assert "**lightning/naive-torch** fwdbwd" in shown.output

    # compare: the same points with one kernel twice as slow read as 2.00x on that kernel's line
    slower = json.loads(out.read_text())
    first = slower["rows"][-1]["breakdown"]["kernels"][0]
    first["ms"] *= 2
    (tmp_path / "slower.json").write_text(json.dumps(slower))
    both = runner.invoke(app, ["compare", str(out), str(tmp_path / "slower.json"), "--mode", slower["rows"][-1]["mode"]],
                         catch_exceptions=False, env={"COLUMNS": "120"})
    assert both.exit_code == 0 and "kernel of a call" in both.output, both.output
    line = next(ln for ln in both.output.splitlines() if ln.startswith(first["name"][:30]))
    assert line.rstrip().endswith("2.00×"), line
    as_json = json.loads(runner.invoke(app, ["compare", str(out), str(tmp_path / "slower.json"), "--json"]).output)
    got = {(p["mode"], name): t for p in as_json["points"] for name, t in p["kernels"].items()}
    assert got[(slower["rows"][-1]["mode"], first["name"])][1] == pytest.approx(2 * got[(slower["rows"][-1]["mode"], first["name"])][0])

    plain = tmp_path / "p.json"
    res = runner.invoke(app, ["speed", "-k", "lightning/naive-torch", "--device", "cpu", "--n", "48", "--heads", "2",
                              "--dim", "8", "--mode", "fwd", "--budget", "0.02", "--out", str(plain)],
                        catch_exceptions=False)
    assert res.exit_code == 0 and all("breakdown" not in r for r in json.loads(plain.read_text())["rows"])


def test_the_switch_travels_with_the_task_and_a_suite_sets_it(tmp_path):
    case = Case(batch=1, seqlen=64, heads=2, kv_heads=2, dim_qk=16, dim_v=16)
    t = Task("speed", "lightning/triton", case, ("fwd",), 0.2, breakdown=True)
    assert Task.from_json(t.to_json()) == t
    assert Task.from_json(Task("speed", "lightning/triton", case).to_json()).breakdown is False
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nkernels = ["lightning/naive-torch"]\n[axes]\nn = 64\n[speed]\nbreakdown = true\n')
    (m,) = load_suite(str(path)).measurements
    assert m.breakdown is True
    path.write_text('name = "s"\nkernels = ["lightning/naive-torch"]\n[axes]\nn = 64\n[speed]\nbreakdown = "yes"\n')
    with pytest.raises(SpecError, match="breakdown"):
        load_suite(str(path))


def test_a_breakdown_without_kernels_says_why_in_the_report():
    from lattnbench.views.breakdown import breakdown_tables

    row = {"kernel": "lightning/jax-chunked", "mode": "fwd", "metric": "time_ms", "median": 0.5, "batch": 1,
           "seqlen": 64, "heads": 2, "kv_heads": 2, "dim_qk": 8, "dim_v": 8, "dtype": "fp32", "family": "lightning",
           "breakdown": {"method": "m", "calls": 3, "total_ms": 0, "kernels": []}}
    (text,) = breakdown_tables([row])
    assert "saw no kernel" in text and "XLA" in text
    failed = {**row, "breakdown": {"status": "error", "reason": "RuntimeError: no CUPTI"}}
    assert "no breakdown (RuntimeError: no CUPTI)" in breakdown_tables([failed])[0]
    assert breakdown_tables([{**row, "breakdown": None}]) == []
