"""``lattnbench compare``: runs side by side, for people (``gate`` is CI's verdict)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands.common import die, out

def compare(
    results: Annotated[list[Path], typer.Argument(help="Two or more results JSON files; the first is the "
                                                  "baseline.", show_default=False)],
    timer: Annotated[str, typer.Option(help="Timer to compare: device, graph or latency.")] = "device",
    mode: Annotated[Optional[str], typer.Option(help="Only these modes: fwd, bwd, fwdbwd (comma list).")] = None,
    kernels: Annotated[Optional[list[str]], typer.Option(
        "--kernels", "-k", help="Only these kernels: names or globs, comma separated or repeated.",
        show_default=False)] = None,
    n: Annotated[Optional[str], typer.Option(
        "--n", "-n", help="Only these sequence lengths (range grammar).", show_default=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object instead of the tables.")] = False,
) -> None:
    """Runs side by side: per point and mode, each run's time, its ratio to the first run's, and
    faster / slower / ~ (within noise).

    Times are compared as they are (not as ratios to a reference kernel), so compare runs of one
    machine, or read a ratio across machines as such. Noise: the range of the run medians when a
    point has several runs (--repeat), else the p20-p80 range of its samples; overlapping ranges
    are within noise. Points profiled in two or more runs (`speed --breakdown`) also get a table
    of the kernels one call launches, each kernel's time per call side by side. For CI's pass/fail
    verdict use `lattnbench gate`.
    """
    from lattnbench.results import ResultsError
    from lattnbench.views.compare import VERDICT_NOTE, compare_runs, to_json
    from lattnbench.views.verdicts import compare_tables, kernel_tables, run_label
    from lattnbench.views.rows import ReportError, UnknownTimer, filter_rows, load_docs, parse_timer, select_rows

    if len(results) < 2:
        die("compare needs two or more results files: lattnbench compare A.json B.json")
    try:
        timer = parse_timer(timer)
        docs = filter_rows(select_rows(load_docs(results), mode, "speed"), kernels, n)
        lines = compare_runs(docs, timer)
    except (ResultsError, ReportError, UnknownTimer) as exc:
        die(str(exc))
    if json_out:
        typer.echo(to_json(lines, [str(p) for p in results], timer))
        return
    from rich.text import Text

    for i, (path, doc) in enumerate(zip(results, docs)):
        env = doc.get("env") or {}
        what = ", ".join(str(v) for v in (env.get("gpu") or doc["rows"][0].get("device") if doc["rows"] else None,
                                          env.get("commit") and f"commit {str(env['commit'])[:12]}",
                                          env.get("time")) if v)
        out.print(Text(f"{run_label(i)} = {path}" + (f" ({what})" if what else "")))
    for table in compare_tables(lines, len(results)) + kernel_tables(lines, len(results)):
        out.print()
        out.print(table)
    counts: dict[str, int] = {}
    for line in lines:
        for v in line.verdicts:
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
    out.print()
    out.print(Text(f"{timer} timer; X/A = X's time / A's: below 1 is faster than A; {VERDICT_NOTE}", style="dim"))
    out.print(Text(", ".join(f"{counts.get(k, 0)} {k if k != '~' else 'within noise'}"
                             for k in ("faster", "slower", "~")) + f" of {len(lines)} points"))


EXAMPLE = """Examples:

  lattnbench compare before.json after.json

  lattnbench compare results/cpu/gate-unchanged/run1.json results/cpu/gate-unchanged/run2.json --mode fwd

  lattnbench compare a.json b.json c.json -k 'lightning/*' --n 4096..32768 --json
"""


def register(app: typer.Typer) -> None:
    app.command("compare", epilog=EXAMPLE)(compare)
