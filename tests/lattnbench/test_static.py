"""The static gate: compile metrics of the kernels against a baseline, without a GPU.

Regressions are made as fixtures (tests/lattnbench/static_fixtures.py), never in the product:
a spill from an oversized block, a doubled load inside the chunk loop, and a JAX kernel that
materialises an extra [T, T] tensor. Each must fail the gate naming its metric; the unchanged
tree must pass against the committed baseline.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.static import ptx, results, xla
from lattnbench.static.collect import _xla_rows, collect
from lattnbench.views.static_gate import compare

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "static" / "cpu.json"
runner = CliRunner(env={"COLUMNS": "200"})


def write_doc(path: Path, rows: list[dict]) -> Path:
    results.write(results.document(rows, {"host": "test"}), path)
    return path


def gate(cur: Path, base: Path, *extra: str):
    return runner.invoke(app, ["gate", "--static", str(cur), "--baseline", str(base), *extra])


#: the tests that compile Triton jobs: on one xdist worker, so that the pool of ``compiled`` runs once
COMPILES = pytest.mark.xdist_group("static-triton-compiles")


@pytest.fixture(scope="module")
def compiled() -> dict[str, list[dict]]:
    """Rows of each named Triton job, all from one collect() call: its spawned workers (this test
    process imports the kernels under the interpreter) each import torch, Triton and the kernels
    afresh, so one pool for every job costs far less than a pool per test; the spill and
    doubled-load tests share their base job. A job's rows are told apart by a tag on its shape
    label (a label, not compiled), which they lose again here."""
    from static_fixtures import fixture_job

    from lattnbench.operators.lightning.static_jobs import bwd_job, fwd_job

    from lattnbench.operators.lightning.static_jobs import gluon_jobs

    jobs = {"fwd": fwd_job(64, 32, 0, 4, 3), "bwd": bwd_job(0, 64, 32, 0, 4, 2),
            "chunk_loop": fixture_job("chunk_loop"), "chunk_loop_double": fixture_job("chunk_loop_double"),
            "bn512": fixture_job(bn=512), **{"gluon_dkdv": j for j in gluon_jobs() if j.kernel.endswith("dkdv")}}
    rows = collect([dataclasses.replace(job, shape=f"{job.shape}#{name}") for name, job in jobs.items()], [],
                   workers=2)
    by_job: dict[str, list[dict]] = {name: [] for name in jobs}
    for r in rows:
        shape, name = r["shape"].rsplit("#", 1)
        by_job[name].append({**r, "shape": shape})
    assert all(by_job.values()), {name: len(r) for name, r in by_job.items()}
    return by_job


def triton_rows(compiled, *names) -> list[dict]:
    """A fresh copy of the rows of the named jobs of ``compiled``."""
    return copy.deepcopy([r for name in names for r in compiled[name]])


def xla_rows(job, kernels=xla.KERNELS) -> list[dict]:
    return _xla_rows(job, xla.compile_job(job, kernels), xla.versions())


# ---- PTX parsing -------------------------------------------------------------------------------

PTX = """
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .b32 	%r<9>;
	mov.u32 	%r1, 0;
$L__BB0_1:
	// a comment
	ld.global.b32 	%r2, [%rd1];
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f1};
	bar.sync 	0;
	add.s32 	%r1, %r1, 1;
	setp.lt.s32 	%p1, %r1, 8;
	@%p1 bra 	$L__BB0_1;
	bra.uni 	$L__BB0_3;
$L__BB0_3:
	barrier.sync 	0;
	st.global.b32 	[%rd1], %r1;
	ret;
}
"""


def test_ptx_counts_find_the_loop_between_label_and_back_branch():
    c = ptx.count(PTX)
    assert c.instructions == 11  # directives, comments, braces and labels are not instructions
    assert c.loop_instructions == 6  # ld, mma, bar, add, setp, bra: the label .. back-branch span
    assert c.loop_barriers == 1  # the one inside the loop, not the one after it
    assert c.mma == 1 and c.wgmma == 0
    assert ptx.count(PTX.replace("mma.sync.aligned.m16n8k16.row.col", "wgmma.mma_async.sync.aligned.m64n32k16")).wgmma == 1


def test_ptx_without_a_loop_has_no_loop_instructions():
    assert ptx.count("{\n\tmov.u32 %r1, 0;\n\tret;\n}\n").loop_instructions == 0


# ---- the gate's rules on synthetic rows --------------------------------------------------------

def row(metric, value, kernel="lightning/triton:fwd", compiler=None, config="BT=64 BV=32 TR=0 w4 s3"):
    return {"kernel": kernel, "config": config, "shape": "D=E=128 bf16", "mode": "compile", "metric": metric,
            "value": value, "compiler": compiler or {"triton": "3.9.0"}}


@pytest.mark.parametrize("metric,old,new,fails", [
    ("spilled_bytes", 0, 8, True), ("spilled_bytes", 8, 8, False), ("spilled_bytes", 8, 0, False),
    ("registers", 200, 201, True), ("registers", 200, 199, False),
    ("shared_bytes", 1024, 1025, True),
    ("loop_instructions", 1000, 1020, False), ("loop_instructions", 1000, 1021, True),
    ("loop_barriers", 19, 20, True), ("loop_barriers", 19, 19, False), ("loop_barriers", 19, 12, False),
    ("mma", 28, 27, True), ("mma", 28, 32, False), ("wgmma", 28, 0, True),
    ("flops", 1e6, 1.01e6, False), ("flops", 1e6, 1.011e6, True), ("bytes_accessed", 1e6, 1.02e6, True),
    ("ptx_instructions", 1000, 2000, False),  # reported, not gated
])
def test_rules(metric, old, new, fails):
    res = compare([row(metric, new)], [row(metric, old)])
    assert bool(res.failures) is fails
    if fails:
        assert metric in res.failures[0].line() and "lightning/triton:fwd" in res.failures[0].line()


def test_threshold_applies_to_registers_and_shared_memory():
    assert not compare([row("registers", 204)], [row("registers", 200)], threshold=0.05).failures
    assert compare([row("registers", 211)], [row("registers", 200)], threshold=0.05).failures


def test_other_compiler_rows_are_skipped_not_compared():
    res = compare([row("registers", 255, compiler={"triton": "3.6.0"})], [row("registers", 200)])
    assert not res.failures and res.compared == 0
    assert res.skipped == {"triton 3.9.0 -> triton 3.6.0": 1}


def test_a_row_missing_now_is_lost():
    res = compare([], [row("mma", 28)])
    assert [f.verdict for f in res.failures] == ["LOST"]


def test_cli_failure_lines_name_kernel_config_metric_and_values(tmp_path):
    base = write_doc(tmp_path / "base.json", [row("registers", 200), row("mma", 28)])
    cur = write_doc(tmp_path / "cur.json", [row("registers", 232), row("mma", 28)])
    res = gate(cur, base)
    assert res.exit_code == 1, res.output
    assert "REGRESSION lightning/triton:fwd [BT=64 BV=32 TR=0 w4 s3 D=E=128 bf16] registers: 200 -> 232 (+16.0%" in res.output
    assert f"lattnbench static --out {base}" in res.output
    assert gate(base, base).exit_code == 0


def test_cli_skipped_rows_are_reported_and_nothing_comparable_is_bad_input(tmp_path):
    base = write_doc(tmp_path / "base.json", [row("registers", 200), row("flops", 1.0, kernel="k/jax",
                                                                          compiler={"jax": "1", "jaxlib": "1"})])
    cur = write_doc(tmp_path / "cur.json", [row("registers", 300, compiler={"triton": "3.6.0"}),
                                            row("flops", 1.0, kernel="k/jax", compiler={"jax": "1", "jaxlib": "1"})])
    res = gate(cur, base)
    assert res.exit_code == 0, res.output
    assert "skipped 1 rows: compiler differs (triton 3.9.0 -> triton 3.6.0)" in res.output
    only_other = write_doc(tmp_path / "other.json", [row("registers", 300, compiler={"triton": "3.6.0"})])
    assert gate(only_other, write_doc(tmp_path / "b2.json", [row("registers", 200)])).exit_code == 2


def test_cli_bad_input_exits_2(tmp_path):
    base = write_doc(tmp_path / "base.json", [row("registers", 200)])
    timing = tmp_path / "timing.json"
    timing.write_text(json.dumps({"schema": "lattnbench.results/1", "rows": []}))
    res = gate(timing, base)
    assert res.exit_code == 2 and "not a lattnbench static file" in res.output
    assert gate(tmp_path / "missing.json", base).exit_code == 2



def test_cli_reads_gzip_compressed_files(tmp_path):
    import gzip

    base = write_doc(tmp_path / "base.json", [row("registers", 200), row("mma", 28)])
    cur = write_doc(tmp_path / "cur.json", [row("registers", 232), row("mma", 28)])
    for path in (base, cur):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    assert gate(tmp_path / "base.json.gz", tmp_path / "base.json.gz").exit_code == 0
    res = gate(tmp_path / "cur.json.gz", tmp_path / "base.json.gz")
    assert res.exit_code == 1 and "registers: 200 -> 232" in res.output, res.output

def test_cli_json_output(tmp_path):
    base = write_doc(tmp_path / "base.json", [row("mma", 28)])
    cur = write_doc(tmp_path / "cur.json", [row("mma", 24)])
    res = gate(cur, base, "--json")
    assert res.exit_code == 1
    doc = json.loads(res.output)
    assert doc["passed"] is False and doc["failures"][0]["metric"] == "mma"
    assert (doc["failures"][0]["old"], doc["failures"][0]["new"]) == (28, 24)


# ---- the committed baseline and the unchanged tree ---------------------------------------------

def test_committed_baseline_is_complete():
    from lattnbench.operators.lightning.static_jobs import default_jobs

    doc = results.load(BASELINE)
    assert doc["env"]["versions"]["triton"] and doc["env"]["versions"]["jax"]
    kernels = {r["kernel"] for r in doc["rows"]}
    assert {"lightning/jax-chunked", "lightning/jax-recurrent", "gla/jax-chunked", "gla/jax-recurrent",
            "lightning/triton:fwd", "lightning/triton:bwd-dq", "lightning/triton:bwd-dk",
            "lightning/triton:bwd-dv"} <= kernels
    configs = {(r["kernel"], r["config"]) for r in doc["rows"] if r["kernel"].startswith("lightning/")
               and ":" in r["kernel"]}
    assert configs == {(j.kernel, j.config) for j in default_jobs()}
    for r in doc["rows"]:
        assert r["compiler"], r
    assert all(r["value"] > 0 for r in doc["rows"] if r["metric"] in ("loop_instructions", "registers"))
    from lattnbench.operators.gla import static_jobs as gla_jobs

    gla = {(r["kernel"], r["config"]) for r in doc["rows"]
           if r["kernel"].split(":")[0] in ("gla/triton", "gla/jax-triton")}
    assert gla == {(j.kernel, j.config) for j in gla_jobs.default_jobs()}
    # every kernel multiplies on tensor cores, the GLA parallel launches included, but the end-term
    # launch (one token's row sums)
    mma = [(r["kernel"], r["value"]) for r in doc["rows"] if r["metric"] == "mma"]
    assert mma and all(v > 0 for k, v in mma if k != "lightning/gluon:bwd-end")


def _like_baseline(rows: list[dict]) -> bool:
    base = {(results.row_key(r), results.compiler_key(r)) for r in results.load(BASELINE)["rows"]}
    return all((results.row_key(r), results.compiler_key(r)) in base for r in rows)


@COMPILES
def test_unchanged_tree_passes_against_the_committed_baseline(tmp_path, compiled):
    """A sample of the product's jobs (one forward and one backward config, one JAX kernel in both
    modes), compiled now, equals the committed baseline (the CI step compiles all of them)."""
    rows = triton_rows(compiled, "fwd", "bwd", *(("gluon_dkdv",) if "gluon_dkdv" in compiled else ()))
    rows += xla_rows(xla.XlaJob("lightning/jax-chunked", xla.SHAPES[0], "fwd"))
    rows += xla_rows(xla.XlaJob("lightning/jax-chunked", xla.SHAPES[0], "fwdbwd"))
    if not _like_baseline(rows):
        pytest.skip("the installed compilers differ from the baseline's: like is compared with like only")
    base_rows = [r for r in results.load(BASELINE)["rows"]
                 if results.row_key(r) in {results.row_key(x) for x in rows}]
    res = compare(rows, base_rows)
    assert res.compared == len(rows) and not res.failures, [f.line() for f in res.failures]
    cur = write_doc(tmp_path / "cur.json", rows)
    assert gate(cur, write_doc(tmp_path / "base.json", base_rows)).exit_code == 0


# ---- the three deliberate regressions ----------------------------------------------------------

def _failing_metrics(tmp_path, base_rows, cur_rows) -> tuple[set[str], str]:
    base = write_doc(tmp_path / "base.json", base_rows)
    cur = write_doc(tmp_path / "cur.json", cur_rows)
    res = gate(cur, base)
    assert res.exit_code == 1, res.output
    return {f.metric for f in compare(cur_rows, base_rows).failures}, res.output


@COMPILES
def test_forced_spill_fails_naming_spilled_bytes(tmp_path, compiled):
    base = triton_rows(compiled, "chunk_loop")  # BN = 64
    assert {r["metric"]: r["value"] for r in base}["spilled_bytes"] == 0
    cur = triton_rows(compiled, "bn512")  # a [64, 512] fp32 accumulator on 128 threads
    metrics, output = _failing_metrics(tmp_path, base, cur)
    assert "spilled_bytes" in metrics
    assert "fixture/triton [fixture BM=64] spilled_bytes: 0 ->" in output


@COMPILES
def test_doubled_load_in_the_loop_fails_naming_loop_instructions(tmp_path, compiled):
    base = triton_rows(compiled, "chunk_loop")
    cur = triton_rows(compiled, "chunk_loop_double")
    b = {r["metric"]: r["value"] for r in base}
    c = {r["metric"]: r["value"] for r in cur}
    assert c["mma"] == b["mma"] > 0  # the loop still multiplies; only the loads grew
    metrics, output = _failing_metrics(tmp_path, base, cur)
    assert "loop_instructions" in metrics
    assert f"loop_instructions: {b['loop_instructions']} -> {c['loop_instructions']}" in output


def test_extra_tt_tensor_in_a_jax_kernel_fails_naming_xla_metrics(tmp_path):
    from static_fixtures import lightning_extra_tt

    job = xla.XlaJob("lightning/jax-chunked", xla.SHAPES[0], "fwd")
    base = xla_rows(job)
    cur = xla_rows(job, {"lightning/jax-chunked": lightning_extra_tt})
    metrics, output = _failing_metrics(tmp_path, base, cur)
    assert {"flops", "bytes_accessed"} <= metrics
    assert "lightning/jax-chunked [default B1 T256 H2 D64 fp32 fwd] bytes_accessed:" in output


def test_ci_runs_the_static_gate_against_the_committed_baseline():
    text = (ROOT / ".ci" / "run").read_text()
    assert "lattnbench static --out" in text
    assert "lattnbench gate --static" in text and "--baseline results/static/cpu.json" in text


def test_static_rejects_bad_options():
    assert runner.invoke(app, ["static", "--only", "cuda"]).exit_code == 2
    assert runner.invoke(app, ["static", "--workers", "0"]).exit_code == 2


def test_the_gluon_launches_an_sm90_call_takes_are_static_jobs(monkeypatch):
    """lightning/gluon's four launches of a fwd+bwd and the GLA Gluon prep launch in the form the
    host's switches give (a knob's form is another config, so it never answers for the default's);
    none of the prep where its switch is off. No compile: the jobs only."""
    from lattnbench.kernels.common.gluon_compat import IMPORT_ERROR
    from lattnbench.kernels.gla.gluon import host
    from lattnbench.operators.gla.static_jobs import default_jobs as gla_jobs
    from lattnbench.operators.lightning.static_jobs import default_jobs as lightning_jobs

    if IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {IMPORT_ERROR}")
    names = {j.kernel for j in lightning_jobs()}
    assert {"lightning/gluon:fwd", "lightning/gluon:bwd-dq", "lightning/gluon:dkdv",
            "lightning/gluon:bwd-end"} <= names
    (prep,) = [j for j in gla_jobs() if j.kernel == "gla/triton:prep-gluon"]
    assert prep.kwargs["ks"] == host.PREP_KS and prep.kwargs["op16"] == host.PREP_OP16
    monkeypatch.setattr(host, "PREP_KS", 32)
    monkeypatch.setattr(host, "ROW_LANES", 4)
    (sliced,) = [j for j in gla_jobs() if j.kernel == "gla/triton:prep-gluon"]
    assert "KS=32" in sliced.config and "w4" in sliced.config and sliced.config != prep.config
    monkeypatch.setattr(host, "PREP_ON", False)
    assert not [j for j in gla_jobs() if j.kernel == "gla/triton:prep-gluon"]
