"""``lattnbench plot``: the figure's content (lines, scales, labels) and the files it writes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.views.plot import PlotError, figure
from lattnbench.views.rows import load_docs
from lattnbench.results import ResultsWriter

runner = CliRunner()
NS = (1024, 4096, 16384, 65536)
KERNELS = {"lightning/triton": ("lightning", 2.2e-4, 0.0), "lightning/jax-chunked": ("lightning", 4e-4, 0.0),
           "softmax/sdpa-flash": ("softmax", 1e-5, 1.5e-7)}
MODES = (("fwd", 1.0), ("bwd", 2.1), ("fwdbwd", 3.1))


def write_results(path: Path, memory: bool = True, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    w = ResultsWriter(path, "seed-readme", {"gpu": "NVIDIA H200"}, {})
    case = dict(device="cuda", batch=4, heads=32, kv_heads=8, dim_qk=128, dim_v=64, dtype="bf16")
    for kernel, (family, a, b) in KERNELS.items():
        for n in NS:
            for mode, mult in MODES:
                s = (a * n + b * n * n + 0.02) * mult * np.exp(rng.normal(0, 0.03, 50))
                row = dict(kernel=kernel, family=family, framework="torch", **case, seqlen=n, mode=mode,
                           metric="time_ms", median=float(np.median(s)), p20=float(np.percentile(s, 20)),
                           p80=float(np.percentile(s, 80)), samples=50, samples_ms=s.tolist(),
                           status="ok", reason=None)
                if kernel == "softmax/sdpa-flash" and n == NS[-1] and mode != "fwd":
                    row.update(status="oom", median=None, p20=None, p80=None)
                w.add(row)
                if memory and mode != "bwd":
                    w.add(dict(row, metric="peak_mb", status="ok", samples=1, samples_ms=None,
                               median=n * 0.06 * mult + float(rng.uniform(0, 1))))
    return path


def series(ax) -> list:
    return [line for line in ax.lines if line.get_gid() == "series"]


@pytest.fixture
def doc(tmp_path):
    return load_docs([write_results(tmp_path / "r.json")])[0]


def test_speed_figure_has_a_line_per_kernel_and_mode(doc):
    fig = figure(doc, "speed")
    panels = [a for a in fig.axes if a.get_visible() and series(a)]
    # nine lines would crowd one panel: one panel per mode, each with a line per kernel
    assert len(panels) == len(MODES) and all(len(series(a)) == len(KERNELS) for a in panels)
    assert [a.get_title().rsplit(" · ", 1)[1] for a in panels] == [m for m, _ in MODES]
    ax = panels[0]
    lines = [line for a in panels for line in series(a)]
    assert len(lines) == len(KERNELS) * len(MODES)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "(ms" in ax.get_ylabel() and "n" in ax.get_xlabel()
    assert "NVIDIA H200" in fig.get_suptitle()
    assert "B4 H32/8 D128E64 bf16" in ax.get_title()
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # beside the axes
    flash_bwd = next(line for line in lines if line.get_label() == "softmax/sdpa-flash bwd")
    assert list(flash_bwd.get_xdata()) == list(NS[:-1])  # the oom point is left out, not zero
    triton = next(line for line in lines if line.get_label() == "lightning/triton fwd")
    medians = {r["seqlen"]: r["median"] for r in doc["rows"] if r["kernel"] == "lightning/triton"
               and r["mode"] == "fwd" and r["metric"] == "time_ms"}
    assert np.allclose(triton.get_ydata(), [medians[n] for n in NS])
    legend_texts = {t.get_text() for a in panels for lg in a.findobj(lambda o: o.__class__.__name__ == "Legend")
                    for t in lg.get_texts()}
    assert set(KERNELS) <= legend_texts and {"fwd", "bwd", "fwdbwd"} <= legend_texts


def test_speedup_figure_divides_the_reference_by_each_kernel(doc):
    fig = figure(doc, "speedup")
    ax = fig.axes[0]
    lines = series(ax)
    assert len(lines) == (len(KERNELS) - 1) * len(MODES)
    assert [line.get_gid() for line in ax.lines].count("reference") == 1
    t = {(r["kernel"], r["seqlen"], r["mode"]): r["median"] for r in doc["rows"] if r["metric"] == "time_ms"}
    line = next(line for line in lines if line.get_label() == "lightning/triton fwdbwd")
    assert list(line.get_xdata()) == list(NS[:-1])
    want = [t[("softmax/sdpa-flash", n, "fwdbwd")] / t[("lightning/triton", n, "fwdbwd")] for n in NS[:-1]]
    assert np.allclose(line.get_ydata(), want)
    assert "softmax/sdpa-flash" in ax.get_ylabel()


def test_memory_figure_and_missing_metric(doc, tmp_path):
    ax = figure(doc, "memory").axes[0]
    assert len(series(ax)) == len(KERNELS) * 2  # fwd and fwdbwd measured
    assert "MB" in ax.get_ylabel()
    bare = load_docs([write_results(tmp_path / "nomem.json", memory=False)])[0]
    with pytest.raises(PlotError, match="peak_mb"):
        figure(bare, "memory")


def test_cli_writes_a_valid_png(tmp_path):
    from matplotlib.image import imread

    res_path = write_results(tmp_path / "r.json")
    out = tmp_path / "speed.png"
    res = runner.invoke(app, ["plot", str(res_path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    assert len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    img = imread(out)
    assert img.shape[0] > 300 and img.shape[1] > 500
    assert img[..., :3].std() > 0.05  # not a blank canvas


def test_cli_kind_all_writes_one_file_per_kind(tmp_path):
    res_path = write_results(tmp_path / "r.json", memory=False)
    res = runner.invoke(app, ["plot", str(res_path), "--kind", "all", "--out", str(tmp_path / "p" / "x.svg")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["x-speed.svg", "x-speedup.svg"]
    assert "skipped memory" in res.stderr
    assert (tmp_path / "p" / "x-speed.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("args,needle", [(["--kind", "pie"], "unknown plot kind"),
                                         (["--out", "x.txt"], ".png"),
                                         (["--reference", "softmax/nope"], "unknown reference kernel"),
                                         (["--timer", "wall"], "unknown timer 'wall'"),
                                         (["--timer", "graph"], "no ok time_ms points with the graph timer")])
def test_cli_bad_options_exit_2(tmp_path, args, needle):
    res_path = write_results(tmp_path / "r.json")
    res = runner.invoke(app, ["plot", str(res_path), *args])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and needle in res.stderr
    assert not list(tmp_path.glob("*.png"))


def timed_doc(tmp_path) -> dict:
    """Every timer per point; triton host-bound at the two longest n, flash throttled at 4096."""
    from speed_rows import base, repeated

    w = ResultsWriter(tmp_path / "t.json", "timers", {"gpu": "NVIDIA H200"}, {})
    for n in NS:
        f = n / 1024
        slow_host = n >= 16384
        repeated(w, base("lightning/triton", n), [0.1 * f, 0.11 * f], graphs=[(0.05 if slow_host else 0.1) * f] * 2,
                 latencies=[0.12 * f] * 2)
        repeated(w, base("softmax/sdpa-flash", n), [0.3 * f * f], graphs=[0.29 * f * f],
                 latencies=[0.31 * f * f], throttled=[n == 4096])
    return load_docs([w.path])[0]


def test_timer_picks_the_plotted_numbers_and_the_band(tmp_path):
    doc = timed_doc(tmp_path)
    fig = figure(doc, "speed", timer="graph")
    ax = fig.axes[0]
    triton = next(line for line in series(ax) if line.get_label() == "lightning/triton fwd")
    graph = {r["seqlen"]: r["graph_ms"] for r in doc["rows"] if r["kernel"] == "lightning/triton"}
    assert np.allclose(triton.get_ydata(), [graph[n] for n in NS])
    assert "graph timer" in ax.get_ylabel() and "graph timer" in fig.get_suptitle()
    # the p20–p80 band is the graph timer's, not the device timer's
    band = next(c for c in ax.collections if np.allclose(c.get_paths()[0].vertices[:, 0].min(), NS[0]))
    top = band.get_paths()[0].vertices[:, 1].max()
    assert top < 1.1 * max(graph.values()) < max(r["median"] for r in doc["rows"] if r["kernel"] == "lightning/triton")
    up = figure(doc, "speedup", timer="latency").axes[0]
    line = next(x for x in series(up) if x.get_label() == "lightning/triton fwd")
    lat = {(r["kernel"], r["seqlen"]): r["latency_ms"] for r in doc["rows"]}
    assert np.allclose(line.get_ydata(), [lat[("softmax/sdpa-flash", n)] / lat[("lightning/triton", n)] for n in NS])


def test_host_bound_and_throttled_points_are_marked(tmp_path):
    doc = timed_doc(tmp_path)
    ax = figure(doc, "speed").axes[0]
    rings = [line for line in ax.lines if line.get_gid() == "host-bound"]
    crosses = [line for line in ax.lines if line.get_gid() == "throttled"]
    assert [list(r.get_xdata()) for r in rings] == [[16384, 65536]]
    assert [list(c.get_xdata()) for c in crosses] == [[4096]]
    legend_texts = {t.get_text() for lg in ax.findobj(lambda o: o.__class__.__name__ == "Legend")
                    for t in lg.get_texts()}
    assert any(t.startswith("host-bound") for t in legend_texts) and any(t.startswith("throttled") for t in legend_texts)
    plain = figure(load_docs([write_results(tmp_path / "plain.json")])[0], "speed").axes[0]
    assert not [line for line in plain.lines if line.get_gid() in ("host-bound", "throttled")]


def test_every_legend_gets_room_in_the_layout(tmp_path):
    """Several panels side by side, two legends beside each: every legend lies inside the figure
    and clear of every other panel (a legend the layout engine left out runs into the next panel
    or past the figure's edge)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.legend import Legend

    path = write_results(tmp_path / "r.json", memory=False)
    doc = load_docs([path])[0]
    doc["rows"] += [dict(r, dim_qk=64, dim_v=64) for r in doc["rows"]]  # a second shape: more panels
    fig = figure(doc, "speed")
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) >= 2
    for ax in panels:
        legends = [a for a in ax.get_children() if isinstance(a, Legend)]
        assert len(legends) == 2
        for lg in legends:
            box = lg.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 + 0.5
            for other in panels:
                if other is not ax:
                    assert not box.overlaps(other.get_window_extent(renderer)), lg.get_title().get_text()
