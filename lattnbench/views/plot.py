"""Plots of a results file: time, peak memory and speed-up against sequence length n.

Log-log axes because the question is the slope (linear attention O(n) against softmax O(n²))
and where the curves cross. One colour per kernel, one marker and line style per mode, one
panel per shape group. Speed and speed-up plots show one timer (``device`` unless asked), named
in the axis label and title; host-bound points get a ring and throttled ones a cross, so a
curve's shape is not mistaken for the kernel's. Built on ``matplotlib.figure.Figure`` with the
Agg canvas, never pyplot: no global state, no display needed, safe on CI. Nothing here imports
torch or jax.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lattnbench.results import results_stem
from lattnbench.views.rows import (MODE_ORDER, doc_reference, is_speed, kernel_sort_key, shape_key,
                               shape_label, value)
from lattnbench.views.rows import HOST_NOTE, THROTTLE_NOTE, timer_range

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("speed", "memory", "speedup")
#: lines in one panel before the panel is split by mode
MAX_LINES = 6
SUFFIXES = (".png", ".svg", ".pdf")
MARKERS = {"fwd": "o", "bwd": "s", "fwdbwd": "^"}
STYLES = {"fwd": "-", "bwd": "--", "fwdbwd": ":"}
_YLABEL = {"speed": "time per call (ms, median, {timer} timer)", "memory": "peak memory above inputs (MB)",
           "speedup": "speed-up vs {ref} (×, >1 faster, {timer} timer)"}


#: how host-bound and throttled points are marked (drawn over the point's own marker)
_RING = {"marker": "o", "markersize": 11, "markerfacecolor": "none", "markeredgewidth": 1.2}
_CROSS = {"marker": "x", "markersize": 9, "markeredgewidth": 1.2}


class PlotError(ValueError):
    """Nothing to plot, or a bad option: one line, shown as is."""


def _n_label(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _rows_for(doc: dict, kind: str) -> list[dict]:
    if kind == "memory":
        return [r for r in doc["rows"] if r.get("metric") == "peak_mb"]
    return [r for r in doc["rows"] if is_speed(r)]


def figure(doc: dict, kind: str, reference: str | None = None, timer: str = "device") -> "Figure":
    """One figure of ``kind`` for ``doc``: a panel per shape group, a line per (kernel, mode).

    Data lines carry gid ``"series"`` (the reference line at 1× in speed-up plots ``"reference"``,
    the rings on host-bound points ``"host-bound"``, the crosses on throttled ones ``"throttled"``)
    so tests and callers can tell them from decorations. Speed values are ``timer``'s medians.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    if kind not in KINDS:
        raise PlotError(f"unknown plot kind {kind!r}: choose from {', '.join(KINDS)}, all")
    rows = _rows_for(doc, kind)
    ref = doc_reference(doc, reference) if kind == "speedup" or reference else None
    if kind == "speedup" and ref is None:
        raise PlotError("no softmax kernel was timed: pass --reference KERNEL for a speed-up plot")
    which = None if kind == "memory" else timer
    if not any(value(r, which) is not None for r in rows):
        what = "peak_mb points" if kind == "memory" else f"time_ms points with the {timer} timer"
        raise PlotError(f"no ok {what} to plot")
    families = {r["kernel"]: r.get("family", "") for r in doc["rows"]}
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: kernel_sort_key(k, families))
    # colours from every kernel of the file, so one kernel keeps its colour in every plot kind
    everyone = sorted(families, key=lambda k: kernel_sort_key(k, families))
    colors = {k: f"C{i % 10}" for i, k in enumerate(everyone)}
    # one panel per shape; per shape and mode when a panel would hold more than MAX_LINES lines
    per_shape = {sk: {(r["kernel"], r["mode"]) for r in rows if shape_key(r) == sk
                      and not (kind == "speedup" and r["kernel"] == ref)} for sk in {shape_key(r) for r in rows}}
    groups = sorted(((sk, m) for sk, lines in per_shape.items()
                     for m in ({m for _, m in lines} if len(lines) > MAX_LINES else {None})),
                    key=lambda g: (g[0], MODE_ORDER.index(g[1]) if g[1] in MODE_ORDER else -1, g[1] or ""))
    ncols = min(2, len(groups))
    nrows = -(-len(groups) // ncols)
    fig = Figure(figsize=(9.5 * ncols, 5.2 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    used: set[tuple[str, str]] = set()
    for ax, (skey, only_mode) in zip(axes, groups):
        marked: set[str] = set()
        g = [r for r in rows if shape_key(r) == skey and only_mode in (None, r["mode"])]
        cells = {(r["kernel"], r["mode"], r["seqlen"]): r for r in g}
        ns = sorted({r["seqlen"] for r in g})
        modes = sorted({r["mode"] for r in g}, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else 9, m))
        for k in kernels:
            if kind == "speedup" and k == ref:
                continue
            for m in modes:
                pts = []
                for n in ns:
                    v = value(cells.get((k, m, n)), which)
                    if kind == "speedup":
                        base = value(cells.get((ref, m, n)), which)
                        v = base / v if base is not None and v else None
                    if v is not None:
                        pts.append((n, v, cells[(k, m, n)]))
                if not pts:
                    continue
                used.add((k, m))
                x = [p[0] for p in pts]
                ax.plot(x, [p[1] for p in pts], color=colors[k], marker=MARKERS.get(m, "D"),
                        linestyle=STYLES.get(m, "-."), markersize=5, label=f"{k} {m}", gid="series")
                bands = [timer_range(p[2], timer) for p in pts] if kind == "speed" else []
                if bands and all(b is not None for b in bands):
                    ax.fill_between(x, [b[0] for b in bands], [b[1] for b in bands],
                                    color=colors[k], alpha=0.15, linewidth=0)
                if kind != "memory":
                    for flag, gid, style in (("host_bound", "host-bound", _RING), ("throttled", "throttled", _CROSS)):
                        hit = [p for p in pts if p[2].get(flag) is True]
                        if hit:
                            marked.add(gid)
                            ax.plot([p[0] for p in hit], [p[1] for p in hit], linestyle="none",
                                    color=colors[k], gid=gid, **style)
        # a point that failed (oom, timeout, ...) is named where it would be, not silently dropped
        stack: dict[tuple[str, int], int] = {}
        for (k, m, n), r in sorted(cells.items(), key=lambda kv: (kv[0][2], kernel_sort_key(kv[0][0], families))):
            if r.get("status") != "ok" and (kind != "speedup" or k != ref) and (k, n) not in stack:
                i = stack.setdefault((k, n), sum(1 for key in stack if key[1] == n))
                ax.annotate(f"{r.get('status')}", (n, 0.98 - 0.05 * i), xycoords=("data", "axes fraction"),
                            color=colors[k], ha="center", va="top", fontsize=8, fontweight="bold")
        if kind == "speedup":
            ax.axhline(1.0, color="0.4", linewidth=1, linestyle="-", gid="reference")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ns))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ns, [_n_label(n) for n in ns])
        ax.set_xlabel("sequence length n (tokens)")
        ax.set_ylabel(_YLABEL[kind].format(ref=ref, timer=timer))
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")  # 60 MB, not 6×10¹
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        ax.set_title(shape_label(g[0]) + f" · {g[0].get('device')}" + (f" · {only_mode}" if only_mode else ""),
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        k_handles = [Line2D([], [], color=colors[k], label=k) for k in kernels
                     if any(km[0] == k for km in used)]
        m_handles = [Line2D([], [], color="0.2", marker=MARKERS.get(m, "D"), linestyle=STYLES.get(m, "-."),
                            label=m) for m in modes if any(km[1] == m for km in used)]
        if kind == "speedup":
            m_handles.append(Line2D([], [], color="0.4", label=f"{ref} (1×)"))
        if "host-bound" in marked:
            m_handles.append(Line2D([], [], color="0.2", linestyle="none", label=HOST_NOTE[2:], **_RING))
        if "throttled" in marked:
            m_handles.append(Line2D([], [], color="0.2", linestyle="none", label=THROTTLE_NOTE[2:], **_CROSS))
        # legends beside the axes, never over a line
        first = ax.legend(handles=k_handles, title="kernel", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                          fontsize=8, borderaxespad=0.0)
        ax.add_artist(first)
        # add_artist clips an artist to the axes, and the layout engine leaves clipped artists out: the
        # kernel legend would get no room and run into the next panel or past the figure's edge
        first.set_clip_on(False)
        ax.legend(handles=m_handles, title="mode", loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=8,
                  borderaxespad=0.0)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    what = {"speed": "Time", "memory": "Peak memory", "speedup": "Speed-up"}[kind]
    by = "" if kind == "memory" else f" ({timer} timer)"
    env = doc.get("env") or {}
    machine = env.get("gpu") or f"CPU ({env.get('cpu') or 'unknown'})"
    fig.suptitle(f"{what}{by} vs n — suite {doc.get('suite')}, {machine}")
    return fig


def save(fig: "Figure", path: Path) -> None:
    """Write without timestamps so that re-plotting the same file gives the same bytes."""
    import matplotlib

    meta = {"Date": None} if path.suffix.lower() in (".svg", ".pdf") else {}
    with matplotlib.rc_context({"svg.hashsalt": "lattnbench"}):
        fig.savefig(path, dpi=120, metadata=meta)


def outputs(results: Path, out: Path | None, kind: str) -> list[tuple[str, Path]]:
    """(kind, path) pairs: FILE for one kind, FILE-speed.png etc. for ``all``."""
    out = out or results.with_name(results_stem(results) + ".png")
    if out.suffix.lower() not in SUFFIXES:
        raise PlotError(f"--out {out}: use a {', '.join(SUFFIXES)} file name")
    if kind == "all":
        return [(k, out.with_name(f"{out.stem}-{k}{out.suffix}")) for k in KINDS]
    if kind not in KINDS:
        raise PlotError(f"unknown plot kind {kind!r}: choose from {', '.join(KINDS)}, all")
    return [(kind, out)]


def plot(doc: dict, results: Path, out: Path | None, kind: str,
         reference: str | None = None, timer: str = "device") -> tuple[list[Path], list[str]]:
    """Render and write; for ``all`` a kind without data is skipped with a note, not an error."""
    written, skipped = [], []
    targets = outputs(results, out, kind)
    for k, path in targets:
        try:
            fig = figure(doc, k, reference, timer)
        except PlotError as exc:
            if kind != "all":
                raise
            skipped.append(f"{k}: {exc}")
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            save(fig, path)
        except OSError as exc:  # a read-only or virtual folder (/proc), a full disk
            raise PlotError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    if not written:
        raise PlotError("nothing to plot: " + "; ".join(skipped))
    return written, skipped


__all__: Sequence[str] = ("PlotError", "figure", "plot", "outputs", "KINDS")
