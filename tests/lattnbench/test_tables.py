"""Terminal tables: every table fits 80 columns with no cell cut to '…', and still says everything."""
from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.views.tables import check_tables, kernel_table, memory_tables, speed_tables
from lattnbench.results import ResultsWriter
from lattnbench.views.rows import HOST_NOTE, SPREAD_NOTE, THROTTLE_NOTE, sig3

from speed_rows import base, repeated

NS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
#: the longest registry names there are, and a spread of magnitudes from 12 µs to over a second
KERNELS = {"lightning/triton": 0.0123, "lightning/fla-fused-chunk": 0.151, "lightning/jax-recurrent": 1.71,
           "lightning/opennlplab": 17.7, "gla/fla-fused-recurrent": 2.5, "softmax/sdpa-efficient": 272.0,
           "softmax/sdpa-flash": 0.0614, "softmax/jax-cudnn": 1234.5}
TENSORS = ("o", "final_state", "dq", "dk", "dv", "dh0", "dg")
LONG_REASON = ("the Triton interpreter cannot compute bf16 dots (triton#11584); checked on the GPU, "
               "see https://github.com/triton-lang/triton/issues/11584-a-very-long-unbreakable-token")


def render(table, width: int = 80) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
    console.print(table)
    return console.file.getvalue()


def assert_fits(text: str, width: int = 80) -> None:
    assert "…" not in text, text
    too_wide = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not too_wide, too_wide


class RowsWriter(ResultsWriter):
    """The results writer's rows and run merging, without rewriting its file after every add (the
    tables read the rows; a rewrite per add makes building this sweep quadratic in its rows)."""

    def _flush(self) -> None:
        pass


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    """A GPU-sized sweep: 8 kernels × 7 n, repeated runs, host-bound / throttled points, failures."""
    w = RowsWriter(tmp_path_factory.mktemp("r") / "r.json", "t", {}, {})
    for i, (kernel, t) in enumerate(KERNELS.items()):
        for j, n in enumerate(NS):
            b = base(kernel, n)
            if kernel == "softmax/sdpa-efficient" and n == 32768:
                w.add({**b, "status": "oom", "reason": "CUDA out of memory. Tried to allocate 64.00 GiB"})
                continue
            if kernel == "lightning/opennlplab" and n == 512:
                w.add({**b, "status": "unsupported", "reason": LONG_REASON})
                continue
            scale = t * (n / 512)
            if kernel == "lightning/triton":  # three runs, 6 % apart, host-bound (latency >> graph)
                repeated(w, b, [scale, scale * 1.06, scale * 1.03], graphs=[scale * 0.5] * 3,
                         latencies=[scale * 2] * 3, seed=j)
            elif kernel == "softmax/sdpa-flash":  # throttled in one of two runs
                repeated(w, b, [scale, scale * 1.01], graphs=[scale] * 2, latencies=[scale * 1.1] * 2,
                         throttled=[False, True], seed=j, floor_ms=scale / 2)
            else:
                repeated(w, b, [scale], graphs=[scale * 0.98], latencies=[scale * 1.02], seed=i + j,
                         floor_ms=scale / 4)
            w.add({**b, "metric": "peak_mb", "median": 1234567.8 * (i + 1) / (j + 1), "samples": 1,
                   "status": "ok", "reason": None})
    check_case = dict(device="cuda", batch=2, heads=8, kv_heads=2, dim_qk=96, dim_v=48, dtype="bf16",
                      decay="random", varlen=None, initial_state=False, reverse=False)
    for kernel, family in (("lightning/fla-fused-chunk", "lightning"), ("gla/fla-fused-recurrent", "gla"),
                           ("lightning/jax-recurrent", "lightning"), ("softmax/sdpa-efficient", "softmax")):
        for n, flags in ((1000, {}), (100000, {"initial_state": True, "reverse": True}),
                         (98, {"varlen": [60, 1, 37], "batch": 1, "initial_state": True})):
            for k, tensor in enumerate(TENSORS):
                if tensor == "dg" and family != "gla" or tensor in ("final_state", "dh0") and family == "softmax":
                    continue
                if tensor == "dh0" and not flags.get("initial_state"):
                    continue
                err = 3.1e-2 if (kernel, tensor, n) == ("lightning/jax-recurrent", "dk", 1000) else 1.23e-3 * (k + 1)
                row = dict(kernel=kernel, family=family, framework="torch", **{**check_case, **flags}, seqlen=n,
                           mode="fwdbwd", metric="err_ratio", tensor=tensor, median=err, err=err, tol=1.5e-2,
                           status="ok" if err <= 1.5e-2 else "fail", reason=None)
                if (kernel, tensor) == ("softmax/sdpa-efficient", "dv") and n == 98:
                    row.update(status="error", median=None, err=None, reason=LONG_REASON)
                w.add(row)
    return w.rows


def all_tables(rows, width=80):
    return [*speed_tables(rows, width=width), *memory_tables(rows, width=width), *check_tables(rows, width=width)]


def test_every_table_fits_80_columns_with_no_cut_cell(rows):
    items = [{"name": k, "family": k.split("/")[0], "framework": "torch", "devices": ["cuda"], "available": i % 3 != 0,
              "reason": None if i % 3 else f"package {k.split('/')[1]!r} is not installed", "default": i % 3 == 1,
              "origin": "peer" if "fla" in k else "bundled", "reference": False, "interpreted": False,
              "description": LONG_REASON} for i, k in enumerate(KERNELS)]
    for table in [*all_tables(rows), kernel_table(items, "cuda", width=80)]:
        assert_fits(render(table))


def test_speed_tables_keep_every_kernel_and_value_at_80_columns(rows):
    text = "".join(render(t) for t in speed_tables(rows, width=80))
    for kernel in KERNELS:
        family, name = kernel.split("/")
        assert re.search(rf"{family}/\s", text) and name in text, kernel
    for r in rows:
        if r["metric"] == "time_ms" and r["status"] == "ok":
            assert sig3(r["median"]) in text, (r["kernel"], r["seqlen"])
    assert "oom" in text and "unsupported" in text
    assert "device timer" in text
    # three significant digits, whatever the magnitude
    assert sig3(0.0123) == "0.0123" and sig3(1234.5) == "1234" and sig3(17.66) == "17.7"
    assert sig3(9.996) == "10.0" and sig3(0.9996) == "1.00"


def test_marks_and_their_legend(rows):
    text = "".join(render(t) for t in speed_tables(rows, width=80))
    triton = [r for r in rows if r["kernel"] == "lightning/triton" and r["metric"] == "time_ms"]
    assert all(r["host_bound"] for r in triton) and all(r["repeat"] == 3 for r in triton)
    # 6 % between the fastest and the slowest run: ±3 %
    assert re.search(r"†\s*±3%", text)
    assert "‡" in text  # sdpa-flash was throttled in one run
    for note in (HOST_NOTE, THROTTLE_NOTE, SPREAD_NOTE):
        assert " ".join(note.split()[:4]) in " ".join(text.split()), note
    plain = [r for r in rows if r["metric"] == "time_ms" and r["kernel"] == "lightning/jax-recurrent"]
    quiet = "".join(render(t) for t in speed_tables(plain, width=80))
    assert "†" not in quiet and "‡" not in quiet and "±" not in quiet and "host-bound" not in quiet


def test_the_timer_shown_is_the_one_asked_for(rows):
    triton = [r for r in rows if r["kernel"] == "lightning/triton" and r["metric"] == "time_ms"]
    text = "".join(render(t, 200) for t in speed_tables(triton, timer="graph", width=200))
    assert "graph timer" in " ".join(text.split())
    for r in triton:
        assert sig3(r["graph_ms"]) in text and sig3(r["median"]) not in text


def test_wider_terminals_get_more(rows):
    fwd = [r for r in rows if r["metric"] == "time_ms" and r["kernel"] in ("lightning/triton", "softmax/sdpa-flash")]
    r = next(x for x in fwd if x["kernel"] == "softmax/sdpa-flash" and x["seqlen"] == 4096)
    p20_p80 = f"{sig3(r['p20'])}–{sig3(r['p80'])}"
    # two kernels: p20–p80 on a second line and the floor spelled out, even at 80 columns
    two = "".join(render(t, 80) for t in speed_tables(fwd, width=80))
    assert p20_p80 in two and "% of floor" in two
    everything = [x for x in rows if x["metric"] == "time_ms"]
    narrow = "".join(render(t, 80) for t in speed_tables(everything, width=80))
    wide = "".join(render(t, 400) for t in speed_tables(everything, width=400))
    assert "(1/2)" in narrow  # eight kernels need two tables at 80 columns, compact cells
    assert p20_p80 not in narrow and "% of floor" not in narrow and "(50%)" in narrow
    assert "(1/" not in wide and p20_p80 in wide and "50% of floor" in wide


def test_memory_title_claims_no_spread(rows):
    text = "".join(render(t) for t in memory_tables(rows, width=80))
    assert "peak memory" in text and "MB above inputs" in text
    assert "p20" not in text and "median" not in text
    assert "1,234,567.8" in text


def test_check_grad_cells_verdicts_and_tolerance(rows):
    text = "".join(render(t) for t in check_tables(rows, width=80))
    assert text.count("tol 0.015") == 6  # each (family, shape) table: 3 families × 2 shapes
    # the failing tensor is marked where it is, and its line says FAIL
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if "3.1e-2✗" in line)
    assert "FAIL" in lines[i] and "jax-recurrent" in lines[i]
    assert "T1000" in lines[i] or lines[i + 1].split() == ["T1000"]  # the case beside or under the name
    assert "1.2e-3" in text and text.count("PASS") >= 8
    # compact case labels carry the flags
    assert "T100000 h0 rev" in " ".join(text.split()) and "T98 h0 varlen3" in text
    assert "B2 H8/2 D96E48 bf16" in text
    # a non-ok tensor shows its status and its reason in full below the table
    assert "error" in text and "11584-a-very-long-unbreakable-token" in "".join(text.split())


def test_list_is_compact_at_80_columns_and_marks_the_defaults():
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["list", "--device", "cpu"])
    assert res.exit_code == 0
    assert_fits(res.stdout)
    items = json.loads(CliRunner().invoke(app, ["list", "--json", "--device", "cpu"]).stdout)
    lines = res.stdout.splitlines()
    assert len(lines) <= len(items) + 8  # one line per kernel, a title, a header and a legend
    from lattnbench.runner.select import pick_kernels
    from lattnbench.registry import registry_with

    default = {e.name for e in pick_kernels(registry_with([]), None, "cpu")}
    assert default and {i["name"] for i in items if i["default"]} == default
    for it in items:
        line = next(x for x in lines if x.startswith(it["name"] + " "))
        assert ("default" in line.split()) == (it["name"] in default), line
        if not it["available"]:
            assert it["reason"] in line


def test_check_grad_cli_output_fits_80_columns(tmp_path):
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, [
        "check-grad", "-k", "lightning/jax-recurrent,gla/jax-recurrent", "--n", "16", "--dim", "8",
        "--heads", "2", "--batch", "1", "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    assert_fits(res.stdout)
    assert "check-grad · lightning" in res.stdout and "check-grad · gla" in res.stdout
    assert res.stdout.count("PASS") == 4  # two kernels × initial state off and on


def test_rowview_reads_each_timer_from_where_the_row_keeps_it(tmp_path):
    from lattnbench.views.rows import run_medians, run_spread, timer_median, timer_range
    from lattnbench.measure.timing import quantile

    from speed_rows import one_run

    w = ResultsWriter(tmp_path / "r.json", "t", {}, {})
    repeated(w, base("lightning/triton", 1024), [1.0, 1.2], graphs=[0.5, 0.7], latencies=[2.0, 2.2])
    (row,) = w.rows
    assert timer_median(row, "device") == pytest.approx(1.1)  # the median of the two run medians
    assert timer_median(row, "graph") == pytest.approx(0.6) and timer_median(row, "latency") == pytest.approx(2.1)
    pooled = [s for x in row["runs"] for s in x["timers"]["graph"]["samples_ms"]]
    assert timer_range(row, "graph") == pytest.approx((quantile(pooled, 0.2), quantile(pooled, 0.8)))
    assert run_medians(row, "graph") == pytest.approx({0: 0.5, 1: 0.7})
    assert run_spread(row, "device") == pytest.approx(0.2 / 1.1)
    # a row whose own numbers are another timer's still yields the device timer from its runs
    other = {**one_run(base("lightning/triton", 1024), 0, 1.0, graph=0.4), "timer": "graph"}
    other.update(median=0.4, p20=0.39, p80=0.41)
    other.pop("graph_ms")
    assert timer_median(other, "graph") == 0.4 and timer_median(other, "device") == pytest.approx(1.0)
    # rows naming the old method read as the device timer; not-ok rows have no value
    old = {"status": "ok", "metric": "time_ms", "timer": "host-clock, batches of 3", "median": 2.0, "p20": 1.9, "p80": 2.1}
    assert timer_median(old, "device") == 2.0 and timer_median(old, "graph") is None
    assert timer_median({**old, "status": "oom"}, "device") is None


def test_check_table_of_unavailable_and_eager_rows_fits_80_columns():
    """Status words in every cell (a kernel whose package is missing) and eager re-check lines."""
    rows = []
    for kernel, status in (("lightning/jax-triton", "unavailable"), ("lightning/ejkernel", "fail"),
                           ("lightning/jax-recurrent", "ok")):
        for h0 in (False, True):
            for t in ("o", "final_state", "dq", "dk", "dv", *(("dh0",) if h0 else ())):
                row = {"kernel": kernel, "family": "lightning", "device": "cpu", "batch": 1, "seqlen": 98,
                       "heads": 4, "kv_heads": 4, "dim_qk": 32, "dim_v": 32, "dtype": "fp32", "decay": "random",
                       "varlen": [60, 1, 37], "initial_state": h0, "reverse": True, "metric": "err_ratio",
                       "mode": "fwdbwd", "tensor": t, "tol": 1e-5, "status": status,
                       "reason": "package 'jax_triton' is not installed" if status == "unavailable" else None}
                if status != "unavailable":
                    row.update(median=1.4 if (status == "fail" and t == "dk") else 1e-7, deterministic=False)
                    row["status"] = "fail" if (status == "fail" and t == "dk") else "ok"
                rows.append(row)
                if status == "fail" and t not in ("o", "final_state"):
                    rows.append({**row, "exec": "eager"})
    text = "".join(render(t) for t in check_tables(rows, width=80))
    assert_fits(text)
    assert "n/a" in text and "eager" in text and "≠" in text and "not installed" in text


def test_static_tables_fit_80_columns_and_keep_the_gated_metrics():
    import random

    from lattnbench.commands.static import HEADERS, static_tables

    rng = random.Random()
    rows = []
    # the longest kernel name and config label the static jobs make
    for kernel, config in (("gla/triton:bwd-exit", "BT=64 BD=32 BV=64 w4 s1"), ("lightning/triton:bwd-dq", "BT=64 BV=128 TR=3 w8 s4"),
                           ("lightning/gluon:dkdv", "BV=128 NBUF=2 NS=2 NO=1")):
        for metric in ("registers", "spilled_bytes", "shared_bytes", "ptx_instructions", "loop_instructions",
                       "loop_barriers", "mma", "wgmma"):
            rows.append(dict(kernel=kernel, config=config, shape="D=E=128 bf16", mode="compile", metric=metric,
                             value=rng.randrange(1, 300_000)))
    for metric in ("flops", "bytes_accessed", "temp_bytes", "output_bytes"):
        rows.append(dict(kernel="lightning/jax-recurrent", config="default", shape="B1 T1024 H2 D64 fp32",
                         mode="fwdbwd", metric=metric, value=rng.randrange(10**6, 10**9)))
    text = "".join(render(t) for t in static_tables({"rows": rows}, 80))
    assert_fits(text)
    for gated in ("registers", "spilled_bytes", "shared_bytes", "loop_instructions", "wgmma", "flops", "temp_bytes"):
        assert HEADERS[gated] in text
    wide = "".join(render(t) for t in static_tables({"rows": rows}, 100))
    assert f" {HEADERS['loop_barriers']} " in wide and f" {HEADERS['loop_barriers']} " not in text
    assert "gla/triton:bwd-exit" in text and "BT=64 BV=128 TR=3 w8 s4" in text
