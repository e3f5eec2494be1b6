"""Drive a measuring run: resolve the device and registry, open the results file, run the tasks,
and mark the file interrupted or finished. Problems a user can fix raise ``RunError``; the
command line turns them into one line and exit 2, and supplies the progress display."""
from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lattnbench.errors import RunError, Unsupported
from lattnbench.registry import Registry
from lattnbench.results import ResultsError, ResultsWriter, write_csv
from lattnbench.runner.plan import Task
from lattnbench.spec import SpecError

#: what makes a point (a progress step) besides kernel, metric and run: a row without its mode and tensor
POINT_FIELDS = ("batch", "seqlen", "heads", "kv_heads", "dim_qk", "dim_v", "dtype", "decay", "gate_norm", "g_dtype",
                "varlen",
                "initial_state", "reverse", "input_scale", "check", "world_size")

#: where runs write when --out is not given (outside any checkout, so a run never dirties one)
RESULTS_ENV = "LATTNBENCH_RESULTS_DIR"


def results_root() -> Path:
    """``$LATTNBENCH_RESULTS_DIR``, else ``$XDG_CACHE_HOME/lattnbench/results`` (``~/.cache/...``)."""
    forced = os.environ.get(RESULTS_ENV)
    if forced:
        return Path(forced)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lattnbench" / "results"


def count_points(rows: list[dict]) -> int:
    """Finished points: rows without their mode and tensor, each run counted."""
    return len({(r["kernel"], r["metric"], *(json.dumps(r.get(f)) for f in POINT_FIELDS), x.get("run", 0))
                for r in rows for x in (r.get("runs") or [{}])})


def setup(device: str, plugins: list[str] | None) -> tuple[str, Registry, bool]:
    """The device, the registry, and whether this process leads the run.

    Under torchrun every rank runs the command: rank 0 leads as usual, the others follow its calls
    on their shards and return with ``False`` once rank 0 is done (no tables, no results file).
    """
    from lattnbench.harness.points import resolve_device
    from lattnbench.registry import registry_with
    from lattnbench.runner.ranks import under_torchrun

    try:
        dev = resolve_device(device)
        reg = registry_with(plugins or [])
    except (Unsupported, SpecError) as exc:
        raise RunError(str(exc)) from None
    if under_torchrun():
        from lattnbench.adapters import sharded

        sharded.join(dev)
        if sharded.rank() > 0:
            sharded.follow(reg, dev)
            sharded.leave()
            return dev, reg, False
    return dev, reg, True


def resolve_isolation(isolate: str, device: str) -> str:
    from lattnbench.runner.loop import ISOLATION, default_isolation

    choice = isolate.strip().lower()
    if choice == "auto":
        return default_isolation(device)
    if choice not in ISOLATION:
        raise RunError(f"bad --isolate {isolate!r}: choose auto, {', '.join(ISOLATION)}")
    return choice


def open_writer(path: str | Path | None, name: str, env: dict, resume: bool, args: list[str] | None = None,
                say: Callable[[str], None] | None = None) -> ResultsWriter:
    """The results file: ``--out``, else a time-stamped file under ``results_root()/<machine>/``.

    ``args`` are the options that reproduce the run (``invocation``): recorded in the file, and
    with ``--resume`` but no ``--out`` they pick the newest unfinished run of the same options
    (``say`` is told which).
    """
    from lattnbench.env import machine_name
    from lattnbench.runner.invocation import RUNNING, NoRunToResume, find_resumable

    folder = results_root() / machine_name(env)
    if path:
        target = Path(path)
    elif resume:
        if args is None:
            raise RunError("--resume needs --out: the results file of the run to continue")
        try:
            target = find_resumable(folder, name, args)
        except NoRunToResume as exc:
            raise RunError(str(exc)) from None
        if say is not None:
            say(f"resuming {target}")
    else:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        target = folder / f"{name}-{stamp}.json"
        k = 2
        while target.exists():  # two runs in one second keep both files
            target = target.with_name(f"{name}-{stamp}-{k}.json")
            k += 1
    if target.exists() and target.is_dir():
        raise RunError(f"--out {target} is a directory: give a file path such as {target / (name + '.json')}")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise RunError(f"cannot write {target}: {parent} is a file, not a directory")
            break
    try:
        writer = ResultsWriter(target, name, env, resume=resume)
        if args is not None:
            writer.doc["invocation"] = {"command": name, "args": list(args)}
        writer.doc["state"] = RUNNING
        writer.save()
    except ResultsError as exc:
        raise RunError(str(exc)) from None
    return writer


def execute(tasks: list[Task], writer: ResultsWriter, reg: Registry, device: str, *, isolate: str,
            point_timeout: float, repeat: int, plugins: list[str] | None, resume: bool, progress,
            check_jobs: int = 1) -> None:
    """Run the tasks; ``progress(total)`` is a context manager with ``start``, ``done`` and
    ``note``. Ctrl-C / SIGTERM raise ``runner.loop.Interrupted`` after every finished point is
    saved (``interrupted`` then marks the file)."""
    from lattnbench.runner.loop import Hooks, Interrupted, RunConfig, Runner
    from lattnbench.runner.ranks import under_torchrun

    if check_jobs > 1 and isolate == "none":
        raise RunError("--jobs needs worker processes: add --isolate kernel (the CPU default is none)")
    if under_torchrun():  # this process is rank 0 of the launcher's ranks: every point runs here
        isolate, point_timeout = "none", 0.0
    cfg = RunConfig(device=device, isolate=isolate, point_timeout=point_timeout, repeat=repeat,
                    plugins=tuple(plugins or ()), needs_ceilings=device == "cuda", check_jobs=check_jobs)
    runner = Runner(tasks, writer, reg, cfg, resume=resume)
    writer.doc["isolation"] = isolate
    writer.doc["repeat"] = repeat
    if not resume or "run_order" not in writer.doc:
        writer.doc["run_order"] = runner.order
    with progress(runner.total) as shown:
        runner.hooks = Hooks(start=shown.start, done=shown.done, note=shown.note)
        try:
            runner.run()
        except Interrupted:
            release_followers()
            raise
        except ResultsError as exc:  # the results file cannot be written any more (disk full, removed)
            release_followers()
            raise RunError(str(exc)) from None
    release_followers()


@dataclass(frozen=True)
class Stopped:
    """What ``interrupted`` saved: the finished points, whether the CSV was written, warnings."""

    points: int
    csv_written: bool
    notes: list[str]


def interrupted(writer: ResultsWriter) -> Stopped:
    """After Ctrl-C / SIGTERM: mark the file interrupted and write its CSV, as far as possible."""
    from lattnbench.runner.invocation import INTERRUPTED

    csv = writer.path.with_suffix(".csv")
    writer.doc["state"] = INTERRUPTED
    notes = []
    try:
        writer.save()
    except ResultsError as exc:
        notes.append(str(exc))
    try:
        write_csv(writer.doc, csv)
        written = True
    except OSError as exc:
        written = False
        notes.append(f"cannot write {csv}: {exc.strerror or exc}")
    return Stopped(count_points(writer.rows), written, notes)


def finished(writer: ResultsWriter) -> None:
    """Mark the file finished and write its CSV; RunError when either cannot be written."""
    from lattnbench.runner.invocation import FINISHED

    writer.doc["state"] = FINISHED
    csv = writer.path.with_suffix(".csv")
    try:
        writer.save()
        write_csv(writer.doc, csv)
    except ResultsError as exc:
        raise RunError(str(exc)) from None
    except OSError as exc:
        raise RunError(f"cannot write {csv}: {exc.strerror or exc} (the results are in {writer.path})") from None


def release_followers() -> None:
    """Under torchrun: tell the other ranks that rank 0 is done."""
    from lattnbench.runner.ranks import under_torchrun

    if under_torchrun():
        from lattnbench.adapters import sharded

        sharded.stop_followers()
