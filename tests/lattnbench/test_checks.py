"""check-grad's other checks: batch rows against themselves alone, the determinism column."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app

runner = CliRunner()


@pytest.fixture
def plugins(monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.path.parent))


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_batch_rows_catch_a_row_that_differs_from_itself_alone(plugins, tmp_path):
    out = tmp_path / "rows.json"
    res = invoke("check-grad", "--batch-rows", "--kernel", "fake_kernels:offset_bug",
                 "-k", "plugin/offset-bug,lightning/jax-chunked", "--n", "40", "--batch", "3", "--heads", "2",
                 "--dim", "16", "--initial-state", "off", "--out", out)
    assert res.exit_code == 1
    rows = json.loads(out.read_text())["rows"]
    assert {r["check"] for r in rows} == {"row 0", "row 2"}  # the first and the last row
    bad = {(r["kernel"], r["check"], r["tensor"]) for r in rows if r["status"] == "fail"}
    assert ("plugin/offset-bug", "row 2", "o") in bad and ("plugin/offset-bug", "row 2", "dq") in bad
    assert not any(k == "lightning/jax-chunked" or c == "row 0" for k, c, _ in bad)
    assert all(r["median"] < 1e-6 for r in rows if r["kernel"] == "lightning/jax-chunked")


def test_batch_rows_refuse_a_single_row_or_varlen(tmp_path):
    out = tmp_path / "r.json"
    res = invoke("check-grad", "--batch-rows", "-k", "lightning/jax-chunked", "--n", "16", "--batch", "1",
                 "--heads", "2", "--dim", "8", "--initial-state", "off", "--out", out)
    assert res.exit_code == 0
    assert {r["status"] for r in json.loads(out.read_text())["rows"]} == {"unsupported"}


def test_every_checked_tensor_says_whether_a_second_call_was_bitwise_equal(tmp_path):
    out = tmp_path / "d.json"
    res = invoke("check-grad", "-k", "lightning/jax-chunked,lightning/naive-torch", "--n", "16", "--heads", "2",
                 "--dim", "8", "--out", out)
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["deterministic"] is True for r in rows if r["status"] == "ok")


def test_a_kernel_that_is_right_but_not_reproducible_passes_with_deterministic_false(plugins, tmp_path):
    out = tmp_path / "j.json"
    res = invoke("check-grad", "--kernel", "fake_kernels:jitter", "-k", "plugin/jitter", "--n", "16",
                 "--heads", "2", "--dim", "8", "--initial-state", "off", "--out", out)
    assert res.exit_code == 0, res.output  # a column, not a failure
    by = {r["tensor"]: r for r in json.loads(out.read_text())["rows"]}
    assert by["o"]["status"] == "ok" and by["o"]["deterministic"] is False
    assert "≠" in res.output


def test_input_scale_scales_the_inputs_and_labels_the_rows(tmp_path):
    import numpy as np

    from lattnbench.operators.inputs import numpy_inputs
    from lattnbench.spec import Case

    plain = numpy_inputs(Case(1, 16, 2, 2, 8, 8, "fp32"), "lightning", 3)
    loud = numpy_inputs(Case(1, 16, 2, 2, 8, 8, "fp32", input_scale=10.0), "lightning", 3)
    assert np.allclose(loud["q"], 10 * plain["q"]) and np.allclose(loud["do"], plain["do"])
    assert "input_scale" not in Case(1, 16, 2, 2, 8, 8).fields()  # old rows keep their identity
    out = tmp_path / "s.json"
    res = invoke("check-grad", "-k", "lightning/jax-chunked", "--decay", "zero", "--input-scale", "1,10",
                 "--n", "64", "--heads", "2", "--dim", "8", "--initial-state", "off", "--out", out)
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert all(r["status"] == "ok" for r in rows)
    scaled = [r for r in rows if r.get("input_scale") == 10]
    plain = [r for r in rows if "input_scale" not in r]
    assert scaled and len(scaled) == len(plain) == len(rows) / 2 and "x10" in res.output
    for bad in ("0", "1,-2", "ten"):
        res = invoke("check-grad", "-k", "lightning/jax-chunked", "--input-scale", bad, "--n", "64")
        assert res.exit_code == 2 and "bad --input-scale" in res.output and "1,10" in res.output, res.output
        assert "Traceback" not in res.output


def test_a_suite_takes_a_list_of_input_scales_and_refuses_a_bad_one(tmp_path):
    from lattnbench.spec import SpecError
    from lattnbench.suite import load_suite

    path = tmp_path / "s.toml"
    path.write_text('[axes]\nn = 64\ninput_scale = [1, 10]\n[check-grad]\n')
    cases = load_suite(str(path)).measurements[0].cases
    assert sorted({c.input_scale for c in cases}) == [1.0, 10.0] and len(cases) % 2 == 0
    for bad in ("[1, -1]", '"x"', "[1, true]"):
        path.write_text(f"[axes]\nn = 64\ninput_scale = {bad}\n[check-grad]\n")
        with pytest.raises(SpecError, match="input.scale"):
            load_suite(str(path))


def test_check_jobs_run_kernels_at_once_and_keep_every_row(plugins, tmp_path, monkeypatch):
    where = tmp_path / "meet"
    where.mkdir()
    monkeypatch.setenv("LATTNBENCH_TEST_RENDEZVOUS", str(where))
    out = tmp_path / "par.json"
    res = invoke("check-grad", "--kernel", "rendezvous_kernels:meet_a", "--kernel", "rendezvous_kernels:meet_b",
                 "-k", "plugin/meet-a,plugin/meet-b", "--n", "16,24", "--heads", "2", "--dim", "8",
                 "--initial-state", "off", "--device", "cpu", "--isolate", "kernel", "--jobs", "2", "--out", out)
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert {(r["kernel"], r["seqlen"]) for r in rows} == {(k, n) for k in ("plugin/meet-a", "plugin/meet-b")
                                                           for n in (16, 24)}
    assert all(r["status"] == "ok" for r in rows) and len(rows) == 2 * 2 * 5  # o, S_T, dq, dk, dv


def test_check_jobs_without_workers_is_a_usage_error(tmp_path):
    res = invoke("check-grad", "--device", "cpu", "--isolate", "none", "--jobs", "2", "--out", tmp_path / "x.json")
    assert res.exit_code == 2 and "--jobs" in res.output


def test_batch_rows_that_cannot_fit_are_oom_rows_naming_need_and_free(monkeypatch):
    from lattnbench.harness import memory_fit, verify
    from lattnbench.measure import memory_estimate
    from lattnbench.registry import default_registry
    from lattnbench.spec import Case

    entry = default_registry()["lightning/jax-chunked"]
    case = Case(4, 131072, 32, 32, 128, 128, "bf16", initial_state=True)
    need = memory_fit.estimate_bytes(entry, case.with_(batch=5), "fwdbwd")  # the batch and a row alone
    monkeypatch.setattr(memory_estimate, "free_bytes", lambda device: need - 1)
    rows = verify.check_rows(entry, case, "cpu")
    assert {r["check"] for r in rows} == {"row 0", "row 3"}
    assert {r["status"] for r in rows} == {"oom"}
    assert {r["reason"] for r in rows} == {f"needs ~{memory_estimate.gb(need)} GB, "
                                           f"device has {memory_estimate.gb(need - 1)} GB free"}
    monkeypatch.setattr(memory_estimate, "free_bytes", lambda device: need)
    assert memory_fit.too_big(entry, case.with_(batch=5), "fwdbwd", "cpu") is None  # exactly enough runs
