"""Rich tables of a run's rows: one table per (metric, mode, shape), n down, kernels across."""
from __future__ import annotations

from collections import defaultdict

from rich.table import Table

STATUS_STYLE = {"fail": "bold red", "error": "red", "oom": "yellow", "timeout": "red",
                "unsupported": "dim", "unavailable": "dim"}


def _shape(row: dict) -> str:
    kv = f"/{row['kv_heads']}" if row["kv_heads"] != row["heads"] else ""
    dims = f"D{row['dim_qk']}" if row["dim_qk"] == row["dim_v"] else f"D{row['dim_qk']}E{row['dim_v']}"
    extra = " h0" if row.get("initial_state") else ""
    return f"B{row['batch']} H{row['heads']}{kv} {dims} {row['dtype']}{extra}"


def _cell(row: dict, unit: str) -> str:
    status = row["status"]
    if status != "ok":
        style = STATUS_STYLE.get(status, "")
        return f"[{style}]{status}[/]" if style else status
    med = row["median"]
    if unit == "ms":
        text = f"{med:.3f} [dim]({row['p20']:.3f}–{row['p80']:.3f})[/]"
        if row.get("pct_floor") is not None:
            text += f"\n[cyan]{row['pct_floor']:.0f}% of floor[/]"
        if row.get("interpreted"):
            text += "\n[dim]interpreted[/]"
        return text
    return f"{med:,.1f}"


def value_tables(rows: list[dict], metric: str, unit: str, title: str) -> list[Table]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["metric"] == metric:
            groups[(r["mode"], _shape(r))].append(r)
    tables = []
    for (mode, shape), rs in groups.items():
        kernels = list(dict.fromkeys(r["kernel"] for r in rs))
        table = Table(title=f"{title} — {mode}, {shape} ({unit}; median (p20–p80))", title_justify="left")
        table.add_column("n", justify="right", style="bold")
        for k in kernels:
            table.add_column(k.replace("/", "/\n", 1), justify="right")
        by_n: dict[int, dict[str, dict]] = defaultdict(dict)
        for r in rs:
            by_n[r["seqlen"]][r["kernel"]] = r
        for n in sorted(by_n):
            table.add_row(str(n), *[_cell(by_n[n][k], unit) if k in by_n[n] else "—" for k in kernels])
        tables.append(table)
        reasons = {(r["kernel"], r["status"], r["reason"]) for r in rs if r["status"] != "ok" and r.get("reason")}
        if reasons:
            note = Table.grid(padding=(0, 1))
            for k, s, why in sorted(reasons):
                note.add_row(f"[dim]{k}[/]", STATUS_STYLE.get(s, "") and f"[{STATUS_STYLE[s]}]{s}[/]" or s, why)
            tables.append(note)
    return tables


def speed_tables(rows: list[dict]) -> list[Table]:
    return value_tables(rows, "time_ms", "ms", "speed")


def memory_tables(rows: list[dict]) -> list[Table]:
    return value_tables(rows, "peak_mb", "MB above inputs", "peak memory")


def check_tables(rows: list[dict]) -> list[Table]:
    """One row per (kernel, case), one column per tensor: err ratio and PASS / FAIL."""
    tensors = list(dict.fromkeys(r["tensor"] for r in rows if r["metric"] == "err_ratio"))
    table = Table(title="check-grad — err = RMS(x − ref)/RMS(ref) against fp64", title_justify="left")
    table.add_column("kernel", no_wrap=True)
    table.add_column("case")
    for t in tensors:
        table.add_column(t, justify="right")
    table.add_column("verdict")
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if r["metric"] == "err_ratio":
            label = f"T{r['seqlen']} {_shape(r)}" + (" rev" if r.get("reverse") else "") + (" varlen" if r.get("varlen") else "")
            groups[(r["kernel"], label)][r["tensor"]] = r
    for (kernel, label), cells in groups.items():
        row_cells, verdicts = [], set()
        for t in tensors:
            r = cells.get(t)
            if r is None:
                row_cells.append("—")
                continue
            verdicts.add(r["status"])
            if r["status"] in ("ok", "fail") and isinstance(r.get("median"), float):
                style = "green" if r["status"] == "ok" else "bold red"
                row_cells.append(f"[{style}]{r['median']:.1e}[/]")
            else:
                row_cells.append(_cell(r, ""))
        bad = verdicts & {"fail", "error", "oom", "timeout"}
        verdict = "[bold red]FAIL[/]" if bad else ("[green]PASS[/]" if "ok" in verdicts else "[dim]skipped[/]")
        table.add_row(kernel, label, *row_cells, verdict)
    tables = [table]
    reasons = {(r["kernel"], r["status"], r["reason"]) for r in rows
               if r["status"] not in ("ok", "fail") and r.get("reason")}
    if reasons:
        note = Table.grid(padding=(0, 1))
        for k, s, why in sorted(reasons):
            note.add_row(f"[dim]{k}[/]", s, why)
        tables.append(note)
    return tables
