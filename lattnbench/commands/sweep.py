"""Shared driver of the measuring commands: pick kernels, open the results file, hand the tasks to
the runner with a progress display, print the tables, and exit with a status that says what failed."""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from lattnbench.commands.common import EXIT_FAIL, EXIT_OK, die, err, out
from lattnbench.commands.invocation import cli_args, resume_command
from lattnbench.errors import Unsupported
from lattnbench.runner.plan import Task
from lattnbench.registry import KernelEntry, Registry
from lattnbench.results import ResultsError, ResultsWriter, write_csv
from lattnbench.spec import SpecError

#: what makes a point (a progress step) besides kernel, metric and run: a row without its mode and tensor
POINT_FIELDS = ("batch", "seqlen", "heads", "kv_heads", "dim_qk", "dim_v", "dtype", "decay", "gate_norm", "g_dtype",
                "varlen",
                "initial_state", "reverse", "input_scale", "check", "world_size")

#: seconds of device-timer samples per speed point when --budget is not given
GPU_BUDGET, CPU_BUDGET = 0.25, 0.5

#: where runs write when --out is not given (outside any checkout, so a run never dirties one)
RESULTS_ENV = "LATTNBENCH_RESULTS_DIR"


def results_root() -> Path:
    """``$LATTNBENCH_RESULTS_DIR``, else ``$XDG_CACHE_HOME/lattnbench/results`` (``~/.cache/...``)."""
    forced = os.environ.get(RESULTS_ENV)
    if forced:
        return Path(forced)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lattnbench" / "results"


def pick_kernels(reg: Registry, patterns: list[str] | None, device: str, families=None,
                 plugins: list[str] | None = None, timing: bool = True, parallel: bool = False) -> list[KernelEntry]:
    """Named kernels, or the defaults of ``families`` (plus the plugins given with ``--kernel``).

    Defaults: for timing, the bundled kernels timed by default on the device; for check-grad
    (``timing`` False) every available bundled kernel that is not a reference. With ``parallel``
    (a world size above 1 asked for) the defaults are the sequence-parallel kernels instead. Peers
    and plugins run when named; a glob leaves peers out and says so.
    """
    if patterns:
        chosen = reg.select(patterns)
        left = reg.peers_left_out(patterns)
        if left:
            err.print(f"[dim]note: the glob leaves out the peers {', '.join(left)}; name them to run them[/]",
                      highlight=False, soft_wrap=True)
        return chosen
    chosen = [e for e in reg if default_kernel(e, device, timing, parallel)
              and (families is None or e.family in families)]
    return chosen + given_plugins(reg, plugins)


def given_plugins(reg: Registry, specs: list[str] | None) -> list[KernelEntry]:
    """The registry entries of the plugins given with ``--kernel``."""
    return [e for e in reg if e.origin == "plugin" and e.loader.spec in (specs or ())]


def with_plugins(reg: Registry, chosen: list[KernelEntry], specs: list[str] | None) -> list[KernelEntry]:
    """The plugins given with ``--kernel`` that join a suite's measurement: those of a family the
    measurement already has, not chosen yet (a suite names bundled kernels, not plugins)."""
    families = {e.family for e in chosen}
    names = {e.name for e in chosen}
    return [e for e in given_plugins(reg, specs) if e.family in families and e.name not in names]


def default_kernel(entry: KernelEntry, device: str, timing: bool = True, parallel: bool = False) -> bool:
    """Runs when no ``--kernels`` is given: bundled, not a reference, available, sequence parallel
    exactly when ``parallel``; for timing also timed by default on ``device`` (every sequence-parallel
    one when ``parallel``) and, on a CPU, not interpreted."""
    if entry.reference or entry.origin != "bundled" or entry.available(device) is not None:
        return False
    if entry.sequence_parallel != parallel:
        return False
    return not timing or ((parallel or device in entry.timed_by_default)
                          and not (device == "cpu" and entry.interpreted_on_cpu))


def family_case(entry: KernelEntry, case):
    """The case as the kernel's family sees it (an ungated family's at the default gates)."""
    from lattnbench.operators import family

    return case.for_family(gated=family(entry.family).gated)


def family_applies(entry: KernelEntry, case) -> bool:
    """Whether check-grad has anything to compare for the kernel's family on the case."""
    from lattnbench.operators import family

    return family(entry.family).applies(case)


def distinct(tasks: list[Task], reg: Registry) -> list[Task]:
    """Each task once, in order: a sweep over gate norms runs a Lightning kernel once, and one over
    decays runs a GLA kernel once."""
    from lattnbench.operators import family

    seen: set = set()
    out = []
    for t in tasks:
        decayed = t.kernel not in reg.entries or family(reg[t.kernel].family).decayed
        key = (t.kind, t.kernel, t.case.same_work(decayed), t.run)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def runs_at(entry: KernelEntry, case) -> bool:
    """Only sequence-parallel kernels have points above world size 1."""
    return case.world_size == 1 or entry.sequence_parallel


def open_writer(path: str | Path | None, name: str, env: dict, resume: bool,
                args: list[str] | None = None) -> ResultsWriter:
    """The results file: ``--out``, else a time-stamped file under ``results_root()/<machine>/``.

    ``args`` are the options that reproduce the run (``invocation``): recorded in the file, and
    with ``--resume`` but no ``--out`` they pick the newest unfinished run of the same options.
    """
    from lattnbench.commands.invocation import RUNNING, NoRunToResume, find_resumable
    from lattnbench.env import machine_name

    folder = results_root() / machine_name(env)
    if path:
        target = Path(path)
    elif resume:
        if args is None:
            die("--resume needs --out: the results file of the run to continue")
        try:
            target = find_resumable(folder, name, args)
        except NoRunToResume as exc:
            die(str(exc))
        err.print(f"resuming {target}", highlight=False, soft_wrap=True)
    else:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        target = folder / f"{name}-{stamp}.json"
        k = 2
        while target.exists():  # two runs in one second keep both files
            target = target.with_name(f"{name}-{stamp}-{k}.json")
            k += 1
    if target.exists() and target.is_dir():
        die(f"--out {target} is a directory: give a file path such as {target / (name + '.json')}")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                die(f"cannot write {target}: {parent} is a file, not a directory")
            break
    try:
        writer = ResultsWriter(target, name, env, resume=resume)
        if args is not None:
            writer.doc["invocation"] = {"command": name, "args": list(args)}
        writer.doc["state"] = RUNNING
        writer.save()
    except ResultsError as exc:
        die(str(exc))
    return writer


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


def execute(title: str, tasks: list[Task], writer: ResultsWriter, reg: Registry, device: str, *,
            isolate: str, point_timeout: float, repeat: int, plugins: list[str] | None, resume: bool,
            check_jobs: int = 1, again: str | None = None) -> None:
    """Run the tasks under a progress display; Ctrl-C / SIGTERM exit 130 / 143 after saving and
    printing ``again``, the command that continues the run."""
    from lattnbench.runner.loop import Hooks, Interrupted, RunConfig, Runner
    from lattnbench.runner.ranks import under_torchrun

    if check_jobs > 1 and isolate == "none":
        die("--jobs needs worker processes: add --isolate kernel (the CPU default is none)")
    if under_torchrun():  # this process is rank 0 of the launcher's ranks: every point runs here
        isolate, point_timeout = "none", 0.0
    cfg = RunConfig(device=device, isolate=isolate, point_timeout=point_timeout, repeat=repeat,
                    plugins=tuple(plugins or ()), needs_ceilings=device == "cuda", check_jobs=check_jobs)
    runner = Runner(tasks, writer, reg, cfg, resume=resume)
    writer.doc["isolation"] = isolate
    writer.doc["repeat"] = repeat
    if not resume or "run_order" not in writer.doc:
        writer.doc["run_order"] = runner.order
    with Progress(title, runner.total) as progress:
        runner.hooks = Hooks(start=progress.start, done=progress.done, note=progress.note)
        try:
            runner.run()
        except Interrupted as exc:
            _release_followers()
            stopped(writer, again)
            raise typer.Exit(128 + int(exc.signum)) from None
        except ResultsError as exc:  # the results file cannot be written any more (disk full, removed)
            _release_followers()
            die(str(exc))
    _release_followers()


def stopped(writer: ResultsWriter, again: str | None) -> None:
    """After Ctrl-C / SIGTERM: mark the file interrupted, write its CSV, and say where it is and
    the command that continues it."""
    from lattnbench.commands.invocation import INTERRUPTED

    csv = writer.path.with_suffix(".csv")
    writer.doc["state"] = INTERRUPTED
    notes = []
    try:
        writer.save()
    except ResultsError as exc:
        notes.append(str(exc))
    try:
        write_csv(writer.doc, csv)
        views = " (+ .csv)"
    except OSError as exc:
        views = ""
        notes.append(f"cannot write {csv}: {exc.strerror or exc}")
    points = _count_points(writer.rows)
    err.print(f"interrupted: {points} finished points saved in {writer.path}{views}", highlight=False,
              soft_wrap=True, markup=False)
    for note in notes:
        err.print(f"warning: {note}", highlight=False, soft_wrap=True, markup=False)
    if again:
        err.print(f"continue with: {again}", highlight=False, soft_wrap=True, markup=False)


def _count_points(rows: list[dict]) -> int:
    return len({(r["kernel"], r["metric"], *(json.dumps(r.get(f)) for f in POINT_FIELDS), x.get("run", 0))
                for r in rows for x in (r.get("runs") or [{}])})


def _release_followers() -> None:
    """Under torchrun: tell the other ranks that rank 0 is done."""
    from lattnbench.runner.ranks import under_torchrun

    if under_torchrun():
        from lattnbench.adapters import sharded

        sharded.stop_followers()


def finish(writer: ResultsWriter, as_json: bool, tables: Callable[[list[dict]], list]) -> None:
    """Print the tables (or JSON), the file paths and a status summary; exit 1 on failures."""
    from lattnbench.harness.points import any_failed, summarize

    from lattnbench.commands.invocation import FINISHED

    rows = writer.rows
    writer.doc["state"] = FINISHED
    csv = writer.path.with_suffix(".csv")
    try:
        writer.save()
        write_csv(writer.doc, csv)
    except ResultsError as exc:
        die(str(exc))
    except OSError as exc:
        die(f"cannot write {csv}: {exc.strerror or exc} (the results are in {writer.path})")
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
    points = _count_points(rows)
    err.print(f"results: {writer.path} (+ .csv) — {points} points, {len(rows)} rows "
              f"(one per mode or tensor): {summary or 'none'}")
    raise typer.Exit(EXIT_FAIL if any_failed(rows) else EXIT_OK)


def setup(device: str, plugins: list[str] | None):
    """Resolve the device and the registry; usage errors exit 2 with one line.

    Under torchrun every rank runs the command: rank 0 goes on as usual, the others follow its
    calls on their shards and leave quietly (no tables, no results file).
    """
    from lattnbench.harness.points import resolve_device
    from lattnbench.registry import registry_with
    from lattnbench.runner.ranks import under_torchrun

    try:
        dev = resolve_device(device)
        reg = registry_with(plugins or [])
    except (Unsupported, SpecError) as exc:
        die(str(exc))
    if under_torchrun():
        from lattnbench.adapters import sharded

        sharded.join(dev)
        if sharded.rank() > 0:
            sharded.follow(reg, dev)
            sharded.leave()
            raise typer.Exit(EXIT_OK)
    return dev, reg


def resolve_isolation(isolate: str, device: str) -> str:
    from lattnbench.runner.loop import ISOLATION, default_isolation

    choice = isolate.strip().lower()
    if choice == "auto":
        return default_isolation(device)
    if choice not in ISOLATION:
        die(f"bad --isolate {isolate!r}: choose auto, {', '.join(ISOLATION)}")
    return choice


def guarded(fn: Callable[[], object]):
    """Turn SpecError into a one-line usage error."""
    try:
        return fn()
    except SpecError as exc:
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


def sweep_command(o: SweepOptions) -> None:
    """speed and memory: the same sweep axes, one task per (case, kernel)."""
    from lattnbench.commands import axes
    from lattnbench.views.tables import memory_tables, speed_tables
    from lattnbench.env import collect
    from lattnbench.runner.plan import Task

    speed = o.command == "speed"
    timeout_s = axes.parse_timeout(o.point_timeout)
    dev, reg = setup(o.device, o.plugins)
    where = resolve_isolation(o.isolate, dev)
    defaults = axes.GPU_DEFAULTS if dev == "cuda" else axes.CPU_DEFAULTS
    cases = guarded(lambda: axes.cases(defaults, o.n, o.batch, o.heads, o.kv_heads, o.dim, o.dim_v, o.dtype, o.decay,
                                       world_size=o.world_size, gate_norm=o.gate_norm, g_dtype=o.g_dtype))
    parallel = any(c.world_size > 1 for c in cases)
    chosen = guarded(lambda: pick_kernels(reg, o.kernels, dev, ("lightning", "softmax"), o.plugins, parallel=parallel))
    want = guarded(lambda: axes.modes(o.mode))
    if not speed:
        want = [m for m in want if m != "bwd"] or ["fwd"]
    budget = o.budget
    if budget is None:  # a GPU's samples vary less and its main job has two minutes; a CPU's need more
        budget = GPU_BUDGET if dev == "cuda" else CPU_BUDGET
    main_job = speed and o.kernels is None and o.n is None  # the plain run: the main job's caps
    tasks = distinct([Task(o.command, e.name, family_case(e, c), tuple(want), budget,
                           settle_c=o.settle if speed else None)
                      for c in cases for e in chosen
                      if runs_at(e, c) and not (main_job and e.caps(dev, c.seqlen))], reg)
    args = sweep_args(o)
    writer = open_writer(o.out, o.command, collect(), o.resume, args)
    execute(o.command, tasks, writer, reg, dev, isolate=where, point_timeout=timeout_s,
            repeat=o.repeat if speed else 1, plugins=o.plugins, resume=o.resume,
            again=resume_command(o.command, args, writer.path))
    finish(writer, o.as_json, speed_tables if speed else memory_tables)


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
                     ("--world-size", o.world_size), ("--settle", o.settle)])
