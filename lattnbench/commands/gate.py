"""``lattnbench gate``: fail CI on a speed regression (against a same-run reference) or an accuracy failure."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, out

_STYLE = {"REGRESSION": "bold red", "FAIL": "bold red", "LOST": "bold red", "~": "yellow",
          "faster": "green", "new": "cyan", "no ref": "yellow"}


def _show(v) -> str:
    from lattnbench.report import fmt

    if v is None:
        return "—"
    return f"{v:.2e}" if isinstance(v, float) and abs(v) < 1e-2 and v != 0 else (
        fmt(v) if isinstance(v, float) else str(v))


def gate(
    current: Annotated[Path, typer.Argument(help="Results JSON of this run.", show_default=False)],
    baseline: Annotated[Path, typer.Option(help="Results JSON to compare against.", show_default=False)],
    threshold: Annotated[str, typer.Option(
        help="Largest tolerated growth of kernel/reference time: 10% or 0.1.")] = "10%",
    reference: Annotated[Optional[str], typer.Option(
        help="Kernel whose same-run time divides every other (default: the first softmax kernel "
        "timed in both, softmax/sdpa-flash when present).")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print a JSON object instead of the table.")] = False,
) -> None:
    """Compare CURRENT against --baseline. Exit 0 ok, 1 regression or failure, 2 bad input.

    A regression is a significant growth of kernel_time / reference_time (same run) beyond the threshold, any failing err_ratio row, or a point ok in the baseline that is missing or not ok now.
    """
    from lattnbench.gate import FAILING, METHOD, METHODS, GateError, compare, failed, parse_threshold, to_json
    from lattnbench.report import ReportError, ResultsError, load_docs

    try:
        thr = parse_threshold(threshold)
        cur_doc, base_doc = load_docs([current, baseline])
        points, ref = compare(cur_doc["rows"], base_doc["rows"], thr, reference)
    except (ResultsError, ReportError, GateError) as exc:
        die(str(exc))
    bad = [p for p in points if p.verdict in FAILING]
    if json_out:
        typer.echo(to_json(points, current=str(current), baseline=str(baseline), reference=ref,
                           threshold=thr))
    else:
        from rich.console import Console
        from rich.table import Table

        shapes = sorted({p.case for p in points})
        one = len(shapes) == 1
        table = Table(title=f"gate: {current.name} vs {baseline.name} · time ratio to {ref} · threshold "
                      f"{thr:.0%}" + (f" · {shapes[0]}" if one else ""), title_justify="left")
        cols = [("kernel", "left"), ("case", "left"), ("n", "right"), ("mode", "left"),
                ("metric", "left"), ("baseline", "right"), ("current", "right"), ("change", "right"),
                ("verdict", "left")]
        for col, just in cols:
            if not (one and col == "case"):
                table.add_column(col, justify=just, no_wrap=col != "verdict")  # type: ignore[arg-type]
        for p in points:
            change = f"{p.change:+.1%}" if p.change is not None else ""
            verdict = p.verdict + (f" ({p.reason})" if p.reason and p.verdict in FAILING else "")
            style = _STYLE.get(p.verdict)
            cells = [p.kernel, *([] if one else [p.case]), str(p.n), p.mode, p.metric,
                     _show(p.baseline), _show(p.current), change,
                     f"[{style}]{verdict}[/]" if style else verdict]
            table.add_row(*cells)
        # a CI log is not a terminal: give the table room instead of folding it at 80 columns
        console = out if out.is_terminal else Console(width=max(out.width, 160))
        console.print(table)
        used = {m: sum(1 for p in points if p.method == m) for m in METHODS}
        how = ", ".join(f"{n} by {m}" for m, n in used.items() if n)
        console.print(f"significance{f' ({how})' if how else ''}: {METHOD}", highlight=False, soft_wrap=True)
        if bad:
            kinds = sorted({p.verdict for p in bad})
            console.print(f"[bold red]FAILED[/]: {len(bad)} of {len(points)} points ({', '.join(kinds)})",
                      highlight=False)
        else:
            console.print(f"[green]passed[/]: {len(points)} points, none regressed", highlight=False)
    raise typer.Exit(EXIT_FAIL if failed(points) else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)
