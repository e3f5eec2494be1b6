"""Rich tables of a run's rows that fit the terminal: 80 columns at the least, CI logs included.

Speed and memory: one table per (metric, mode, shape), n down, kernels across. check-grad: one
table per shape, a line per (kernel, case). ``list``: a line per kernel. Each table is built in
its most detailed layout first, then in narrower ones, and the first that fits the width is
printed; when none does, the kernel columns are split over several tables. Nothing is ever cut
to ``…``. Speed tables name their timer and mark host-bound (†), throttled (‡) and repeated
(±) points, with a legend line for each mark they show.
"""
from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from lattnbench.operators import is_decayed
from lattnbench.views.rows import gates_label, legend, marks, pct_floor, sig3, spread_text, timer_median, timer_range

STATUS_STYLE = {"fail": "bold red", "error": "red", "oom": "yellow", "timeout": "red",
                "unsupported": "dim", "unavailable": "dim"}
#: short headers for long tensor names (check-grad)
TENSOR_HEADER = {"final_state": "state"}
TENSOR_ORDER = ("o", "final_state", "dq", "dk", "dv", "dh0", "dg", "dbeta")
FAIL_MARK = "✗"
#: a tensor whose second call on the same inputs was not bitwise equal
NONDET_MARK = "≠"


# ---- fitting -----------------------------------------------------------------------------------

def terminal_width(width: int | None = None) -> int:
    """``width``, else the terminal's (COLUMNS, the terminal, or 80 when not a terminal)."""
    if width is not None:
        return width
    return Console().width


def natural_width(table: Table) -> int:
    """The columns ``table`` takes when nothing in it is wrapped or cut."""
    console = Console(width=10_000, file=io.StringIO())
    return Measurement.get(console, console.options, table).maximum


def fit(layouts: Sequence[Callable[[], Table]], width: int) -> Table | None:
    """The first layout whose table fits ``width`` columns, else None."""
    for make in layouts:
        tb = make()
        if natural_width(tb) <= width:
            return tb
    return None


def table(title: str, gap: int, caption: str | None = None) -> Table:
    """Rules under the header only, no side borders: ``gap`` spaces between columns (1 or 2)."""
    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1) if gap > 1 else (0, 0), collapse_padding=True, title_justify="left",
                 caption_justify="left", title_style="bold", caption_style="dim")


#: status words as table cells (the note under each table spells out status and reason)
STATUS_CELL = {"unavailable": "n/a", "unsupported": "unsup", "timeout": "t/o"}


def _status(row: dict, short: bool = True) -> str:
    status = str(row["status"])
    style = STATUS_STYLE.get(status, "")
    word = STATUS_CELL.get(status, status) if short else status
    return f"[{style}]{word}[/]" if style else word


def _reasons(rows: list[dict], skip: Sequence[str] = ("ok",)) -> Table | None:
    """kernel, status, reason for every non-ok point with a reason; the reason wraps, never cut."""
    reasons = sorted({(r["kernel"], r["status"], str(r["reason"])) for r in rows
                      if r["status"] not in skip and r.get("reason")})
    if not reasons:
        return None
    note = Table.grid(padding=(0, 1))
    note.add_column(style="dim", no_wrap=True)
    note.add_column(no_wrap=True)
    note.add_column(overflow="fold")
    for k, s, why in reasons:
        note.add_row(k, _status({"status": s}, short=False), why)
    return note


def _shape(row: dict, flags: bool = True) -> str:
    kv = f"/{row['kv_heads']}" if row["kv_heads"] != row["heads"] else ""
    dims = f"D{row['dim_qk']}" if row["dim_qk"] == row["dim_v"] else f"D{row['dim_qk']}E{row['dim_v']}"
    extra = " h0" if flags and row.get("initial_state") else ""
    return f"B{row['batch']} H{row['heads']}{kv} {dims} {row['dtype']}{extra}{_inputs(row)}"


def _inputs(row: dict) -> str:
    """How the inputs were drawn, where it is not the default: `` decay=strong``, `` gate/1 g:bf16``."""
    decay = row.get("decay") if is_decayed(row.get("family")) and row.get("decay") != "alibi" else None
    return (f" decay={decay}" if decay else "") + gates_label(row)


def _column(row: dict) -> str:
    """A table column: the kernel, and the world size it ran at when above 1."""
    world = row.get("world_size") or 1
    return row["kernel"] if world == 1 else f"{row['kernel']} P{world}"


def kernel_header(name: str) -> str:
    return name.replace("/", "/\n", 1)


# ---- speed and memory --------------------------------------------------------------------------

def _speed_cell(row: dict, timer: str, detail: bool, mark: Callable[[dict], str] | None = None) -> str:
    """Median (3 significant digits) with its marks and run spread; p20–p80 when ``detail``."""
    if row["status"] != "ok":
        return _status(row)
    v = timer_median(row, timer)
    if v is None:
        return "—"
    first = f"{sig3(v)}{marks(row)}{mark(row) if mark else ''}"
    spread = spread_text(row, timer)
    lines = [f"{first} {spread}" if spread else first]
    rng = timer_range(row, timer)
    if detail and rng is not None:
        lines.append(f"[dim]{sig3(rng[0])}–{sig3(rng[1])}[/]")
    pct = pct_floor(row, v, timer)
    if pct is not None:
        lines.append(f"[cyan]{pct:.0f}% of floor[/]" if detail else f"[cyan]({pct:.0f}%)[/]")
    if row.get("interpreted"):
        lines.append("[dim]interpreted[/]")
    return "\n".join(lines)


def _memory_cell(row: dict, timer: str, detail: bool) -> str:
    if row["status"] != "ok":
        return _status(row)
    med = row.get("median")
    return f"{med:,.1f}" if isinstance(med, (int, float)) else "—"


def _value_table(title: str, caption: str | None, kernels: list[str], by_n: dict[int, dict[str, dict]],
                 cell: Callable[[dict], str], gap: int) -> Table:
    tb = table(title, gap, caption)
    tb.add_column("n", justify="right", style="bold", no_wrap=True)
    for k in kernels:
        tb.add_column(kernel_header(k), justify="right", no_wrap=True)
    for n in sorted(by_n):
        tb.add_row(str(n), *[cell(by_n[n][k]) if k in by_n[n] else "—" for k in kernels])
    return tb


def value_tables(rows: list[dict], metric: str, unit: str, title: str, timer: str = "device",
                 width: int | None = None, group: Callable[[dict], str] = _shape,
                 mark: Callable[[dict], str] | None = None, mark_note: str | None = None) -> list[Table]:
    """Speed (``time_ms``) or memory (``peak_mb``) tables that fit ``width`` columns, one per mode
    and ``group`` (the shape label; a report of several decays or devices passes a finer one).
    ``mark`` adds a per-cell mark after the built-in ones, explained by ``mark_note`` under the
    tables that show it."""
    width = terminal_width(width)
    speed = metric == "time_ms"
    cell_of = _speed_cell if speed else _memory_cell
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["metric"] == metric:
            groups[(r["mode"], group(r))].append(r)
    tables: list[Table] = []
    for (mode, shape), rs in groups.items():
        kernels = list(dict.fromkeys(_column(r) for r in rs))
        by_n: dict[int, dict[str, dict]] = defaultdict(dict)
        for r in rs:
            by_n[r["seqlen"]][_column(r)] = r
        what = f"{timer} timer, {unit}, median" if speed else unit
        head = f"{title} · {mode} · {shape} · {what}"
        notes = legend(rs, timer) if speed else []
        if mark is not None and mark_note and any(mark(r) for r in rs if r.get("status") == "ok"):
            notes.append(mark_note)

        ranges = speed and any(timer_range(r, timer) is not None for r in rs)
        floors = speed and any(pct_floor(r, v, timer) is not None for r in rs
                               if (v := timer_median(r, timer)) is not None)

        def layout(detail: bool, gap: int, ks: list[str] = kernels, suffix: str = "") -> Callable[[], Table]:
            extra = ["second line: p20–p80"] if detail and ranges else []
            if floors and not detail:
                extra.append("(p%) = % of the roofline floor")
            caption = "\n".join([*extra, *notes]) or None
            return lambda: _value_table(head + suffix, caption, ks, by_n,
                                        lambda r: (cell_of(r, timer, detail, mark) if speed
                                                   else cell_of(r, timer, detail)), gap)

        tb = fit([layout(True, 2), layout(False, 2), layout(False, 1)], width)
        if tb is not None:
            tables.append(tb)
        else:
            tables.extend(_split(kernels, lambda ks, part: layout(False, 1, ks, part)(), width))
        note = _reasons(rs)
        if note is not None:
            tables.append(note)
    return tables


def _split(kernels: list[str], make: Callable[[list[str], str], Table], width: int) -> list[Table]:
    """The kernel columns over as few tables as fit ``width``, balanced in size when they fit so."""
    chunks: list[list[str]] = []
    for k in kernels:
        if chunks and natural_width(make([*chunks[-1], k], "")) <= width:
            chunks[-1].append(k)
        else:
            chunks.append([k])
    size = -(-len(kernels) // len(chunks))
    even = [kernels[i:i + size] for i in range(0, len(kernels), size)]
    if len(even) == len(chunks) and all(natural_width(make(ks, "")) <= width for ks in even):
        chunks = even
    return [make(ks, f" ({i}/{len(chunks)})") for i, ks in enumerate(chunks, 1)]


def speedup_tables(rows: list[dict], reference: str, timer: str = "device", width: int | None = None,
                   group: Callable[[dict], str] = _shape) -> list[Table]:
    """``reference``'s time over each kernel's, per mode and shape: above 1 is faster than it."""
    width = terminal_width(width)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["metric"] == "time_ms":
            groups[(r["mode"], group(r))].append(r)
    tables: list[Table] = []
    for (mode, shape), rs in groups.items():
        by_n: dict[int, dict[str, dict]] = defaultdict(dict)
        for r in rs:
            by_n[r["seqlen"]][_column(r)] = r
        kernels = [k for k in dict.fromkeys(_column(r) for r in rs) if k != reference]
        if not kernels or not any(reference in cells for cells in by_n.values()):
            continue

        def cell(row: dict, by_n=by_n) -> str:
            v, ref = timer_median(row, timer), timer_median(by_n[row["seqlen"]].get(reference), timer)
            if row["status"] != "ok":
                return _status(row)
            return f"{ref / v:.2f}×" if v and ref is not None else "—"

        head = f"speed-up vs {reference} · {mode} · {shape} · {timer} timer"

        def layout(gap: int, ks: list[str] = kernels, suffix: str = "", head=head, cell=cell, by_n=by_n):
            return lambda: _value_table(head + suffix, f"{reference} time / kernel time: above 1 is faster",
                                        ks, by_n, cell, gap)

        tb = fit([layout(2), layout(1)], width)
        tables.extend([tb] if tb is not None else
                      _split(kernels, lambda ks, part: layout(1, ks, part)(), width))
    return tables


def speed_tables(rows: list[dict], timer: str = "device", width: int | None = None,
                 group: Callable[[dict], str] = _shape, mark: Callable[[dict], str] | None = None,
                 mark_note: str | None = None) -> list[Table]:
    """Speed tables of ``timer`` (the device timer unless asked otherwise)."""
    return value_tables(rows, "time_ms", "ms", "speed", timer, width, group, mark, mark_note)


def memory_tables(rows: list[dict], width: int | None = None, group: Callable[[dict], str] = _shape) -> list[Table]:
    """Peak memory tables: one measurement per point, in MB above the live inputs."""
    return value_tables(rows, "peak_mb", "MB above inputs", "peak memory", width=width, group=group)


# ---- check-grad --------------------------------------------------------------------------------

def _err(v: float) -> str:
    """1.2e-07 -> 1.2e-7: two digits and the exponent, nothing else."""
    if v != v or v in (float("inf"), float("-inf")):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    mant, exp = f"{v:.1e}".split("e")
    return f"{mant}e{int(exp)}"


def _case_label(row: dict) -> str:
    flags = [" h0" if row.get("initial_state") else "", " rev" if row.get("reverse") else "",
             f" varlen{len(row['varlen'])}" if isinstance(row.get("varlen"), list) else
             (" varlen" if row.get("varlen") else "")]
    run = " eager" if row.get("exec") == "eager" else ""
    check = f" {row['check']}" if row.get("check") else ""
    scale = f" x{row['input_scale']:g}" if row.get("input_scale") not in (None, 1) else ""
    if (row.get("world_size") or 1) > 1:
        scale += f" P{row['world_size']}"
    return f"T{row['seqlen']}" + "".join(flags) + scale + run + check


def _check_cell(row: dict | None) -> str:
    if row is None:
        return "—"
    v = row.get("median", row.get("err"))
    if row["status"] in ("ok", "fail") and isinstance(v, float):
        nondet = NONDET_MARK if row.get("deterministic") is False else ""
        if row["status"] == "ok":
            return f"[green]{_err(v)}[/]{nondet}"
        return f"[bold red]{_err(v) if v == v else 'nan'}{FAIL_MARK}[/]{nondet}"
    return _status(row)


def check_tables(rows: list[dict], width: int | None = None) -> list[Table]:
    """Per family and shape: a line per (kernel, case), each tensor's err (✗ above tol), PASS / FAIL.

    A family's kernels share its tensors (only GLA has dg), so a table per family has no empty
    columns, and its kernel column can drop the family prefix when the full names do not fit.
    """
    width = terminal_width(width)
    rows = [r for r in rows if r["metric"] == "err_ratio"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["family"], f"{_shape(r, flags=False)} · {r['device']}")].append(r)
    tables: list[Table] = []
    for (family, shape), rs in groups.items():
        tables.append(_check_table(family, shape, rs, width))
        note = _reasons(rs, skip=("ok", "fail"))
        if note is not None:
            tables.append(note)
    worst = worst_table(rows)
    if worst is not None:
        tables.append(worst)
    return tables


def worst_table(rows: list[dict]) -> Table | None:
    """Per kernel, dtype and tensor checked at several input distributions: the worst one."""
    from lattnbench.views.dependence import worst_distributions

    worst = worst_distributions(rows)
    if not worst:
        return None
    tb = table("check-grad · worst input distribution per tensor", 1,
                   "the distribution with the largest err of each kernel, dtype and tensor")
    for name, justify in (("kernel", "left"), ("dtype", "left"), ("tensor", "left"), ("worst at", "left"),
                          ("n", "right"), ("err", "right"), ("tol", "right")):
        tb.add_column(name, justify=justify, overflow="fold")
    for w in worst:
        err = "inf" if w["err"] == float("inf") else _err(w["err"])
        shown = f"[green]{err}[/]" if w["passed"] else f"[bold red]{err}{FAIL_MARK}[/]"
        tol = f"{w['tol']:.2g}" if isinstance(w["tol"], (int, float)) else "—"
        tb.add_row(w["kernel"], str(w["dtype"]), w["tensor"], w["distribution"], str(w["n"]), shown, tol)
    return tb


def _check_table(family: str, shape: str, rs: list[dict], width: int) -> Table:
    present = {r["tensor"] for r in rs}
    tensors = [t for t in TENSOR_ORDER if t in present] + sorted(present - set(TENSOR_ORDER))
    lines: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    for r in rs:
        lines[(r["kernel"], _case_label(r))][r["tensor"]] = r
    tols = sorted({float(r["tol"]) for r in rs if isinstance(r.get("tol"), (int, float))})
    one_tol = len(tols) <= 1
    title = f"check-grad · {family} · {shape}" + (f" · tol {tols[0]:.2g}" if tols and one_tol else "")
    caption = "err = RMS(x − ref)/RMS(ref) against fp64" + (
        f"; {FAIL_MARK} above tol" if any(r["status"] == "fail" for r in rs) else "") + (
        f"; {NONDET_MARK} not bitwise reproducible" if any(r.get("deterministic") is False for r in rs) else "") + (
        "; eager: re-checked without jit" if any(r.get("exec") == "eager" for r in rs) else "") + (
        "; row B: that batch row against itself alone" if any(r.get("check") for r in rs) else "")
    prefix = f"{family}/"

    def name(kernel: str, how: str) -> str:
        if how == "short" and kernel.startswith(prefix):
            return kernel[len(prefix):]
        return kernel_header(kernel) if how == "split" else kernel

    def layout(how: str, gap: int, tight: bool = False) -> Callable[[], Table]:
        """``tight``: the case label goes under the kernel's name, the verdict loses its header."""
        def make() -> Table:
            tb = table(title, gap, caption)
            head = prefix if how == "short" else "kernel"
            tb.add_column(f"{head}\ncase" if tight else head, no_wrap=True)
            if not tight:
                tb.add_column("case", no_wrap=True)
            for t in tensors:
                tb.add_column(TENSOR_HEADER.get(t, t), justify="right", no_wrap=True)
            if not one_tol:
                tb.add_column("tol", justify="right", no_wrap=True)
            tb.add_column("" if tight else "verdict", no_wrap=True)
            for (kernel, label), cells in lines.items():
                statuses = {r["status"] for r in cells.values()}
                bad = statuses & {"fail", "error", "oom", "timeout"}
                verdict = "[bold red]FAIL[/]" if bad else ("[green]PASS[/]" if "ok" in statuses else "[dim]skip[/]")
                row_tols = sorted({float(r["tol"]) for r in cells.values() if isinstance(r.get("tol"), (int, float))})
                tol = [", ".join(f"{t:.2g}" for t in row_tols) or "—"] if not one_tol else []
                who = [f"{name(kernel, how)}\n[dim]{label}[/]"] if tight else [name(kernel, how), label]
                tb.add_row(*who, *[_check_cell(cells.get(t)) for t in tensors], *tol, verdict)
            return tb
        return make

    layouts = [layout("full", 2), layout("full", 1), layout("short", 2), layout("short", 1)]
    return fit(layouts, width) or layout("short", 1, tight=True)()


# ---- list --------------------------------------------------------------------------------------

def kernel_status(item: dict) -> str:
    """What ``list`` says of a kernel: default, why it is not, or why it cannot run."""
    if not item["available"]:
        return f"[dim]no: {item['reason']}[/]"
    if item.get("default"):
        return "[green]default[/]"
    why = ("reference" if item.get("reference") else item.get("origin") if item.get("origin") != "bundled"
           else None)
    if why is None and item.get("interpreted"):
        return "yes · interpreted (check-grad runs it)"
    return f"yes · {why or 'named only'}"


def kernel_table(items: list[dict], device: str, width: int | None = None) -> Table:
    """One line per kernel; devices and the description join when the width allows."""
    width = terminal_width(width)
    title = f"kernels on {device}"
    caption = "default = runs without --kernels (speed and memory: lightning and softmax only)"

    def layout(devices: bool, about: bool, gap: int, framework: str = "framework") -> Callable[[], Table]:
        def make() -> Table:
            tb = table(title, gap, caption)
            tb.add_column("name", no_wrap=True, style="bold")
            tb.add_column(framework, no_wrap=True)
            if devices:
                tb.add_column("devices", no_wrap=True)
            tb.add_column("runs", no_wrap=True)
            if about:
                tb.add_column("about", no_wrap=True)
            for it in items:
                tb.add_row(it["name"], it["framework"], *(["/".join(it["devices"])] if devices else []),
                              kernel_status(it), *([it["description"]] if about else []))
            return tb
        return make

    layouts = [layout(True, True, 2), layout(True, False, 2), layout(False, False, 2), layout(False, False, 1),
               layout(False, False, 1, "fw")]  # the long peer names leave the reasons a few columns short
    chosen = fit(layouts, width)
    if chosen is not None:
        return chosen
    tb = table(title, 1, caption)  # a reason too long for the width: let that column wrap
    tb.add_column("name", no_wrap=True, style="bold")
    tb.add_column("framework", no_wrap=True)
    tb.add_column("runs", overflow="fold")
    for it in items:
        tb.add_row(it["name"], it["framework"], kernel_status(it))
    return tb
