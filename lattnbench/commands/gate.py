"""``lattnbench gate``: fail CI on a speed regression (against a same-run reference) or an accuracy failure."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, out

def gate(
    current: Annotated[Path, typer.Argument(help="Results JSON of this run.", show_default=False)],
    baseline: Annotated[Path, typer.Option(help="Results JSON to compare against.", show_default=False)],
    threshold: Annotated[Optional[str], typer.Option(
        help="Largest tolerated growth of kernel/reference time: 10% or 0.1 (default: the baseline's "
        "recorded threshold, from its suite, else 10% for GPU runs and 100% for CPU runs).",
        show_default=False)] = None,
    reference: Annotated[Optional[str], typer.Option(
        help="Kernel whose same-run time divides every other (default: the baseline's recorded "
        "reference, from its suite, else the first softmax kernel timed in both); 'none' compares "
        "times as they are (runs of one machine in one sitting).", show_default=False)] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print a JSON object instead of the table.")] = False,
    static: Annotated[bool, typer.Option(
        "--static", help="CURRENT and --baseline are lattnbench static files: gate compile metrics "
        "(spills, registers, shared memory, loop instructions, mma, XLA flops and bytes); --threshold "
        "is then the tolerated growth of registers and shared memory (default 0%).")] = False,
    show_all: Annotated[bool, typer.Option(
        "--all", help="List every point, the ok ones too (by default they are counted).")] = False,
    common: Annotated[bool, typer.Option(
        "--common", help="Compare only the points both files measured (e.g. points measured alone "
        "against the same points inside a suite); implied when the files come from different "
        "suites.")] = False,
) -> None:
    """Compare CURRENT against --baseline. Exit 0 ok, 1 regression or failure, 2 bad input.

    A regression is a significant growth of kernel_time / reference_time (same run) beyond the threshold, any failing err_ratio row, or a point ok in the baseline that is missing or not ok now.
    With --static: a new spill, registers or shared memory up beyond the threshold, chunk-loop PTX instructions up > 2%, a lost mma/wgmma, XLA flops, bytes accessed or temporaries up > 1%, or a lost row; rows of another compiler version are skipped.
    """
    if static:
        from lattnbench.commands.static_gate import gate_static

        gate_static(current, baseline, threshold, json_out)
        return
    from lattnbench.views.gate import (FAILING, METHOD, METHODS, GateError, compare, default_threshold, failed,
                                      parse_threshold, to_json)
    from lattnbench.results import ResultsError
    from lattnbench.views.rows import ReportError, load_docs

    try:
        cur_doc, base_doc = load_docs([current, baseline])
        recorded = [] if threshold is not None and reference is not None else [
            what for what, given in (("threshold", threshold), ("reference", reference))
            if given is None and base_doc.get(what)]
        if threshold is not None or base_doc.get("threshold"):
            thr = parse_threshold(threshold if threshold is not None else base_doc["threshold"])
            thr_source = None
        else:
            thr, thr_source = default_threshold(base_doc["rows"])
        if reference is None and base_doc.get("reference"):
            reference = base_doc["reference"]
        points, ref = compare(cur_doc["rows"], base_doc["rows"], thr, reference,
                              common_only=common or cur_doc.get("suite") != base_doc.get("suite"))
    except (ResultsError, ReportError, GateError) as exc:
        die(str(exc))
    notes: list[str] = []
    if thr_source:
        notes.append(f"[dim]threshold {thr:.0%}: {thr_source} (the baseline records none)[/]")
    if recorded:
        notes.append(f"[dim]{' and '.join(recorded)} from the baseline file ({base_doc.get('suite')})[/]")
    if cur_doc.get("suite") != base_doc.get("suite"):
        notes.append(f"[yellow]note:[/] the files come from different suites ({cur_doc.get('suite')} vs "
                     f"{base_doc.get('suite')}): only their common points are compared")
    elif common:
        notes.append("[dim]only the points both files measured are compared[/]")
    bad = [p for p in points if p.verdict in FAILING]
    if json_out:
        typer.echo(to_json(points, current=str(current), baseline=str(baseline), reference=ref,
                           threshold=thr))
        raise typer.Exit(EXIT_FAIL if failed(points) else EXIT_OK)
    # the verdict comes first: in a CI log it is the line a reader looks for
    if bad:
        kinds = sorted({p.verdict for p in bad})
        out.print(f"[bold red]FAILED[/]: {len(bad)} of {len(points)} points ({', '.join(kinds)})", highlight=False)
    else:
        out.print(f"[green]passed[/]: {len(points)} points, none regressed", highlight=False)
    for p in bad:
        why = p.reason or (f"{p.change:+.1%}, by {p.method}" + (
            f" (interval {p.interval[0]:+.1%} .. {p.interval[1]:+.1%})" if p.interval else ""))
        out.print(f"[bold red]{p.verdict}[/] {p.kernel} n={p.n} {p.mode} {p.metric}: {why}", highlight=False)
    for line in notes:
        out.print(line, highlight=False)
    shown = points if show_all else [p for p in points if p.verdict != "ok"]
    title = (f"gate: {current.name} vs {baseline.name} · "
             f"{'time ratio to ' + ref if ref else 'times as they are'} · threshold {thr:.0%}")
    from lattnbench.views.verdicts import verdict_tables

    for table in verdict_tables(shown, title):
        out.print(table)
    quiet = len(points) - len(shown)
    if quiet:
        out.print(f"ok: {quiet} points within the threshold or not significant (--all lists them)", highlight=False)
    used = {m: sum(1 for p in points if p.method == m) for m in METHODS}
    how = ", ".join(f"{n} by {m}" for m, n in used.items() if n)
    out.print(f"significance{f' ({how})' if how else ''}: {METHOD}", highlight=False)
    raise typer.Exit(EXIT_FAIL if failed(points) else EXIT_OK)


EXAMPLE = """Examples:

  lattnbench gate run.json --baseline results/cpu/ci.json --threshold 100% --reference lightning/naive-torch
  lattnbench gate --static now.json --baseline results/static/cpu.json
"""


def register(app: typer.Typer) -> None:
    app.command("gate", epilog=EXAMPLE)(gate)
