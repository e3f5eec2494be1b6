"""``lattnbench gate``: exit codes on synthetic runs with realistic sample noise.

Each run is drawn fresh (own seed, own machine speed factor), so "no change" means only the
kernels' true times are equal, exactly as two CI runs on different machines would be.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.views.gate import GateError, parse_threshold
from lattnbench.results import ResultsWriter

runner = CliRunner()
NS = (1024, 4096, 16384)
#: kernel -> (family, framework, a, b): true time a·n + b·n² ms per fwd (flash is quadratic)
KERNELS = {"lightning/triton": ("lightning", "torch", 2.2e-4, 0.0),
           "lightning/jax-chunked": ("lightning", "jax", 4.1e-4, 0.0),
           "softmax/sdpa-flash": ("softmax", "torch", 1e-5, 1.5e-7)}
CASE = dict(device="cuda", batch=4, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16",
            decay="alibi", varlen=None, initial_state=False, reverse=False)


def write_run(path: Path, seed: int, slow: dict[str, float] | None = None, machine: float = 1.0,
              overrides: dict[tuple, dict] | None = None, drop: set[tuple] = frozenset(),
              with_samples: bool = True, nsamples: int = 140, sigma: float = 0.03) -> Path:
    """A run: every kernel × n × mode timed, peak memory, and err_ratio rows at n=4096.

    ``slow`` multiplies a kernel's true time; ``machine`` all of them (a slower CI box);
    ``overrides[(kernel, n, mode, metric[, tensor])]`` updates a row; ``drop`` leaves rows out.
    Samples are log-normal with a few slow outliers, as GPU timings are.
    """
    rng = np.random.default_rng(seed)
    w = ResultsWriter(path, "ci", {"gpu": "NVIDIA H200", "versions": {"torch": "2.11.0"},
                                   "commit": f"{seed:07x}", "time": "2026-11-29T10:00:00Z"},
                      {"copy_gbps": 4230.0, "matmul_tflops": 701.0})
    overrides = overrides or {}
    rows: list[dict] = []  # added at once: the writer rewrites its whole file after every add
    for kernel, (family, fw, a, b) in KERNELS.items():
        base = dict(kernel=kernel, family=family, framework=fw, **CASE)
        for n in NS:
            for mode, mult in (("fwd", 1.0), ("fwdbwd", 3.1)):
                true = (a * n + b * n * n + 0.02) * mult * machine * (slow or {}).get(kernel, 1.0)
                s = true * np.exp(rng.normal(0, sigma, nsamples))
                s[rng.random(nsamples) < 0.03] *= rng.uniform(1.2, 2.0)  # the odd preempted sample
                row = dict(base, seqlen=n, mode=mode, metric="time_ms", median=float(np.median(s)),
                           p20=float(np.percentile(s, 20)), p80=float(np.percentile(s, 80)),
                           samples=nsamples, status="ok", reason=None)
                if with_samples:
                    row["samples_ms"] = [float(x) for x in s]
                mem = dict(base, seqlen=n, mode=mode, metric="peak_mb", samples=1, status="ok",
                           reason=None, median=n * 0.125 * mult + float(rng.uniform(0, 1)))
                for r, key in ((row, (kernel, n, mode, "time_ms")), (mem, (kernel, n, mode, "peak_mb"))):
                    r.update(overrides.get(key, {}))
                    if key not in drop:
                        rows.append(r)
        if family != "softmax":
            for tensor in ("o", "final_state", "dq", "dk", "dv"):
                e = float(rng.uniform(1e-3, 6e-3))
                r = dict(base, seqlen=4096, mode="fwdbwd", metric="err_ratio", tensor=tensor, median=e,
                         err=e, tol=1.5e-2, status="ok", reason=None)
                key = (kernel, 4096, "fwdbwd", "err_ratio", tensor)
                r.update(overrides.get(key, {}))
                if key not in drop:
                    rows.append(r)
    w.add(rows)
    return path


def gate(cur: Path, base: Path, *args: str):
    return runner.invoke(app, ["gate", str(cur), "--baseline", str(base), *args])


def verdicts(cur: Path, base: Path, *args: str) -> tuple[int, dict]:
    res = gate(cur, base, "--json", *args)
    return res.exit_code, json.loads(res.stdout)


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    return write_run(tmp_path / "base.json", seed=1)


def test_rerun_with_noise_and_a_slower_machine_passes(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=2, machine=1.37)
    res = gate(cur, baseline)
    assert res.exit_code == 0, res.output
    assert "passed" in res.stdout
    code, doc = verdicts(cur, baseline)
    assert code == 0 and doc["ok"] is True
    assert doc["reference"] == "softmax/sdpa-flash"
    timed = [p for p in doc["points"] if p["metric"] == "time"]
    assert len(timed) == 2 * len(NS) * 2  # two non-reference kernels × n × mode
    assert all(abs(p["change"]) < 0.05 for p in timed)  # the machine factor cancelled


def test_thirty_percent_slowdown_of_one_kernel_fails(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=3, slow={"lightning/triton": 1.3}, machine=0.9)
    res = gate(cur, baseline)
    assert res.exit_code == 1, res.output
    assert "REGRESSION" in res.stdout
    code, doc = verdicts(cur, baseline)
    assert code == 1 and doc["ok"] is False
    bad = {(p["kernel"], p["n"], p["mode"]) for p in doc["points"] if p["verdict"] == "REGRESSION"}
    assert bad == {("lightning/triton", n, m) for n in NS for m in ("fwd", "fwdbwd")}
    for p in doc["points"]:
        if p["verdict"] == "REGRESSION":
            assert 0.2 < p["change"] < 0.4 and p["significant"] and p["interval"][0] > 0


def test_threshold_forms_agree_and_a_large_threshold_tolerates_the_slowdown(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=3, slow={"lightning/triton": 1.3})
    assert verdicts(cur, baseline, "--threshold", "10%") == verdicts(cur, baseline, "--threshold", "0.1")
    assert gate(cur, baseline, "--threshold", "50%").exit_code == 0


def test_change_within_noise_is_marked_not_significant(tmp_path):
    # 6 very noisy samples each: a 15% shift is above the threshold but not distinguishable
    kw = dict(nsamples=6, sigma=0.35)
    base = write_run(tmp_path / "base.json", seed=5, **kw)
    cur = write_run(tmp_path / "cur.json", seed=6, slow={"lightning/jax-chunked": 1.15}, **kw)
    code, doc = verdicts(cur, base)
    marks = [p for p in doc["points"] if p["verdict"] == "~"]
    assert marks and all(p["significant"] is False for p in marks)
    assert all(p["verdict"] != "REGRESSION" for p in doc["points"] if not p["significant"])
    assert code == (1 if any(p["verdict"] in ("REGRESSION", "FAIL", "LOST") for p in doc["points"]) else 0)


def test_without_samples_the_p20_p80_ranges_decide(tmp_path):
    base = write_run(tmp_path / "base.json", seed=1, with_samples=False)
    same = write_run(tmp_path / "same.json", seed=2, with_samples=False)
    slow = write_run(tmp_path / "slow.json", seed=3, with_samples=False, slow={"lightning/triton": 1.3})
    assert gate(same, base).exit_code == 0
    code, doc = verdicts(slow, base)
    assert code == 1
    assert {p["kernel"] for p in doc["points"] if p["verdict"] == "REGRESSION"} == {"lightning/triton"}
    assert all(p["interval"] is None for p in doc["points"])


@pytest.mark.parametrize("override", [{"status": "fail"}, {"median": math.nan, "err": math.nan},
                                      {"median": 0.2, "err": 0.2}])
def test_correctness_failure_fails(tmp_path, baseline, override):
    key = ("lightning/triton", 4096, "fwdbwd", "err_ratio", "dk")
    cur = write_run(tmp_path / "cur.json", seed=2, overrides={key: override})
    code, doc = verdicts(cur, baseline)
    assert code == 1
    bad = [(p["kernel"], p["metric"], p["verdict"]) for p in doc["points"] if not p["verdict"] in ("ok", "~")]
    assert bad == [("lightning/triton", "err dk", "FAIL")]
    assert gate(cur, baseline).exit_code == 1


def test_point_that_newly_fails_or_disappears_fails(tmp_path, baseline):
    errored = write_run(tmp_path / "err.json", seed=2, overrides={
        ("lightning/jax-chunked", 16384, "fwdbwd", "time_ms"): {"status": "error", "median": None,
                                                                "reason": "XlaRuntimeError"}})
    code, doc = verdicts(errored, baseline)
    assert code == 1
    lost = [(p["kernel"], p["n"], p["mode"], p["metric"]) for p in doc["points"] if p["verdict"] == "LOST"]
    assert lost == [("lightning/jax-chunked", 16384, "fwdbwd", "time")]

    gone = write_run(tmp_path / "gone.json", seed=2, drop={("lightning/triton", 4096, "fwd", "peak_mb"),
                                                           ("lightning/triton", 4096, "fwdbwd", "err_ratio", "dv")})
    code, doc = verdicts(gone, baseline)
    assert code == 1
    lost = sorted((p["metric"], p["current"]) for p in doc["points"] if p["verdict"] == "LOST")
    assert lost == [("err dv", "missing"), ("memory", "missing")]


def test_new_points_do_not_fail(tmp_path):
    base = write_run(tmp_path / "base.json", seed=1, drop={("lightning/triton", 1024, "fwd", "time_ms")})
    cur = write_run(tmp_path / "cur.json", seed=2)
    code, doc = verdicts(cur, base)
    assert code == 0
    assert [(p["kernel"], p["n"], p["mode"]) for p in doc["points"] if p["verdict"] == "new"] == [
        ("lightning/triton", 1024, "fwd")]


def _one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_corrupt_and_foreign_files_exit_2_with_one_line(tmp_path, baseline):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(baseline.read_text()[:500])  # a truncated copy
    assert "not valid JSON" in _one_line_error(gate(corrupt, baseline))
    foreign = tmp_path / "package.json"
    foreign.write_text(json.dumps({"name": "left-pad", "version": "1.3.0"}))
    assert "not a lattnbench results file" in _one_line_error(gate(baseline, foreign))
    assert "no such results file" in _one_line_error(gate(tmp_path / "absent.json", baseline))


@pytest.mark.parametrize("bad", ["abc", "-5%", "10", "nan%", ""])
def test_bad_threshold_exits_2(baseline, bad):
    assert "threshold" in _one_line_error(gate(baseline, baseline, "--threshold", bad))


def test_unknown_reference_exits_2(baseline):
    assert "softmax/nope" in _one_line_error(gate(baseline, baseline, "--reference", "softmax/nope"))


def test_explicit_reference_changes_the_ratio(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=2)
    code, doc = verdicts(cur, baseline, "--reference", "lightning/jax-chunked")
    assert code == 0 and doc["reference"] == "lightning/jax-chunked"
    assert {p["kernel"] for p in doc["points"] if p["metric"] == "time"} == {
        "lightning/triton", "softmax/sdpa-flash"}


@pytest.mark.parametrize("text,want", [("10%", 0.1), ("0.1", 0.1), ("2.5%", 0.025), ("0", 0.0),
                                       (" 150% ", 1.5)])
def test_parse_threshold(text, want):
    assert parse_threshold(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["abc", "-5%", "-0.1", "10", "inf", "%"])
def test_parse_threshold_rejects(text):
    with pytest.raises(GateError):
        parse_threshold(text)


# ---------------------------------------------------------------- --repeat runs
def write_repeated(path: Path, machine: list[float], slow: dict[str, list[float]] | None = None,
                   seed: int = 0) -> Path:
    """Each point measured in ``len(machine)`` runs; run i runs at ``machine[i]`` speed for every
    kernel (a pass's machine state) and ``slow[kernel][i]`` on top for one kernel."""
    from speed_rows import base, repeated

    w = ResultsWriter(path, "ci", {"gpu": "NVIDIA H200"}, {})
    for kernel, (family, fw, a, b) in KERNELS.items():
        if kernel == "lightning/jax-chunked":
            continue
        for n in (1024, 4096):
            true = a * n + b * n * n + 0.02
            factors = (slow or {}).get(kernel, [1.0] * len(machine))
            devices = [true * m * f for m, f in zip(machine, factors)]
            repeated(w, base(kernel, n, family=family, framework=fw), devices, graphs=devices,
                     latencies=devices, seed=seed + n)
    return path


def timed(doc: dict) -> list[dict]:
    return [p for p in doc["points"] if p["metric"] == "time"]


def test_runs_decide_when_both_files_carry_them(tmp_path):
    base = write_repeated(tmp_path / "base.json", [1.0, 1.25, 0.9])
    cur = write_repeated(tmp_path / "cur.json", [1.1, 0.95, 1.4], slow={"lightning/triton": [1.3] * 3}, seed=7)
    code, doc = verdicts(cur, base)
    assert code == 1
    for p in timed(doc):
        assert p["method"] == "runs" and p["verdict"] == "REGRESSION" and p["significant"]
        assert p["change"] == pytest.approx(0.3, abs=0.02)
        assert 0 < p["interval"][0] <= p["change"] <= p["interval"][1]
    assert "runs" in doc["method"]


def test_runs_are_paired_by_index_so_a_slow_pass_cancels(tmp_path):
    base = write_repeated(tmp_path / "base.json", [1.0, 1.0, 1.0])
    # the third pass ran 1.6x slower for every kernel (a busy neighbour): no kernel changed
    cur = write_repeated(tmp_path / "cur.json", [1.0, 1.0, 1.6], seed=3)
    code, doc = verdicts(cur, base, "--threshold", "2%")
    assert code == 0
    assert all(p["method"] == "runs" and abs(p["change"]) < 0.02 and p["verdict"] == "ok" for p in timed(doc))


def test_overlapping_run_ranges_are_not_significant(tmp_path):
    base = write_repeated(tmp_path / "base.json", [1.0, 1.0, 1.0])
    # two of three runs 40 % slower, one not: above the threshold, but the ranges overlap
    cur = write_repeated(tmp_path / "cur.json", [1.0, 1.0, 1.0], slow={"lightning/triton": [0.99, 1.4, 1.45]}, seed=5)
    code, doc = verdicts(cur, base)
    assert code == 0
    for p in timed(doc):
        assert p["method"] == "runs" and p["verdict"] == "~" and p["significant"] is False
        assert p["change"] == pytest.approx(0.4, abs=0.02)
    # the same samples seen as one run each: the bootstrap over samples calls it a regression
    single = tmp_path / "single.json"
    d = json.loads(cur.read_text())
    for r in d["rows"]:
        r["runs"] = r["runs"][:1]
    single.write_text(json.dumps(d))
    code, doc = verdicts(single, base)
    assert code == 1 and {p["method"] for p in timed(doc)} == {"bootstrap"}


def test_one_run_on_either_side_falls_back_to_the_samples(tmp_path):
    base = write_repeated(tmp_path / "base.json", [1.0])
    cur = write_repeated(tmp_path / "cur.json", [1.0, 1.02, 0.99], seed=9)
    code, doc = verdicts(cur, base)
    assert code == 0 and {p["method"] for p in timed(doc)} == {"bootstrap"}
    code, doc = verdicts(base, cur)
    assert code == 0 and {p["method"] for p in timed(doc)} == {"bootstrap"}
    res = gate(cur, base)
    assert "significance (2 by bootstrap)" in res.stdout


def test_the_verdict_table_fits_80_columns_in_a_ci_log(tmp_path, baseline):
    key = ("lightning/triton", 4096, "fwdbwd", "err_ratio", "final_state")
    cur = write_run(tmp_path / "cur.json", seed=3, slow={"lightning/triton": 1.3}, overrides={key: {"status": "fail"}})
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["gate", str(cur), "--baseline", str(baseline), "--all"])
    assert res.exit_code == 1
    assert "…" not in res.stdout and all(len(x.rstrip()) <= 80 for x in res.stdout.splitlines())
    assert "lightning/triton      16384 fwdbwd time" in res.stdout  # one line per point
    flat = " ".join(res.stdout.split())
    assert "FAIL lightning/triton n=4096 fwdbwd err final_state: err above tol" in flat
    assert flat.count("by bootstrap (interval +") == 6


def _with(path: Path, **doc_fields) -> Path:
    doc = json.loads(path.read_text())
    doc.update(doc_fields)
    path.write_text(json.dumps(doc))
    return path


def test_threshold_and_reference_come_from_the_baseline_file(tmp_path):
    base = _with(write_run(tmp_path / "base.json", seed=1), reference="lightning/jax-chunked", threshold="40%")
    cur = write_run(tmp_path / "cur.json", seed=2, slow={"lightning/triton": 1.3})  # +30 %: inside 40 %
    code, doc = verdicts(cur, base)
    assert code == 0 and doc["reference"] == "lightning/jax-chunked" and doc["threshold"] == pytest.approx(0.4)
    res = gate(cur, base)
    assert "threshold and reference from the baseline file" in res.output
    code, doc = verdicts(cur, base, "--threshold", "10%")  # a flag wins over the file
    assert code == 1 and doc["threshold"] == pytest.approx(0.1)


def test_reference_none_compares_times_as_they_are(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=2, machine=1.37)  # a slower machine: every time grows
    code, doc = verdicts(cur, baseline, "--reference", "none", "--threshold", "10%")
    assert code == 1 and doc["reference"] is None
    timed = [p for p in doc["points"] if p["metric"] == "time"]
    assert {p["kernel"] for p in timed} == set(KERNELS)  # no kernel is left out as the reference
    assert all(p["verdict"] == "REGRESSION" for p in timed)
    assert gate(cur, baseline).exit_code == 0  # by ratio to the same-run reference the machine cancels


def test_files_of_different_suites_compare_their_common_points(tmp_path, baseline):
    cur = _with(write_run(tmp_path / "cur.json", seed=2, drop={(k, n, m, "time_ms") for k in KERNELS
                                                              for n in (1024, 16384) for m in ("fwd", "fwdbwd")}),
                suite="alone")
    res = gate(cur, baseline, "--reference", "none", "--threshold", "10%")
    assert res.exit_code == 0, res.output
    assert "different suites" in res.output and "LOST" not in res.output
    same = write_run(tmp_path / "same.json", seed=2, drop={("lightning/triton", 1024, "fwd", "time_ms")})
    assert gate(same, baseline).exit_code == 1  # one suite: a point gone is LOST


def test_common_compares_only_the_shared_points_of_one_suite(tmp_path, baseline):
    dropped = {(k, n, m, "time_ms") for k in KERNELS for n in (1024, 16384) for m in ("fwd", "fwdbwd")}
    cur = write_run(tmp_path / "cur.json", seed=2, drop=dropped)  # the same suite, fewer points
    assert gate(cur, baseline, "--reference", "none", "--threshold", "10%").exit_code == 1  # LOST
    res = gate(cur, baseline, "--reference", "none", "--threshold", "10%", "--common")
    assert res.exit_code == 0, res.output
    assert "LOST" not in res.output and "only the points both files measured" in res.output
    slow = write_run(tmp_path / "slow.json", seed=2, machine=1.37, drop=dropped)
    assert gate(slow, baseline, "--reference", "none", "--threshold", "10%", "--common").exit_code == 1


def test_the_verdict_comes_first_and_ok_points_are_counted(tmp_path, baseline):
    cur = write_run(tmp_path / "cur.json", seed=3, slow={"lightning/triton": 1.3})
    res = gate(cur, baseline)
    lines = res.stdout.splitlines()
    assert res.exit_code == 1 and lines[0].startswith("FAILED: 6 of")
    assert not any(" ok" == ln.rstrip()[-3:] for ln in lines)  # no table line of an ok point
    assert any(ln.startswith("ok: ") and "--all" in ln for ln in lines)
    res = gate(baseline, baseline)
    assert res.exit_code == 0 and res.stdout.startswith("passed: ")


def test_a_change_past_the_threshold_with_an_interval_reaching_inside_is_not_a_regression(tmp_path):
    from lattnbench.views.gate import significance

    def row(median, spread):
        return {"samples_ms": [median * (1 + spread * (i / 19 - 0.5)) for i in range(20)],
                "p20": median * (1 - spread / 3), "p80": median * (1 + spread / 3)}

    ref = row(1.0, 0.01)
    # +15 % with an interval of about +5 % .. +27 %: significant against 0, not beyond a 10 % threshold
    _, beyond, how = significance(row(1.15, 0.4), ref, row(1.0, 0.01), ref, seed=1, threshold=0.10)
    assert how == "bootstrap" and not beyond
    _, beyond, _ = significance(row(1.15, 0.4), ref, row(1.0, 0.01), ref, seed=1, threshold=0.0)
    assert beyond
