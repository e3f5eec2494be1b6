"""``lattnbench gate --static``: the printing and exit code of the static (compile-metric) gate."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, out


def gate_static(current: Path, baseline: Path, threshold: str | None, json_out: bool) -> None:
    """Compare two static files; exit 0 ok, 1 regression, 2 bad input (or nothing comparable)."""
    from lattnbench.static.results import StaticError, load
    from lattnbench.views.gate import GateError, parse_threshold
    from lattnbench.views.static_gate import compare

    try:
        cur_doc, base_doc = load(current), load(baseline)
        thr = parse_threshold(threshold if threshold is not None else "0%")
    except (StaticError, GateError) as exc:
        die(str(exc))
    result = compare(cur_doc["rows"], base_doc["rows"], thr)
    if result.compared == 0 and not result.failures:
        skipped = "; ".join(f"{n} rows {what}" for what, n in result.skipped.items()) or "no common rows"
        die(f"nothing to compare between {current} and {baseline} ({skipped})")
    bad = result.failures
    if json_out:
        typer.echo(json.dumps({"current": str(current), "baseline": str(baseline), "threshold": thr,
                               **result.to_dict()}, indent=1))
        raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)
    for what, n in result.skipped.items():
        out.print(f"[yellow]skipped[/] {n} rows: compiler differs ({escape(what)}); like is compared with like only",
                  highlight=False)
    if result.new:
        out.print(f"[cyan]new[/] {result.new} rows not in the baseline (not gated)", highlight=False)
    for f in bad:
        out.print(f"[bold red]{escape(f.line())}[/]", highlight=False, soft_wrap=True)
    if bad:
        out.print(f"[bold red]FAILED[/]: {len(bad)} of {len(result.findings)} static metrics regressed",
                  highlight=False)
        out.print(f"if the change is intended, update the baseline in the same commit:\n"
                  f"  lattnbench static --out {baseline}", highlight=False, soft_wrap=True)
    else:
        out.print(f"[green]passed[/]: {result.compared} static metrics, none regressed", highlight=False)
    raise typer.Exit(EXIT_FAIL if bad else EXIT_OK)
