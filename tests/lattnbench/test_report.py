"""``lattnbench report``: README-shaped tables, deterministic bytes, marker-only README edits."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.views.report import ReportError, replace_block
from lattnbench.results import ResultsWriter

runner = CliRunner()
NS = (512, 2048, 8192, 32768)
KERNELS = {"softmax/naive-torch": ("softmax", "torch", 2e-5, 9e-7),
           "lightning/triton": ("lightning", "torch", 2.2e-4, 0.0),
           "softmax/sdpa-flash": ("softmax", "torch", 1e-5, 1.5e-7)}
CASE = dict(device="cuda", batch=4, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16",
            decay="alibi", varlen=None, initial_state=False, reverse=False)


def write_results(path: Path, seed: int = 0) -> Path:
    """A seed-readme-like run: speed (with an oom and an absent point), memory, agreement
    (one failing tensor), and Triton-interpreter timings that must stay out of speed tables."""
    rng = np.random.default_rng(seed)
    w = ResultsWriter(path, "seed-readme", {"gpu": "NVIDIA H200", "driver": "580.95",
                                            "versions": {"torch": "2.11.0", "triton": "3.6.0"},
                                            "commit": "27680e0c0ffee", "time": "2026-11-29T10:00:00Z"},
                      {"copy_gbps": 4230.0, "matmul_tflops": 701.0})
    for kernel, (family, fw, a, b) in KERNELS.items():
        base = dict(kernel=kernel, family=family, framework=fw, **CASE)
        for n in NS:
            if kernel == "softmax/naive-torch" and n == 32768:
                continue  # absent: the sweep skipped it
            for mode, mult in (("fwd", 1.0), ("fwdbwd", 3.2)):
                s = (a * n + b * n * n + 0.03) * mult * np.exp(rng.normal(0, 0.02, 100))
                row = dict(base, seqlen=n, mode=mode, metric="time_ms", median=float(np.median(s)),
                           p20=float(np.percentile(s, 20)), p80=float(np.percentile(s, 80)),
                           samples=100, samples_ms=s.tolist(), status="ok", reason=None,
                           pct_floor=float(rng.uniform(20, 85)))
                mem = dict(base, seqlen=n, mode=mode, metric="peak_mb", samples=1, status="ok", reason=None,
                           median=n * 0.125 * mult * (1 + (family == "softmax") * 0.004) + float(rng.uniform(0, 1)),
                           memory_method="torch.cuda.max_memory_allocated")
                if kernel == "softmax/naive-torch" and n == 8192 and mode == "fwdbwd":
                    for r in (row, mem):
                        r.update(status="oom", median=None, p20=None, p80=None, reason="CUDA out of memory")
                w.add([row, mem])
        if family == "lightning":
            for tensor in ("o", "final_state", "dq", "dk", "dv"):
                e = float(rng.uniform(1e-3, 6e-3)) if tensor != "dk" else 0.031
                w.add(dict(base, seqlen=2048, mode="fwdbwd", metric="err_ratio", tensor=tensor, median=e,
                           err=e, tol=1.5e-2, status="ok" if e <= 1.5e-2 else "fail", reason=None))
            for n in NS[:2]:  # interpreted CPU timings: correctness runs, not speed
                w.add(dict(base, device="cpu", seqlen=n, mode="fwd", metric="time_ms", median=900.0,
                           p20=890.0, p80=910.0, samples=3, status="ok", reason=None, interpreted=True))
    return path


def run(*args: str):
    """``report`` as markdown (the terminal gets fitted tables; these tests read the markdown)."""
    md = [] if "--out" in args or "--readme" in args else ["--format", "md"]
    return runner.invoke(app, ["report", *map(str, args), *md])


def _each_table(markdown: str):
    """(the last #### heading above it, rows of column name -> cell) for every pipe table."""
    heading, lines = None, markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#### "):
            heading = line[5:]
        elif line.startswith("| ") and i + 1 < len(lines) and lines[i + 1][:2] in ("|:", "|-"):
            header = [c.strip() for c in line.strip("|").split("|")]
            body = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                body.append(dict(zip(header, (c.strip() for c in row.strip("|").split("|")))))
            yield heading, body


def tables(markdown: str) -> dict[str, list[dict[str, str]]]:
    """Heading -> rows (column name -> cell) for every pipe table in the markdown."""
    return dict(_each_table(markdown))


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def test_tables_show_values_speedups_and_statuses(tmp_path):
    res_path = write_results(tmp_path / "r.json", seed=7)
    res = run(res_path)
    assert res.exit_code == 0, res.output
    t = tables(res.stdout)
    speed = t["speed · fwdbwd · B4 H32 D128 bf16 decay=alibi · cuda · device timer"]
    assert [r["n"] for r in speed] == [str(n) for n in NS]
    by = {(r["kernel"], r["seqlen"]): r for r in rows_of(res_path)
          if r["metric"] == "time_ms" and r["mode"] == "fwdbwd" and r["device"] == "cuda"}
    for line in speed:
        n = int(line["n"])
        cell = line["lightning/triton"]
        value, pct = cell.split(" ")
        assert float(value) == pytest.approx(by[("lightning/triton", n)]["median"], rel=0.01)
        assert pct == f"({by[('lightning/triton', n)]['pct_floor']:.0f}%)"
        # default reference is sdpa-flash although naive-torch comes first in the file
        want = by[("softmax/sdpa-flash", n)]["median"] / by[("lightning/triton", n)]["median"]
        assert float(line["lightning/triton × device"].rstrip("×")) == pytest.approx(want, rel=0.01)
        assert "softmax/sdpa-flash × device" not in line
    cells = {line["n"]: line["softmax/naive-torch"] for line in speed}
    assert cells["8192"] == "oom" and cells["32768"] == "—"
    assert {line["n"]: line["softmax/naive-torch × device"] for line in speed}["8192"] == "—"
    memory = t["memory · fwd · B4 H32 D128 bf16 decay=alibi · cuda"]
    assert float(memory[-1]["lightning/triton"]) == pytest.approx(32768 * 0.125, rel=0.01)
    # interpreted CPU timings never make a speed table
    assert not any(h.startswith("speed") and h.endswith("cpu") for h in t)
    agree = t["agreement · B4 H32 D128 bf16 decay=alibi · cuda"]
    triton = next(r for r in agree if r["kernel"] == "lightning/triton")
    assert triton["dk"] == "FAIL 3.1e-02" and triton["o"].startswith("PASS ")
    assert "interpreter timings left out" in res.stdout


def test_explicit_and_unknown_reference(tmp_path):
    res_path = write_results(tmp_path / "r.json")
    res = run(res_path, "--reference", "softmax/naive-torch")
    assert res.exit_code == 0
    speed = tables(res.stdout)["speed · fwd · B4 H32 D128 bf16 decay=alibi · cuda · device timer"]
    assert "softmax/sdpa-flash × device" in speed[0] and "softmax/naive-torch × device" not in speed[0]
    bad = run(res_path, "--reference", "softmax/nope")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: unknown reference kernel")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_files_own_reference_is_the_default(tmp_path):
    """A suite names the kernel its ratios are taken against; its results file keeps the name, and
    the report uses it when it was timed (else the softmax default); --reference still wins."""
    import json

    res_path = write_results(tmp_path / "r.json")
    doc = json.loads(res_path.read_text())
    doc["reference"] = "lightning/triton"
    res_path.write_text(json.dumps(doc))
    head = lambda res: tables(res.stdout)["speed · fwd · B4 H32 D128 bf16 decay=alibi · cuda · device timer"][0]  # noqa: E731
    assert "softmax/sdpa-flash × device" in head(run(res_path)) and "lightning/triton × device" not in head(run(res_path))
    assert "lightning/triton × device" in head(run(res_path, "--reference", "softmax/sdpa-flash"))
    doc["reference"] = "lightning/not-timed"
    res_path.write_text(json.dumps(doc))
    assert "lightning/triton × device" in head(run(res_path))


def test_regeneration_is_byte_identical(tmp_path):
    first = write_results(tmp_path / "a" / "seed-readme.json", seed=3)
    run(first, "--out", tmp_path / "one.md")
    run(first, "--out", tmp_path / "two.md")
    one = (tmp_path / "one.md").read_bytes()
    assert one and one == (tmp_path / "two.md").read_bytes()
    # the same points written in another order give the same bytes too
    doc = json.loads(first.read_text())
    random.Random(0).shuffle(doc["rows"])
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "seed-readme.json").write_text(json.dumps(doc))
    assert run(tmp_path / "b" / "seed-readme.json").stdout.encode() == one
    # in fresh processes with different hash seeds (set/dict order must not leak into output)
    script = ("import typer; from lattnbench.commands import report; a = typer.Typer(); "
              "report.register(a); a()")
    for seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", script, str(first), "--format", "md"], capture_output=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == one
    # and a different run does not
    other = write_results(tmp_path / "c" / "seed-readme.json", seed=4)
    assert run(other).stdout.encode() != one


README = ("# lattnbench\r\n\nIntro with trailing spaces   \n\n<!-- lattnbench:seed-readme -->\n"
          "old table\n| stale | 1 |\n<!-- /lattnbench:seed-readme -->\n\n## Other\n"
          "<!-- lattnbench:cpu -->\nkeep me\n<!-- /lattnbench:cpu -->\nend without newline")


def test_readme_block_replaced_and_nothing_else(tmp_path):
    res_path = write_results(tmp_path / "results" / "h200" / "seed-readme.json", seed=1)
    readme = tmp_path / "README.md"
    readme.write_bytes(README.encode())
    res = run(res_path, "--readme", readme, "--out", tmp_path / "tables.md")
    assert res.exit_code == 0, res.output
    new = readme.read_bytes().decode()
    begin, end = "<!-- lattnbench:seed-readme -->", "<!-- /lattnbench:seed-readme -->"
    head, tail = README.split(begin)[0], README.split(end)[1]
    assert new.startswith(head + begin) and new.endswith(end + tail)
    block = new[len(head + begin):-len(end + tail)]
    assert "old table" not in block and "keep me" in new
    assert block == "\n" + (tmp_path / "tables.md").read_text()
    assert "#### speed · fwd" in block
    # regenerating from the same file changes nothing
    run(res_path, "--readme", readme)
    assert readme.read_bytes().decode() == new


def test_readme_named_block_and_plot_links(tmp_path):
    res_path = write_results(tmp_path / "results" / "h200" / "seed-readme.json", seed=1)
    plots = tmp_path / "results" / "h200"
    for name in ("seed-readme-speed.png", "seed-readme-memory.png", "other-speed.png"):
        (plots / name).write_bytes(b"\x89PNG\r\n\x1a\n")
    readme = tmp_path / "README.md"
    readme.write_bytes(README.encode())
    res = run(res_path, "--readme", readme, "--name", "cpu", "--plots", plots)
    assert res.exit_code == 0, res.output
    new = readme.read_text()
    assert "old table" in new and "keep me" not in new  # only the cpu block changed
    assert "![seed-readme-memory](results/h200/seed-readme-memory.png)" in new
    assert "![seed-readme-speed](results/h200/seed-readme-speed.png)" in new
    assert "other-speed" not in new


@pytest.mark.parametrize("text", ["# no markers here\n", "<!-- lattnbench:seed-readme -->\nonly the start\n",
                                  "<!-- /lattnbench:seed-readme -->\n<!-- lattnbench:seed-readme -->\n"])
def test_readme_without_a_proper_block_is_an_error(tmp_path, text):
    res_path = write_results(tmp_path / "seed-readme.json")
    readme = tmp_path / "README.md"
    readme.write_text(text)
    res = run(res_path, "--readme", readme)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "<!-- lattnbench:seed-readme -->" in lines[0]
    assert readme.read_text() == text


def test_bad_results_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "lattnbench.results/1", "rows": [')
    res = run(bad)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.startswith("error: ") and "not valid JSON" in res.stderr


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60).filter(lambda s: "<!--" not in s)


@given(_text, _text, _text, _text)
def test_replace_block_touches_only_the_block(before, old, after, body):
    begin, end = "<!-- lattnbench:x -->", "<!-- /lattnbench:x -->"
    text = before + begin + old + end + after
    new = replace_block(text, "x", body)
    assert new.startswith(before + begin) and new.endswith(end + after)
    assert replace_block(new, "x", body) == new


def test_replace_block_rejects_duplicates():
    with pytest.raises(ReportError, match="more than one"):
        replace_block("<!-- lattnbench:x -->a<!-- /lattnbench:x --><!-- lattnbench:x --><!-- /lattnbench:x -->",
                      "x", "b")


def test_readers_import_neither_torch_nor_jax(tmp_path):
    res_path = write_results(tmp_path / "r.json")
    code = f"""
import sys
from lattnbench.commands import report, plot, gate
from lattnbench.views import report as r
from lattnbench.views import plot as p
from lattnbench.views import gate as g
docs = r.load_docs([{str(res_path)!r}])
r.render(docs); p.figure(docs[0], "speedup"); g.compare(docs[0]["rows"], docs[0]["rows"], 0.1)
r.render(docs, timer="graph"); p.figure(docs[0], "speed", timer="device")
from lattnbench.views import tables
tables.speed_tables(docs[0]["rows"], width=80); tables.check_tables(docs[0]["rows"], width=80)
heavy = sorted(m for m in ("torch", "jax", "triton") if m in sys.modules)
assert not heavy, heavy
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_fmt_keeps_two_to_three_significant_decimals():
    from lattnbench.views.report import fmt

    assert [fmt(v) for v in (0.09441, 0.46, 1.134238, 17.661427, 162.895615, 4096.000488)] == [
        "0.0944", "0.460", "1.13", "17.66", "162.9", "4096"]
    assert fmt(None) == "—" and fmt(math.nan) == "nan"


def test_env_line_names_the_kernel_knobs_a_run_was_made_under():
    from lattnbench.views.report import env_summary

    doc = {"env": {"gpu": "NVIDIA H200", "commit": "abc", "knobs": {"LIGHTNING_TRITON_TMA": "0",
                                                                   "GLA_JAX_GLUON_PREP": "0",
                                                                   "TRITON_CACHE_DIR": "/tmp/x"}},
           "rows": []}
    line = env_summary(doc)
    assert line.endswith("knobs GLA_JAX_GLUON_PREP=0 LIGHTNING_TRITON_TMA=0") and "TRITON_CACHE_DIR" not in line
    doc["env"]["knobs"] = {"TRITON_CACHE_DIR": "/tmp/x"}
    assert "knobs" not in env_summary(doc)


# ---------------------------------------------------------------- timers, marks and runs
def write_timed(path: Path) -> Path:
    """A new-style run: every timer per point, triton repeated 3× and host-bound, flash throttled once."""
    from speed_rows import base, repeated

    w = ResultsWriter(path, "timers", {"gpu": "NVIDIA H200"}, {})
    for n in (1024, 4096):
        f = n / 1024
        repeated(w, base("lightning/triton", n), [0.10 * f, 0.106 * f, 0.103 * f],
                 graphs=[0.05 * f] * 3, latencies=[0.30 * f] * 3, floor_ms=0.02 * f)
        repeated(w, base("softmax/sdpa-flash", n), [0.40 * f, 0.40 * f], graphs=[0.39 * f, 0.39 * f],
                 latencies=[0.45 * f] * 2, throttled=[False, n == 4096])
        repeated(w, base("lightning/jax-chunked", n, framework="jax"), [0.8 * f], latencies=[0.9 * f])
    return path


def test_speed_cells_carry_marks_spread_and_legend(tmp_path):
    res = run(write_timed(tmp_path / "t.json"))
    assert res.exit_code == 0, res.output
    (heading, speed), = [(h, t) for h, t in tables(res.stdout).items() if h.startswith("speed")]
    assert heading.endswith("· device timer")
    by_n = {line["n"]: line for line in speed}
    # median of the run medians, the host-bound mark, half the 6 % run range, % of the floor by that median
    assert by_n["1024"]["lightning/triton"] == "0.103† ±3% (19%)"
    assert by_n["1024"]["softmax/sdpa-flash"] == "0.400 ±0.0%"
    assert by_n["4096"]["softmax/sdpa-flash"] == "1.60‡ ±0.0%"  # throttled in its second run
    assert by_n["1024"]["lightning/jax-chunked"] == "0.800"
    assert by_n["1024"]["lightning/triton × device"] == f"{0.4 / 0.103:.2f}×"
    notes = res.stdout.split("#### speed")[1].split("|")[0]
    assert "† host-bound: device or latency > 1.5× graph" in notes
    assert "‡ throttled" in notes and "±p% = spread across runs" in notes
    assert "median of the run medians" in notes


def test_timer_option_picks_the_numbers_and_labels_the_speedups(tmp_path):
    path = write_timed(tmp_path / "t.json")
    res = run(path, "--timer", "graph")
    assert res.exit_code == 0, res.output
    (heading, speed), = [(h, t) for h, t in tables(res.stdout).items() if h.startswith("speed")]
    assert heading.endswith("· graph timer") and "`graph` timer" in res.stdout
    line = speed[0]
    assert line["lightning/triton"].startswith("0.0500†") and line["softmax/sdpa-flash"].startswith("0.390")
    assert line["lightning/jax-chunked"] == "—"  # no graph timer on that point
    assert line["lightning/triton × graph"] == f"{0.39 / 0.05:.2f}×" and line["lightning/jax-chunked × graph"] == "—"
    lat = tables(run(path, "--timer", "latency").stdout)
    (speed,) = [t for h, t in lat.items() if h.startswith("speed")]
    assert speed[0]["lightning/jax-chunked"].startswith("0.900")


def test_host_timer_shows_the_enqueue_time_and_no_roofline_share(tmp_path):
    res = run(write_timed(tmp_path / "t.json"), "--timer", "host")
    assert res.exit_code == 0, res.output
    (heading, speed), = [(h, t) for h, t in tables(res.stdout).items() if h.startswith("speed")]
    assert heading.endswith("· host timer") and "time to enqueue it" in res.stdout
    line = {row["n"]: row for row in speed}["1024"]
    assert line["lightning/triton"].startswith("0.0100") and "%)" not in line["lightning/triton"]
    assert line["lightning/jax-chunked"].startswith("0.0100") and line["lightning/triton × host"] == "1.00×"


def test_old_files_are_device_only(tmp_path):
    old = write_results(tmp_path / "old.json")  # rows without timers, as before the split
    dev = tables(run(old).stdout)["speed · fwd · B4 H32 D128 bf16 decay=alibi · cuda · device timer"]
    assert dev[0]["lightning/triton"] not in ("—", "")
    graph = tables(run(old, "--timer", "graph").stdout)["speed · fwd · B4 H32 D128 bf16 decay=alibi · cuda · graph timer"]
    assert {v for line in graph for k, v in line.items() if k != "n"} <= {"—", "oom"}
    # a row naming the old method (cuda-events) reads as the device timer
    doc = json.loads(old.read_text())
    for r in doc["rows"]:
        r["timer"] = "cuda-events"
    old.write_text(json.dumps(doc))
    again = tables(run(old).stdout)["speed · fwd · B4 H32 D128 bf16 decay=alibi · cuda · device timer"]
    assert again == dev


def test_bad_timer_is_one_line_exit_2(tmp_path):
    res = run(write_timed(tmp_path / "t.json"), "--timer", "wallclock")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == "error: unknown timer 'wallclock': choose from device, graph, latency, host"


def test_mode_and_metric_keep_only_those_tables(tmp_path):
    res_path = write_results(tmp_path / "seed-readme.json", seed=3)
    full = run(res_path).stdout
    assert "#### memory" in full and "fwdbwd" in full and "#### speed · fwd ·" in full
    only = run(res_path, "--mode", "fwdbwd", "--metric", "speed").stdout
    heads = [line for line in only.splitlines() if line.startswith("#### ")]
    assert heads and all(h.startswith("#### speed · fwdbwd ·") for h in heads)
    assert all(h in full for h in heads)  # the same tables as in the whole report
    for bad in (("--mode", "fwd,back"), ("--metric", "time")):
        res = run(res_path, *bad)
        assert res.exit_code == 2 and bad[0] in res.stderr and len(res.stderr.strip().splitlines()) == 1


def _pipe_tables(markdown: str) -> list[list[dict[str, str]]]:
    """Every pipe table in order, as rows of column name -> cell."""
    return [body for _, body in _each_table(markdown)]


def test_findings_give_a_line_per_kernel_and_per_way_of_failing(tmp_path):
    rng = np.random.default_rng()
    w = ResultsWriter(tmp_path / "m.json", "matrix", {"commit": "abc"})
    tensors = ("o", "final_state", "dq", "dk", "dv")
    over = {}
    for n in (1, 65, 1000):
        for dtype, tol in (("fp32", 1e-5), ("fp16", 2e-3)):
            case = dict(CASE, framework="torch", dtype=dtype, batch=2, heads=4, kv_heads=4, dim_qk=64, dim_v=64, seqlen=n,
                        mode="fwdbwd", metric="err_ratio", tol=tol)
            for t in tensors:
                ok = float(rng.uniform(0.01, 0.5) * tol)
                w.add(dict(case, kernel="lightning/triton", family="lightning", tensor=t, median=ok, err=ok,
                           status="ok", reason=None, deterministic=True))
                e = float(rng.uniform(2, 90) * tol) if dtype == "fp32" else ok
                if dtype == "fp32" and t == "final_state" and n > 1:
                    e = math.inf
                elif dtype == "fp32":
                    over.setdefault("fla", []).append(e)
                w.add(dict(case, kernel="lightning/fla-chunk", family="lightning", tensor=t, median=e, err=e,
                           status="ok" if e <= tol else "fail", reason=None, deterministic=t != "dq"))
                oom = dtype == "fp32" and n == 65 and t.startswith("d")
                w.add(dict(case, kernel="lightning/opennlplab", family="lightning", tensor=t,
                           status="error" if oom else "unsupported", median=None,
                           reason="backward: OutOfResources: out of resource: shared memory, Required: 262144"
                           if oom else "no initial_state support: the official kernel takes none"))
    res = run(tmp_path / "m.json", "--findings")
    assert res.exit_code == 0, res.output
    summary, findings = _pipe_tables(res.stdout)
    by = {r["kernel"]: r for r in summary}
    assert [by["lightning/triton"][c] for c in ("points", "pass", "fail", "refused", "refusals")] == ["6", "6", "0", "0", "—"]
    assert [by["lightning/fla-chunk"][c] for c in ("pass", "fail", "refused")] == ["3", "3", "0"]
    assert by["lightning/fla-chunk"]["bitwise repeatable"] == "no (6 of 30 tensors)"
    assert [by["lightning/opennlplab"][c] for c in ("pass", "fail", "refused")] == ["0", "1", "5"]
    assert by["lightning/opennlplab"]["refusals"] == "no initial_state support"
    lines = [(r["kernel"], r["dtype"], r["finding"], r["tensors"], r["cases"]) for r in findings]
    assert lines == [("lightning/fla-chunk", "fp32", "not finite", "final_state", "2 of 3"),
                     ("lightning/fla-chunk", "fp32", "over tolerance", "o, final_state, dq, dk, dv", "3 of 3"),
                     ("lightning/opennlplab", "fp32", "out of shared memory", "dq, dk, dv", "1 of 1")]
    assert findings[1]["err"] == f"{min(over['fla']):.1e} – {max(over['fla']):.1e}"
    assert findings[0]["e.g."] == "B2 T65 H4 D64 fp32 decay=alibi" and findings[1]["e.g."] == "B2 T1 H4 D64 fp32 decay=alibi"
    assert "lightning/triton" not in {r["kernel"] for r in findings}


def test_gla_tables_name_no_per_head_decay():
    """γ is the Lightning family's decay: a GLA group's label leaves the row's decay field out, a
    Lightning group's keeps it."""
    from lattnbench.views.rows import shape_label

    row = dict(CASE, seqlen=8192, decay="random")
    assert shape_label(dict(row, family="gla")) == "B4 H32 D128 bf16"
    assert shape_label(dict(row, family="lightning"), seqlen=True) == "B4 T8192 H32 D128 bf16 decay=random"


def test_every_view_reads_a_gzip_compressed_file_as_the_plain_one(tmp_path):
    """report (tables, README block, headline), plot, gate and compare of ``X.json.gz`` give what they
    give of ``X.json``: the tables name the document ``X.json`` and make the same bytes."""
    import gzip

    plain = write_results(tmp_path / "plain" / "seed-readme.json", seed=5)
    packed = tmp_path / "packed" / "seed-readme.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for args in ([], ["--metric", "check", "--findings"], ["--headline", "--mode", "fwd"]):
        one, two = run(plain, *args), run(packed, *args)
        assert one.exit_code == two.exit_code == 0, two.output
        assert one.stdout == two.stdout and "seed-readme.json" in two.stdout and ".gz" not in two.stdout
    terminal = [runner.invoke(app, ["report", str(p)], env={"COLUMNS": "100"}) for p in (plain, packed)]
    assert terminal[0].exit_code == terminal[1].exit_code == 0, terminal[1].output
    assert terminal[0].stdout == terminal[1].stdout and "seed-readme.json" in terminal[1].stdout
    readmes = []
    for res_path in (plain, packed):
        readme = res_path.parent / "README.md"
        readme.write_bytes(README.encode())
        res = run(res_path, "--readme", readme)  # the block name defaults to the suite, seed-readme
        assert res.exit_code == 0, res.output
        readmes.append(readme.read_bytes())
    assert readmes[0] == readmes[1] != README.encode()
    res = runner.invoke(app, ["plot", str(packed), "--kind", "speed"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(packed.parent / "seed-readme.png")
    res = runner.invoke(app, ["gate", str(packed), "--baseline", str(plain), "--reference", "softmax/sdpa-flash"])
    assert "no such" not in res.output and "cannot read" not in res.output, res.output
    assert res.exit_code == runner.invoke(app, ["gate", str(plain), "--baseline", str(plain), "--reference",
                                               "softmax/sdpa-flash"]).exit_code
    res = runner.invoke(app, ["compare", str(plain), str(packed)])
    assert res.exit_code == 0, res.output
