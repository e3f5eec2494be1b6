"""Input values as an axis: gate norms, g dtypes and decays in the spec, suites, rows, report and gate."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.kernels.decay import alibi_decay, lightning_decay
from lattnbench.operators.inputs import constants, numpy_inputs
from lattnbench.measure.tolerance import FLA_TOLERANCE, TOLERANCE, tolerance
from lattnbench.operators import family
from lattnbench.results import ResultsWriter, row_key
from lattnbench.runner.plan import Task
from lattnbench.spec import DEFAULT_GATE_NORM, Case, SpecError, expand, parse_floats
from lattnbench.suite import parse
from lattnbench.views.dependence import data_dependence, moves_with_data, worst_distributions
from lattnbench.views.report import render
from lattnbench.views.rows import load_docs

from speed_rows import base, one_run

runner = CliRunner()
RNG = np.random.default_rng()


def _case(**kw) -> Case:
    return Case(**{**dict(batch=1, seqlen=64, heads=4, kv_heads=4, dim_qk=16, dim_v=16, dtype="fp32"), **kw})


# ---- spec and suites ------------------------------------------------------------------------------

def test_gate_norms_parse_as_positive_numbers_in_order():
    assert parse_floats("16,1,0.1", "--gate-norm") == [16.0, 1.0, 0.1]
    assert parse_floats([2, 2.0, 0.5], "gate norm") == [2.0, 0.5]
    for bad in ("0", "-1", "nan", "inf", "x", "1,,2", ""):
        with pytest.raises(SpecError):
            parse_floats(bad, "--gate-norm")


def test_expand_crosses_every_input_distribution_with_the_shapes():
    cases = expand([64, 128], [1], [4], None, [16], None, ["fp32"], ["alibi", "strong"],
                   gate_norms=[16, 0.1], g_dtypes=["fp32", "bf16"])
    assert len(cases) == 2 * 2 * 2 * 2
    assert {(c.decay, c.gate_norm, c.g_dtype) for c in cases} == {
        (d, g, t) for d in ("alibi", "strong") for g in (16.0, 0.1) for t in ("fp32", "bf16")}
    assert all(isinstance(c.gate_norm, float) for c in cases)


def test_a_family_sees_only_the_input_axes_it_has():
    strong = _case(decay="strong", gate_norm=0.1, g_dtype="bf16")
    lightning = strong.for_family(gated=False)
    gla = strong.for_family(gated=True)
    assert (lightning.decay, lightning.gate_norm, lightning.g_dtype) == ("strong", DEFAULT_GATE_NORM, "fp32")
    assert (gla.decay, gla.gate_norm, gla.g_dtype) == ("strong", 0.1, "bf16")  # its rows keep the decay given
    assert gla.same_work(decayed=False) == _case(gate_norm=0.1, g_dtype="bf16").same_work(decayed=False)
    assert lightning.same_work(decayed=True) != _case().for_family(gated=False).same_work(decayed=True)
    assert "gate_norm" not in strong.fields() and strong.fields(gated=True)["gate_norm"] == 0.1


@pytest.mark.parametrize("bad", [{"gate_norm": 0}, {"gate_norm": -2.0}, {"gate_norm": float("nan")},
                                 {"g_dtype": "fp8"}, {"decay": "steep"}])
def test_a_bad_case_is_refused(bad):
    with pytest.raises(SpecError):
        _case(**bad)


def test_suite_axes_take_gate_norms_g_dtypes_and_decays_as_values_or_lists():
    doc = {"axes": {"n": 64, "gate_norm": [16, 1, 0.1], "g_dtype": ["fp32", "bf16"], "decay": ["alibi", "strong"]},
           "speed": {}, "check-grad": {"tolerance": "fla", "autotune": "first"}}
    suite = parse(doc, "s.toml", "s")
    speed, check = suite.measurements
    assert len(speed.cases) == 3 * 2 * 2
    assert (check.tolerance, check.autotune) == ("fla", "first")
    one = parse({"axes": {"n": 64, "gate_norm": 4, "g_dtype": "bf16", "decay": "strong"}, "speed": {}}, "s", "s")
    assert [(c.gate_norm, c.g_dtype, c.decay) for c in one.measurements[0].cases] == [(4.0, "bf16", "strong")]


@pytest.mark.parametrize("axes, key", [({"gate_norm": -1}, "gate norm"), ({"gate_norm": True}, "gate_norm"),
                                       ({"g_dtype": "int8"}, "g dtype"), ({"decay": ["alibi", "x"]}, "decay")])
def test_suite_refuses_bad_input_axes_naming_them(axes, key):
    with pytest.raises(SpecError, match=key):
        parse({"axes": {"n": 64, **axes}, "speed": {}}, "s.toml", "s")


def test_suite_refuses_an_unknown_tolerance_table():
    with pytest.raises(SpecError, match="tolerance"):
        parse({"axes": {"n": 64}, "check-grad": {"tolerance": "loose"}}, "s.toml", "s")


def test_tasks_keep_their_tolerance_table_and_autotune_mode_through_json():
    t = Task("check-grad", "gla/triton", _case(gate_norm=0.5, g_dtype="bf16"), tolerance="fla", autotune="first")
    back = Task.from_json(json.loads(json.dumps(t.to_json())))
    assert back == t


# ---- inputs and tolerances ------------------------------------------------------------------------

def test_gates_are_logsigmoid_over_the_norm_and_never_positive():
    seed = int(RNG.integers(1 << 30))
    mild = numpy_inputs(_case(gate_norm=16.0), "gla", seed)["g"]
    strong = numpy_inputs(_case(gate_norm=0.1), "gla", seed)["g"]
    assert (mild <= 0).all() and (strong <= 0).all()
    np.testing.assert_allclose(strong, mild * 160.0, rtol=1e-5)
    x = np.random.default_rng(seed).standard_normal((1, 64, 4, 16), dtype=np.float32)
    assert abs(float(np.mean(strong)) - float(np.mean(-np.logaddexp(0, -x) / 0.1))) < 3.0  # same draw family


@pytest.mark.parametrize("heads", [1, 4, 32])
def test_strong_decay_is_every_head_at_least_as_steep_as_every_seed_slope(heads):
    gamma = constants(_case(heads=heads, kv_heads=heads, decay="strong")).gamma
    assert np.all(gamma == gamma[0])
    assert gamma[0] <= -1.0 and gamma[0] <= lightning_decay(heads).min() and gamma[0] <= alibi_decay(heads).min()


def test_dg_is_judged_at_the_rounding_of_the_dtype_it_is_returned_in():
    case, gla = _case(dtype="fp32", g_dtype="bf16"), family("gla")
    assert gla.tolerance(case, "dq") == TOLERANCE["fp32"]
    assert gla.tolerance(case, "dg") == TOLERANCE["bf16"]
    assert gla.tolerance(case, "dg", "fla") == gla.tolerance(case, "o", "fla") == FLA_TOLERANCE
    with pytest.raises(ValueError):
        tolerance("fp32", "loose")


# ---- rows, report and gate ------------------------------------------------------------------------

def test_a_gla_row_written_before_the_gate_axis_is_the_default_distribution():
    old = {"kernel": "gla/triton", "family": "gla", "seqlen": 64, "mode": "fwd", "metric": "time_ms"}
    new = {**old, "gate_norm": 16, "g_dtype": "fp32"}
    assert row_key(old) == row_key(new)
    assert row_key(old) != row_key({**new, "gate_norm": 1.0})
    light = {"kernel": "lightning/triton", "family": "lightning", "seqlen": 64, "mode": "fwd", "metric": "time_ms"}
    assert json.dumps(None) in row_key(light)


def _gate_rows(times: dict[tuple[str, float], float], seqlen: int = 2048) -> list[dict]:
    rows = []
    for (kernel, norm), t in times.items():
        b = base(kernel, seqlen, "fwd", gate_norm=norm, g_dtype="fp32")
        rows.append(one_run(b, 0, t, graph=t, latency=t, seed=int(RNG.integers(1000))))
    return rows


def test_data_dependence_flags_a_kernel_whose_time_moves_with_the_gates_alone():
    slow = float(RNG.uniform(2.0, 9.0))
    rows = _gate_rows({("gla/triton", 16.0): 1.0, ("gla/triton", 0.1): slow,
                       ("gla/fla-chunk", 16.0): 2.0, ("gla/fla-chunk", 0.1): 2.2})
    rows += _gate_rows({("gla/triton", 16.0): 9.0}, seqlen=8192)  # alone at its length: nothing to compare
    flagged = data_dependence(rows)
    by_kernel = {(r["kernel"], r["seqlen"]): flagged.get(id(r)) for r in rows}
    assert by_kernel[("gla/triton", 2048)] == pytest.approx(slow, rel=0.02)
    assert by_kernel[("gla/fla-chunk", 2048)] is None and by_kernel[("gla/triton", 8192)] is None


def test_report_marks_data_dependent_cells_and_summarises_them(tmp_path: Path):
    slow = float(RNG.uniform(3.0, 9.0))
    path = tmp_path / "gates.json"
    w = ResultsWriter(path, "gates", {"gpu": "NVIDIA H200"}, {})
    w.add(_gate_rows({("gla/triton", 16.0): 1.0, ("gla/triton", 0.1): slow,
                      ("gla/fla-chunk", 16.0): 2.0, ("gla/fla-chunk", 0.1): 2.1}))
    md = render(load_docs([path]))
    assert f"§{slow:.2g}×" in md and "#### data dependence" in md
    summary = md.split("#### data dependence")[1]
    assert "gla/triton" in summary and "gla/fla-chunk" not in summary
    assert "gate/0.1 g:fp32" in summary and "gate/16 g:fp32" in summary
    res = runner.invoke(app, ["report", str(path)], env={"COLUMNS": "80"})
    assert res.exit_code == 0 and "§" in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80


def _err_row(kernel: str, tensor: str, norm: float, err: float, tol: float = 5e-3) -> dict:
    return {"kernel": kernel, "family": "gla", "device": "cuda", "batch": 2, "seqlen": 1024, "heads": 8,
            "kv_heads": 8, "dim_qk": 128, "dim_v": 128, "dtype": "bf16", "decay": "alibi", "gate_norm": norm,
            "g_dtype": "fp32", "mode": "fwdbwd", "metric": "err_ratio", "tensor": tensor, "median": err, "err": err,
            "tol": tol, "status": "ok" if err <= tol else "fail", "reason": None}


def test_worst_distribution_per_tensor_and_whether_the_values_move_it():
    bad = float(RNG.uniform(0.01, 0.1))
    rows = [_err_row("gla/triton", "dg", 16.0, 3e-3), _err_row("gla/triton", "dg", 0.1, bad),
            _err_row("gla/triton", "dq", 16.0, 2.9e-3), _err_row("gla/triton", "dq", 0.1, 2.7e-3),
            _err_row("gla/triton", "o", 16.0, float("nan"))]  # alone: not at two distributions
    worst = {w["tensor"]: w for w in worst_distributions(rows)}
    assert set(worst) == {"dg", "dq"}
    assert worst["dg"]["distribution"] == "gate/0.1 g:fp32" and worst["dg"]["err"] == bad
    assert not worst["dg"]["passed"] and moves_with_data(worst["dg"])
    assert worst["dq"]["distribution"] == "gate/16 g:fp32" and not moves_with_data(worst["dq"])


def test_gate_pairs_gla_rows_at_any_gate_with_an_ungated_reference(tmp_path: Path):
    def run(path: Path, gla_time: float) -> Path:
        w = ResultsWriter(path, "ci", {"gpu": "NVIDIA H200"}, {})
        rows = _gate_rows({("gla/triton", 0.1): gla_time})
        ref = base("lightning/naive-torch", 2048, "fwd")
        rows.append(one_run(ref, 0, 1.0, graph=1.0, latency=1.0))
        w.add(rows)
        return path

    base_run = run(tmp_path / "base.json", 1.0)
    same = runner.invoke(app, ["gate", str(run(tmp_path / "same.json", 1.0)), "--baseline", str(base_run),
                               "--reference", "lightning/naive-torch", "--json"])
    slower = runner.invoke(app, ["gate", str(run(tmp_path / "slow.json", 3.0)), "--baseline", str(base_run),
                                 "--reference", "lightning/naive-torch", "--threshold", "10%", "--json"])
    assert same.exit_code == 0, same.output
    assert slower.exit_code == 1, slower.output
    assert "no ref" not in slower.stdout


# ---- the commands -------------------------------------------------------------------------------

def test_speed_writes_a_row_per_gate_norm_and_runs_lightning_once(tmp_path: Path):
    out = tmp_path / "speed.json"
    res = runner.invoke(app, ["speed", "--device", "cpu", "-k", "gla/jax-chunked,lightning/jax-chunked",
                              "--n", "64", "--batch", "1", "--heads", "2", "--dim", "16", "--mode", "fwd",
                              "--budget", "0.05", "--gate-norm", "16,0.1", "--decay", "random,strong",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    gla = sorted(r["gate_norm"] for r in rows if r["kernel"] == "gla/jax-chunked")
    light = [r for r in rows if r["kernel"] == "lightning/jax-chunked"]
    assert gla == [0.1, 16.0]  # once per gate norm, not per decay: GLA has no per-head decay
    assert all(r["g_dtype"] == "fp32" and r["status"] == "ok" and r["decay"] == "random"
               for r in rows if r["kernel"] == "gla/jax-chunked")
    assert sorted(r["decay"] for r in light) == ["random", "strong"]  # once per decay, not per gate norm
    assert all("gate_norm" not in r for r in light)


def test_check_grad_judges_by_fla_table_and_records_it(tmp_path: Path):
    out = tmp_path / "check.json"
    res = runner.invoke(app, ["check-grad", "--device", "cpu", "-k", "gla/jax-chunked", "--n", "16",
                              "--batch", "1", "--heads", "2", "--dim", "8", "--gate-norm", "1",
                              "--g-dtype", "bf16", "--tolerance", "fla", "--initial-state", "on", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["tol_table"] == "fla" and r["tol"] == FLA_TOLERANCE for r in rows)
    assert {r["tensor"] for r in rows} >= {"o", "dg"}
    assert all(r["gate_norm"] == 1.0 and r["g_dtype"] == "bf16" for r in rows)
    dg = next(r for r in rows if r["tensor"] == "dg")
    assert 0 < dg["median"] < FLA_TOLERANCE and not math.isnan(dg["median"])


@pytest.mark.parametrize("args", [["--gate-norm", "0"], ["--gate-norm", "abc"], ["--g-dtype", "fp8"],
                                  ["--decay", "alibi,steep"], ["--tolerance", "loose"]])
def test_bad_input_values_are_one_line_usage_errors(args):
    res = runner.invoke(app, ["check-grad", "--device", "cpu", "-k", "gla/jax-chunked", "--n", "16", *args])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output
