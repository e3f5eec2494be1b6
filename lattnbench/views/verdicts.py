"""The tables of ``compare`` (runs side by side) and ``gate`` (verdicts per point), fitted to the
terminal like every other table."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from rich.table import Table

from lattnbench.views.rows import fmt, sig3
from lattnbench.views.tables import fit, kernel_header, table as make_table, terminal_width

COMPARE_STYLE = {"faster": "green", "slower": "red", "~": "dim"}
GATE_STYLE = {"REGRESSION": "bold red", "FAIL": "bold red", "LOST": "bold red", "~": "yellow",
              "faster": "green", "new": "cyan", "no ref": "yellow"}


def _styled(word: str, style: str | None) -> str:
    return f"[{style}]{word}[/]" if style else word


def _fitted(groups: dict[Hashable, list], title: Callable[[Hashable], str], columns: Sequence[tuple[str, str]],
            row: Callable[[object, bool], list[str]], width: int | None) -> list[Table]:
    """One table per group: the widest layout that fits (gap 2, gap 1, then kernel names split over
    two lines), else the narrowest."""
    width = terminal_width(width)
    tables = []
    for key, items in groups.items():
        def layout(split: bool, gap: int, key=key, items=items):
            def make() -> Table:
                t = make_table(title(key), gap)
                for col, just in columns:
                    t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
                for x in items:
                    t.add_row(*row(x, split))
                return t
            return make

        layouts = [layout(False, 2), layout(False, 1), layout(True, 1)]
        tables.append(fit(layouts, width) or layouts[-1]())
    return tables


def run_label(i: int) -> str:
    """The column label of run i: A, B, …"""
    return chr(ord("A") + i) if i < 26 else f"F{i + 1}"


def compare_tables(lines, count: int, width: int | None = None) -> list[Table]:
    """One table per mode and shape: kernel, n, each run's ms, and each later run's ratio to the
    first with its verdict."""
    groups: dict[Hashable, list] = {}
    for line in lines:
        groups.setdefault((line.mode, line.shape), []).append(line)
    columns = [("kernel", "left"), ("n", "right")]
    for i in range(count):
        columns.append((run_label(i), "right"))
        if i:
            columns.append((f"{run_label(i)}/A", "left"))

    def row(x, split: bool) -> list[str]:
        cells = []
        for i, t in enumerate(x.times):
            cells.append(sig3(t) if t is not None else (x.statuses[i] if x.statuses[i] != "ok" else "—"))
            if i:
                r, v = x.ratios[i - 1], x.verdicts[i - 1]
                cells.append(_styled(f"{r:.2f}× {v}" if r is not None and v else "—", COMPARE_STYLE.get(v or "")))
        return [kernel_header(x.kernel) if split else x.kernel, str(x.n), *cells]

    return _fitted(groups, lambda key: f"compare · {key[0]} · {key[1]} · ms", columns, row, width)


def kernel_tables(lines, count: int, width: int | None = None) -> list[Table]:
    """Per point profiled in two or more runs (``--breakdown``): each kernel's ms per call in every
    run, and each later run's ratio to the first (— where a run has no such kernel)."""
    from lattnbench.views.breakdown import short_name

    columns = [("kernel of a call", "left")]
    for i in range(count):
        columns.append((run_label(i), "right"))
        if i:
            columns.append((f"{run_label(i)}/A", "right"))

    def row(item, split: bool) -> list[str]:
        name, times = item
        cells = []
        for i, t in enumerate(times):
            cells.append(sig3(t) if t is not None else "—")
            if i:
                cells.append(f"{t / times[0]:.2f}×" if t is not None and times[0] else "—")
        return [short_name(name) if split else name, *cells]

    groups = {(x.kernel, x.mode, x.shape, x.n): list(x.kernels.items()) for x in lines if x.kernels}
    return _fitted(groups, lambda key: f"kernels · {key[0]} · {key[1]} · {key[2]} · n={key[3]} · ms per call",
                   columns, row, width)


def _show(v) -> str:
    if v is None:
        return "—"
    return f"{v:.2e}" if isinstance(v, float) and abs(v) < 1e-2 and v != 0 else (
        fmt(v) if isinstance(v, float) else str(v))


def verdict_tables(points, title: str, width: int | None = None) -> list[Table]:
    """``gate``'s verdicts, one table per case (the shape in its title)."""
    groups: dict[Hashable, list] = {}
    for p in points:
        groups.setdefault(p.case, []).append(p)
    columns = [("kernel", "left"), ("n", "right"), ("mode", "left"), ("metric", "left"), ("baseline", "right"),
               ("current", "right"), ("change", "right"), ("verdict", "left")]

    def row(p, split: bool) -> list[str]:
        return [kernel_header(p.kernel) if split else p.kernel, str(p.n), p.mode,
                p.metric.replace("final_state", "state"), _show(p.baseline), _show(p.current),
                f"{p.change:+.1%}" if p.change is not None else "", _styled(p.verdict, GATE_STYLE.get(p.verdict))]

    return _fitted(groups, lambda case: f"{title} · {case}", columns, row, width)
