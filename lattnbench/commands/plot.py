"""``lattnbench plot``: time, memory and speed-up against n, as PNG or SVG."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands import axes

from lattnbench.commands.common import die, err


def plot(
    results: Annotated[Path, typer.Argument(help="A results JSON file.", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(
        help="Image to write (.png, .svg, .pdf; default: RESULTS with .png). With --kind all: "
        "OUT-speed.png, OUT-memory.png, OUT-speedup.png.")] = None,
    kind: Annotated[str, typer.Option(help="speed, memory, speedup or all.")] = "speed",
    reference: Annotated[Optional[str], typer.Option(
        help="Kernel for the speed-up plot (default: the file's own reference, as a suite names it, "
        "when timed; else softmax/sdpa-flash when timed, else the first softmax kernel).")] = None,
    timer: Annotated[str, typer.Option(
        help="Timer of the speed and speed-up plots: device, graph or latency.")] = "device",
    mode: Annotated[Optional[str], typer.Option(
        help="Only these modes: fwd, bwd, fwdbwd (comma list).")] = None,
    kernels: axes.ONLY_KERNELS = None,
    n: axes.ONLY_N = None,
) -> None:
    """Plot a results file: log-log time or memory against n, or speed-up against a reference."""
    from lattnbench.views.plot import PlotError
    from lattnbench.views.plot import plot as render
    from lattnbench.results import ResultsError
    from lattnbench.views.rows import ReportError, load_docs
    from lattnbench.views.rows import UnknownTimer, filter_rows, parse_timer, select_rows

    try:
        timer = parse_timer(timer)
        (doc,) = filter_rows(select_rows(load_docs([results]), mode, None), kernels, n)
        written, skipped = render(doc, results, out, kind, reference, timer)
    except (ResultsError, ReportError, PlotError, UnknownTimer) as exc:
        die(str(exc))
    for note in skipped:
        err.print(f"skipped {note}", highlight=False)
    for path in written:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
