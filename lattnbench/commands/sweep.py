"""Shared driver of the measuring commands: pick kernels, open the results file, run with a
progress bar, print the tables, and exit with a status that says what failed."""
from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, err, out
from lattnbench.errors import Unsupported
from lattnbench.registry import KernelEntry, Registry
from lattnbench.results import ResultsError, ResultsWriter, write_csv
from lattnbench.spec import Case, SpecError


def pick_kernels(reg: Registry, patterns: list[str] | None, device: str, families=None) -> list[KernelEntry]:
    """Named kernels, or by default every available, non-reference bundled kernel of ``families``.

    Peers and plugins run when named (``-k 'lightning/*'`` includes them).
    """
    if patterns:
        return reg.select(patterns)
    chosen = [e for e in reg if not e.reference and e.origin == "bundled" and e.available(device) is None
              and (families is None or e.family in families)]
    if device == "cpu":
        chosen = [e for e in chosen if not e.interpreted_on_cpu]
    return chosen


def default_out(command: str, machine: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / machine / f"{command}-{stamp}.json"


def open_writer(path: str | None, command: str, env: dict, resume: bool) -> ResultsWriter:
    from lattnbench.env import machine_name

    target = Path(path) if path else default_out(command, machine_name(env))
    try:
        return ResultsWriter(target, command, env, resume=resume)
    except ResultsError as exc:
        die(str(exc))


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err,
                    transient=False)


def run_points(command: str, kernels: list[KernelEntry], cases: list[Case],
               point: Callable[[KernelEntry, Case], list[dict]]) -> None:
    """Run every (kernel, case) under a progress bar; Ctrl-C stops after what is saved."""
    with progress_bar() as bar:
        task = bar.add_task(command, total=len(kernels) * len(cases))
        try:
            for case in cases:
                for entry in kernels:
                    bar.update(task, description=f"{command} {entry.name} {case.label()}")
                    point(entry, case)
                    bar.advance(task)
        except KeyboardInterrupt:
            err.print("[yellow]interrupted: every finished point is saved[/]")
            raise typer.Exit(130) from None


def finish(writer: ResultsWriter, as_json: bool, tables: Callable[[list[dict]], list]) -> None:
    """Print the tables (or JSON), the file paths and a status summary; exit 1 on failures."""
    from lattnbench.measure import any_failed, summarize
    from lattnbench.supervise import heartbeat

    heartbeat()  # no point in flight any more (a supervising parent stops the clock)
    rows = writer.rows
    try:
        write_csv(writer.doc, writer.path.with_suffix(".csv"))
    except OSError as exc:
        err.print(f"[yellow]warning:[/] cannot write the CSV view: {exc}")
    if as_json:
        json.dump(writer.doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for table in tables(rows):
            out.print(table)
    counts = summarize(rows)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    err.print(f"results: {writer.path} (+ .csv) — {summary or 'no points'}")
    raise typer.Exit(EXIT_FAIL if any_failed(rows) else EXIT_OK)


def setup(device: str, plugins: list[str] | None):
    """Resolve the device and the registry; usage errors exit 2 with one line."""
    from lattnbench.measure import resolve_device
    from lattnbench.registry import registry_with

    try:
        dev = resolve_device(device)
        reg = registry_with(plugins or [])
    except (Unsupported, SpecError) as exc:
        die(str(exc))
    return dev, reg


def guarded(fn: Callable[[], object]):
    """Turn SpecError into a one-line usage error."""
    try:
        return fn()
    except SpecError as exc:
        die(str(exc))
