"""The measuring commands' side of a run: the progress display, the one-line errors, the tables
and status at the end, and ``speed`` / ``memory`` (one task per case and kernel). Choosing kernels
and driving the run live in ``runner.select`` and ``runner.drive``."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, err, out
from lattnbench.errors import RunError
from lattnbench.results import ResultsWriter
from lattnbench.runner import drive
from lattnbench.runner.invocation import cli_args, resume_command
from lattnbench.runner.plan import Task
from lattnbench.registry import KernelEntry, Registry
from lattnbench.runner.select import distinct, family_case, nothing_to_run, pick_kernels, runs_at, single_rank
from lattnbench.spec import Case, SpecError, memory_modes

#: seconds of device-timer samples per speed point when --budget is not given
GPU_BUDGET, CPU_BUDGET = 0.25, 0.5


def glob_note(text: str) -> None:
    """What ``pick_kernels`` says of the peers a glob leaves out."""
    err.print(f"[dim]note: {text}[/]", highlight=False, soft_wrap=True)


def setup(device: str, plugins: list[str] | None):
    """The device and the registry (usage errors exit 2 with one line); a torchrun rank that
    follows rank 0 exits 0 here once rank 0 is done."""
    dev, reg, lead = guarded(lambda: drive.setup(device, plugins))
    if not lead:
        raise typer.Exit(EXIT_OK)
    return dev, reg


def resolve_isolation(isolate: str, device: str) -> str:
    return guarded(lambda: drive.resolve_isolation(isolate, device))


def open_writer(path: str | Path | None, name: str, env: dict, resume: bool,
                args: list[str] | None = None) -> ResultsWriter:
    """``runner.drive.open_writer``, saying which run ``--resume`` continues."""
    return guarded(lambda: drive.open_writer(path, name, env, resume, args,
                                             say=lambda line: err.print(line, highlight=False, soft_wrap=True)))


class Progress:
    """A progress bar on a terminal; elsewhere (CI logs) one line per finished point.

    On the bar the point's label is the column that gives way: at 80 columns a long label
    (kernel, shape, run) would otherwise push the count, the elapsed time and the ETA off the line.
    """

    def __init__(self, title: str, total: int, console=None) -> None:
        self.title, self.total, self.count = title, total, 0
        self.started = time.monotonic()
        self.bar = None
        console = console or err
        if console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)
            from rich.progress import Progress as Bar
            from rich.table import Column

            label = Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
            self.bar = Bar(TextColumn("[bold]{task.description}", table_column=label),
                           BarColumn(bar_width=12), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                           TimeRemainingColumn(), console=console, transient=False, expand=True)
            self.task_id = self.bar.add_task(title, total=total)

    def __enter__(self) -> "Progress":
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def start(self, task: Task) -> None:
        if self.bar is not None:
            self.bar.update(self.task_id, description=task.label())

    def done(self, task: Task, rows: list[dict]) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.advance(self.task_id)
            return
        statuses = sorted({r["status"] for r in rows}) or ["skipped"]
        elapsed = time.monotonic() - self.started
        err.print(f"[{self.count}/{self.total}] {task.label()}: {', '.join(statuses)} ({elapsed:.0f} s)",
                  highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        from rich.markup import escape

        err.print(f"[yellow]{escape(text)}[/]", highlight=False, soft_wrap=True)


def execute(title: str, tasks: list[Task], writer: ResultsWriter, reg, device: str, *,
            isolate: str, point_timeout: float, repeat: int, plugins: list[str] | None, resume: bool,
            check_jobs: int = 1, again: str | None = None) -> None:
    """Run the tasks under a progress display; Ctrl-C / SIGTERM exit 130 / 143 after saving and
    printing ``again``, the command that continues the run."""
    from lattnbench.runner.loop import Interrupted

    try:
        drive.execute(tasks, writer, reg, device, isolate=isolate, point_timeout=point_timeout, repeat=repeat,
                      plugins=plugins, resume=resume, check_jobs=check_jobs,
                      progress=lambda total: Progress(title, total))
    except Interrupted as exc:
        stopped(writer, drive.interrupted(writer), again)
        raise typer.Exit(128 + int(exc.signum)) from None
    except RunError as exc:
        die(str(exc))


def stopped(writer: ResultsWriter, saved: drive.Stopped, again: str | None) -> None:
    """Say where the interrupted run's results are and the command that continues it."""
    views = " (+ .csv)" if saved.csv_written else ""
    err.print(f"interrupted: {saved.points} finished points saved in {writer.path}{views}", highlight=False,
              soft_wrap=True, markup=False)
    for note in saved.notes:
        err.print(f"warning: {note}", highlight=False, soft_wrap=True, markup=False)
    if again:
        err.print(f"continue with: {again}", highlight=False, soft_wrap=True, markup=False)


def finish(writer: ResultsWriter, as_json: bool, tables: Callable[[list[dict]], list]) -> None:
    """Print the tables (or JSON), the file paths and a status summary; exit 1 on failures."""
    from lattnbench.harness.points import any_failed, summarize

    rows = writer.rows
    guarded(lambda: drive.finished(writer))
    if as_json:
        json.dump(writer.doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for table in tables(rows):
            out.print(table)
        timed = [r for r in rows if r.get("metric") == "time_ms" and r.get("status") == "ok"]
        if timed:  # what "device timer" means here: on a CPU there is no L2 flush nor do_bench
            from rich.text import Text

            from lattnbench.views.report import timer_note

            out.print(Text(f"device timer: {timer_note('device', timed)}", style="dim"))
    from rich.markup import escape

    from lattnbench.views.rows import inverted_modes

    for line in inverted_modes(rows):
        err.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    counts = summarize(rows)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    points = drive.count_points(rows)
    err.print(f"results: {writer.path} (+ .csv) — {points} points, {len(rows)} rows "
              f"(one per mode or tensor): {summary or 'none'}")
    raise typer.Exit(EXIT_FAIL if any_failed(rows) else EXIT_OK)


def guarded(fn: Callable[[], object]):
    """Turn SpecError and RunError into a one-line usage error."""
    try:
        return fn()
    except (SpecError, RunError) as exc:
        die(str(exc))


@dataclass(frozen=True)
class SweepOptions:
    """The options ``speed`` and ``memory`` share, as the command line gave them (None: the default)."""

    command: str  # "speed" or "memory"
    n: str | None = None
    batch: str | None = None
    heads: str | None = None
    kv_heads: str | None = None
    dim: str | None = None
    dim_v: str | None = None
    dtype: str | None = None
    kernels: list[str] | None = None
    plugins: list[str] | None = None
    mode: str = "fwd,fwdbwd"
    device: str = "auto"
    out: str | None = None
    as_json: bool = False
    decay: str = "alibi"
    resume: bool = False
    budget: float | None = None
    repeat: int = 1
    isolate: str = "auto"
    point_timeout: str = "0"
    world_size: str | None = None
    settle: float | None = None
    gate_norm: str | None = None
    g_dtype: str | None = None
    breakdown: bool = False


def sweep_command(o: SweepOptions) -> None:
    """speed and memory: the same sweep axes, one task per (case, kernel)."""
    from lattnbench.commands import axes
    from lattnbench.views.tables import memory_tables, speed_tables
    from lattnbench.env import collect

    speed = o.command == "speed"
    timeout_s = axes.parse_timeout(o.point_timeout)
    dev, reg = setup(o.device, o.plugins)
    where = resolve_isolation(o.isolate, dev)
    defaults = axes.GPU_DEFAULTS if dev == "cuda" else axes.CPU_DEFAULTS
    cases = guarded(lambda: axes.cases(defaults, o.n, o.batch, o.heads, o.kv_heads, o.dim, o.dim_v, o.dtype, o.decay,
                                       world_size=o.world_size, gate_norm=o.gate_norm, g_dtype=o.g_dtype))
    parallel = any(c.world_size > 1 for c in cases)
    chosen = guarded(lambda: pick_kernels(reg, o.kernels, dev, ("lightning", "softmax"), o.plugins, parallel=parallel,
                                          note=glob_note))
    want = guarded(lambda: axes.modes(o.mode))
    if not speed:
        try:
            memory_modes(want)
        except SpecError as exc:
            die(f"bad --mode {o.mode!r}: {exc}")
    budget = o.budget
    if budget is None:  # a GPU's samples vary less and its main job has two minutes; a CPU's need more
        budget = GPU_BUDGET if dev == "cuda" else CPU_BUDGET
    main_job = speed and o.kernels is None and o.n is None  # the plain run: the main job's caps
    tasks = distinct([Task(o.command, e.name, family_case(e, c), tuple(want), budget,
                           settle_c=o.settle if speed else None, breakdown=o.breakdown and speed)
                      for c in cases for e in chosen
                      if runs_at(e, c) and not (main_job and e.caps(dev, c.seqlen))], reg)
    report_left_out(reg, chosen, cases, tasks)
    if o.settle is not None:
        settle_note(dev, "--settle")
    args = sweep_args(o)
    writer = open_writer(o.out, o.command, collect(), o.resume, args)
    execute(o.command, tasks, writer, reg, dev, isolate=where, point_timeout=timeout_s,
            repeat=o.repeat if speed else 1, plugins=o.plugins, resume=o.resume,
            again=resume_command(o.command, args, writer.path))
    finish(writer, o.as_json, speed_tables if speed else memory_tables)


def report_left_out(reg: Registry, chosen: list[KernelEntry], cases: list[Case], tasks: list[Task]) -> None:
    """A selection with no point is a usage error that says why; kernels that lose the points of a
    world size above 1 (not sequence parallel) are named in a note."""
    if not tasks:
        die(nothing_to_run(reg, chosen, cases))
    left = single_rank(chosen, cases)
    if left:
        worlds = sorted({c.world_size for c in cases} - {1})
        glob_note(f"{', '.join(left)} {'runs' if len(left) == 1 else 'run'} at world size 1 only (not sequence "
                  f"parallel): {'its' if len(left) == 1 else 'their'} --world-size "
                  f"{','.join(map(str, worlds))} points are left out")


def settle_note(dev: str, what: str) -> None:
    """Waiting for a temperature reads the GPU's (NVML): off one, say that it waits for nothing."""
    if dev != "cuda":
        glob_note(f"{what} waits for a GPU's temperature (NVML); on the {dev} it waits for nothing")


def sweep_args(o: SweepOptions) -> list[str]:
    """The options as given, for the results file and the resume command (defaults left out)."""
    return cli_args([("--n", o.n), ("--batch", o.batch), ("--heads", o.heads), ("--kv-heads", o.kv_heads),
                     ("--dim", o.dim), ("--dim-v", o.dim_v), ("--dtype", o.dtype), ("--kernels", o.kernels),
                     ("--kernel", o.plugins), ("--mode", None if o.mode == "fwd,fwdbwd" else o.mode),
                     ("--device", None if o.device == "auto" else o.device),
                     ("--decay", None if o.decay == "alibi" else o.decay), ("--gate-norm", o.gate_norm),
                     ("--g-dtype", o.g_dtype),
                     ("--budget", None if o.command != "speed" or o.budget is None else o.budget),
                     ("--repeat", None if o.repeat == 1 else o.repeat),
                     ("--isolate", None if o.isolate == "auto" else o.isolate),
                     ("--point-timeout", None if str(o.point_timeout) == "0" else o.point_timeout),
                     ("--world-size", o.world_size), ("--settle", o.settle),
                     ("--breakdown", True if o.breakdown else None)])
