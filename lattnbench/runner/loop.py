"""The one plan-and-run loop behind speed, memory, check-grad and suites.

Where a task runs is the isolation mode (``--isolate``):

- ``kernel`` (the default on a GPU): each kernel's points run in a fresh worker process (one per
  kernel and per run of ``--repeat``), and autotuning is forgotten between its points
  (``lattnbench.runner.tuning``), so no kernel's compile or autotune state reaches another's numbers
  and every point is tuned at its own shape;
- ``point``: every point in a fresh worker;
- ``none`` (the default on a CPU): everything in this process.

Gradient checks run after every timing task, and under isolation in workers of their own, so
check-grad never runs in a process that then times. ``--repeat R`` runs the speed tasks R times,
rotating the kernel order each run. A ``--point-timeout`` needs a worker to kill: with ``none``
every task then goes to one worker. A point that times out or whose worker dies becomes rows
with that status, and a new worker carries on with the rest. Rows reach the results writer as
each point finishes, so an interrupted run keeps every finished point.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from lattnbench.runner.plan import Task
from lattnbench.results import ResultsWriter, row_key

ISOLATION = ("kernel", "point", "none")
#: after Ctrl-C / SIGTERM: how long a worker may take to stop before SIGKILL
GRACE_S = 15.0
POLL_S = 0.05
#: environment every isolated worker gets: fla's on-disk autotune results would carry configs
#: tuned in an earlier process (at another shape) into this one
ISOLATED_ENV = {"FLA_CACHE_RESULTS": "0"}


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: every finished point is saved; ``signum`` gives the exit code."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Hooks:
    """What the caller wants to hear: a point starts, a point finished, a note for the user."""

    start: Callable[[Task], None] = lambda task: None
    done: Callable[[Task, list[dict]], None] = lambda task, rows: None
    note: Callable[[str], None] = lambda text: None


@dataclass
class Job:
    """Tasks that share one process (``worker`` False: this one).

    ``forget_tuning``: tune every timing point at its own shape (forget between points, and keep
    or restore each point's tuned configs; ``lattnbench.runner.tuning``).
    """

    tasks: list[Task]
    worker: bool
    forget_tuning: bool = False
    world_size: int = 1  # ranks or mesh devices the job's points split the sequence over
    ranks: int = 1       # processes that run the job (world_size for torch, 1 for JAX)


@dataclass
class RunConfig:
    device: str
    isolate: str = "none"
    point_timeout: float = 0.0
    repeat: int = 1
    plugins: tuple[str, ...] = ()
    needs_ceilings: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    #: gradient-check workers running at once (their points time nothing, so they may share a GPU)
    check_jobs: int = 1


def default_isolation(device: str) -> str:
    return "kernel" if device == "cuda" else "none"


def expand_runs(tasks: list[Task], repeat: int) -> list[list[Task]]:
    """The tasks of each run: run 0 has everything; later runs the speed tasks, kernels rotated."""
    kernels = list(dict.fromkeys(t.kernel for t in tasks if t.times))
    runs = []
    for r in range(max(1, repeat)):
        k = r % len(kernels) if kernels else 0
        order = {name: i for i, name in enumerate(kernels[k:] + kernels[:k])}
        mine = [replace(t, run=r) for t in tasks if r == 0 or t.kind == "speed"]
        timing = [t for t in mine if t.times]
        cases = list(dict.fromkeys((t.kind, t.case) for t in timing))
        timing.sort(key=lambda t: (cases.index((t.kind, t.case)), order[t.kernel]))
        runs.append(timing + [t for t in mine if not t.times])
    return runs


def make_jobs(runs: list[list[Task]], isolate: str, timeout_s: float, parallel_checks: bool = False) -> list[Job]:
    """Group each run's tasks into processes; gradient checks after all timing of their run.

    With ``parallel_checks`` a kernel's checks split by dtype: compiled and tuned state is per
    dtype, so the split loses no reuse and gives parallel workers three times the jobs."""
    if isolate == "none":
        flat = [t for run in runs for t in run if t.times] + [t for run in runs for t in run if not t.times]
        return [Job(flat, worker=timeout_s > 0)] if flat else []
    jobs: list[Job] = []
    checks: list[Task] = []
    for run in runs:
        timing = [t for t in run if t.times]
        checks.extend(t for t in run if not t.times)
        if isolate == "point":
            jobs.extend(Job([t], worker=True, forget_tuning=True) for t in timing)
            continue
        for kernel in dict.fromkeys(t.kernel for t in timing):
            mine = [t for t in timing if t.kernel == kernel]
            jobs.append(Job(sorted(mine, key=lambda t: t.kind != "speed"), worker=True, forget_tuning=True))
    if isolate == "point":
        jobs.extend(Job([t], worker=True) for t in checks)
    else:
        group = (lambda t: (t.kernel, t.case.dtype if t.case else "")) if parallel_checks else (lambda t: t.kernel)
        for key in dict.fromkeys(map(group, checks)):
            jobs.append(Job([t for t in checks if group(t) == key], worker=True))
    return jobs


def pending(tasks: list[Task], writer: ResultsWriter, device: str, registry) -> list[Task]:
    """Tasks (and speed / memory modes) not yet in the results file: what ``--resume`` still runs.

    A task's rows are the ones ``failed_rows`` names for it; a check is done when its first row
    is in the file, a speed or memory mode when its row holds this task's run.
    """
    from lattnbench.harness.points import failed_rows

    runs = writer.done_runs()
    out = []
    for t in tasks:
        rows = failed_rows(t, registry[t.kernel], device, "pending", "")
        if not t.times:
            if row_key(rows[0]) not in runs:
                out.append(t)
            continue
        left = tuple(m for m, r in zip(t.modes, rows) if t.run not in runs.get(row_key(r), set()))
        if left:
            out.append(replace(t, modes=left))
    return out


class Runner:
    """Runs a plan's tasks into a results writer, in this process or in workers."""

    def __init__(self, tasks: list[Task], writer: ResultsWriter, registry, cfg: RunConfig,
                 hooks: Hooks | None = None, resume: bool = False) -> None:
        self.writer, self.registry, self.cfg = writer, registry, cfg
        self.hooks = hooks or Hooks()
        runs = expand_runs(tasks, cfg.repeat)
        #: the kernel order of each run (rotated under --repeat), kept in the results file
        self.order = [list(dict.fromkeys(t.kernel for t in run if t.times)) for run in runs]
        if resume:
            runs = [pending(run, writer, cfg.device, registry) for run in runs]
        from lattnbench.runner.ranks import split_jobs, under_torchrun

        self.jobs = split_jobs(make_jobs(runs, cfg.isolate, cfg.point_timeout, parallel_checks=cfg.check_jobs > 1),
                               lambda name: registry[name].framework, in_workers=not under_torchrun())
        self.total = sum(len(j.tasks) for j in self.jobs)
        #: held while a worker's rows go into the writer and the hooks (check workers run in threads)
        self.lock = threading.RLock()

    @property
    def ceilings(self) -> dict:
        return self.writer.doc.get("ceilings") or {}

    def _want_ceilings(self) -> bool:
        return self.cfg.needs_ceilings and not self.ceilings and any(
            t.kind == "speed" for j in self.jobs for t in j.tasks)

    def run(self) -> None:
        """Every job in order; raises Interrupted after Ctrl-C / SIGTERM (rows so far are saved)."""
        old_term = signal.getsignal(signal.SIGTERM)

        def on_term(signum, _frame):
            raise Interrupted(signum)

        signal.signal(signal.SIGTERM, on_term)
        parallel = [j for j in self.jobs if j.worker and j.world_size == 1 and not any(t.times for t in j.tasks)]
        if self.cfg.check_jobs < 2 or len(parallel) < 2:
            parallel = []
        in_parallel = {id(j) for j in parallel}
        try:
            for job in self.jobs:
                if id(job) in in_parallel:
                    continue
                if job.worker:
                    WorkerJob(self, job).run()
                else:
                    self._run_here(job)
            if parallel:
                self._run_checks_in_parallel(parallel)
        except KeyboardInterrupt:
            raise Interrupted(signal.SIGINT) from None
        finally:
            signal.signal(signal.SIGTERM, old_term)

    def _run_checks_in_parallel(self, jobs: list[Job]) -> None:
        """Gradient-check jobs, ``check_jobs`` workers at once, after every timing job: none of
        their points is timed, so they may share the machine. On Ctrl-C every worker is stopped."""
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

        # the longest jobs first, so that no long one starts last while the others sit idle
        jobs = sorted(jobs, key=lambda j: -len(j.tasks))
        workers = [WorkerJob(self, job, shares_gpu=True) for job in jobs]
        pool = ThreadPoolExecutor(max_workers=self.cfg.check_jobs, thread_name_prefix="lattnbench-check")
        futures = [pool.submit(w.run) for w in workers]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    raise f.exception()
        except (KeyboardInterrupt, Interrupted) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            for f in futures:
                f.cancel()
            for w in workers:
                w.cancelled = True
                w._stop(signum)
            pool.shutdown(wait=True)
            raise Interrupted(signum) from None
        pool.shutdown(wait=True)

    def _run_here(self, job: Job) -> None:
        from lattnbench.harness.points import execute
        from lattnbench.runner import first_config

        first_config.install_if_requested()

        if self._want_ceilings():
            from lattnbench.measure.roofline import measure_ceilings

            self.writer.set_ceilings(measure_ceilings(self.cfg.device))
        for task in job.tasks:
            self.hooks.start(task)
            rows = execute(task, self.registry, self.cfg.device, self.ceilings)
            self.writer.add(rows)
            self.hooks.done(task, rows)

    def record_failure(self, task: Task, status: str, reason: str) -> list[dict]:
        """Rows with ``status`` for the parts of ``task`` not in the file yet (this run's, for speed)."""
        from lattnbench.harness.points import failed_rows

        with self.lock:
            done = self.writer.done_runs()
            rows = []
            for r in failed_rows(task, self.registry[task.kernel], self.cfg.device, status, reason):
                runs = done.get(row_key(r))
                if runs is None or (r["metric"] == "time_ms" and task.run not in runs):
                    rows.append(r)
            if rows:
                self.writer.add(rows)
            self.hooks.done(task, rows)
        return rows


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*:")


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


class WorkerJob:
    """One job in worker processes: start, follow its rows and heartbeat, restart after a failure."""

    def __init__(self, runner: Runner, job: Job, shares_gpu: bool = False) -> None:
        self.runner, self.job = runner, job
        self.shares_gpu = shares_gpu  # runs beside other workers (check-grad --jobs)
        self.dir = Path(tempfile.mkdtemp(prefix="lattnbench-worker-"))
        self.proc: subprocess.Popen | None = None
        self.cancelled = False  # set from another thread on Ctrl-C: start no further worker

    def _env(self) -> dict[str, str]:
        from lattnbench.runner.worker import PARENT_ENV

        env = dict(os.environ)
        if self.runner.cfg.isolate != "none":
            env.update(ISOLATED_ENV)
            from lattnbench.runner.tuning import tuning_dir

            # fresh processes recompile what JAX compiled before: keep it on disk
            env.setdefault("JAX_COMPILATION_CACHE_DIR", str(tuning_dir().parent / "jax-compile"))
            env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
        env.update(self.runner.cfg.extra_env)
        if self.shares_gpu:  # JAX would take 75 % of the GPU per process up front
            env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env[PARENT_ENV] = str(os.getpid())
        # a worker imports what this process imports (plugins on a path added at run time)
        prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        extra = [p for p in sys.path if p and os.path.isdir(p)
                 and not any(os.path.realpath(p).startswith(x) for x in prefixes)]
        paths = [*extra, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def _start(self, tasks: list[Task], with_ceilings: bool) -> tuple[Path, Path, list[Task]]:
        n = len(list(self.dir.glob("job-*.json")))
        listed = ([Task("ceilings")] if with_ceilings else []) + tasks
        job_path, rows_path, beat_path = (self.dir / f"{p}-{n}.{x}" for p, x in
                                          (("job", "json"), ("rows", "jsonl"), ("beat", "json")))
        job_path.write_text(json.dumps({
            "device": self.runner.cfg.device, "plugins": list(self.runner.cfg.plugins), "ranks": self.job.ranks,
            "ceilings": self.runner.ceilings, "forget_tuning": self.job.forget_tuning,
            "rows": str(rows_path), "heartbeat": str(beat_path), "tasks": [t.to_json() for t in listed]}))
        rows_path.touch()
        cmd = [sys.executable, "-m", "lattnbench.runner.worker", str(job_path)]
        if self.job.world_size > 1:
            from lattnbench.runner.ranks import RankGroup, device_env

            env = {**self._env(), **device_env(self.job.world_size, self.job.ranks, self.runner.cfg.device)}
            logs = [open(self.dir / f"log-{n}{'' if r == 0 else f'-rank{r}'}.txt", "w")  # noqa: SIM115
                    for r in range(self.job.ranks)]
            self.proc = RankGroup(cmd, env, self.job.ranks, logs)
        else:
            logs = [open(self.dir / f"log-{n}.txt", "w")]  # noqa: SIM115 - closed with the process
            self.proc = subprocess.Popen(cmd, env=self._env(), stdout=logs[0], stderr=logs[0], start_new_session=True)
        for log in logs:
            log.close()
        return rows_path, beat_path, listed

    def _kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def _devices_short(self) -> str | None:
        """Why this machine cannot give each rank a GPU of its own, or None."""
        if self.job.world_size == 1 or self.runner.cfg.device != "cuda":
            return None
        from lattnbench.harness.points import cuda_devices

        found = cuda_devices()
        if found >= self.job.world_size:
            return None
        return f"world size {self.job.world_size} needs as many GPUs; {found} visible"

    def _died(self, rc: int) -> str:
        """How the worker (or, at a world size above 1, the rank that failed first) ended, with its last log line."""
        how = _describe(rc)
        describe = getattr(self.proc, "describe", None)
        if describe is None:
            tail = self._log_tail()
        else:
            how, tail = describe(how), self._log_tail(self.proc.failed_rank)
        return how + (f": {tail}" if tail else "")

    def _log_tail(self, rank: int | None = None) -> str:
        pattern = "log-*.txt" if not rank else f"log-*-rank{rank}.txt"
        logs = sorted((p for p in self.dir.glob(pattern) if rank or "-rank" not in p.name),
                      key=lambda p: p.stat().st_mtime)
        if not logs:
            return ""
        lines = [ln.strip() for ln in logs[-1].read_text(errors="replace").splitlines() if ln.strip()]
        # an exception's own line, not the hints printed after it (CUDA's "Compile with ...")
        errors = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
        return (errors or lines or [""])[-1][:200]

    def run(self) -> None:
        runner, todo = self.runner, list(self.job.tasks)
        timeout = runner.cfg.point_timeout
        short = self._devices_short()
        if short:
            for task in todo:
                runner.record_failure(task, "unsupported", short)
            return
        try:
            while todo and not self.cancelled:
                listed, finished, in_flight, timed_out = self._one_worker(todo, timeout)
                left = [i for i in range(len(listed)) if i not in finished and listed[i].kind != "ceilings"]
                if not left:
                    return
                rc = self.proc.returncode
                stuck = in_flight if in_flight in left else None
                if self.cancelled:
                    raise Interrupted(signal.SIGINT)
                if timed_out:
                    task = listed[stuck]
                    runner.record_failure(task, "timeout", f"no result after {timeout:g} s (per-point timeout)")
                    what = f"timeout: {task.label()} gave no result after {timeout:g} s"
                elif rc in (130, -signal.SIGINT):
                    raise Interrupted(signal.SIGINT)
                elif stuck is not None:
                    task, died = listed[stuck], self._died(rc)
                    runner.record_failure(task, "error", f"the process died ({died}) while running this point")
                    what = f"crash: the worker died ({died}) running {task.label()}"
                else:  # died before its first point or between points: no point to blame
                    tail = self._log_tail()
                    why = f"the worker process ended ({_describe(rc)}) outside any point{': ' + tail if tail else ''}"
                    for i in left:
                        runner.record_failure(listed[i], "error", why)
                    with runner.lock:
                        runner.hooks.note(f"error: {why}")
                    return
                with runner.lock:
                    runner.hooks.note(f"{what}; recorded, carrying on in a new worker")
                todo = [listed[i] for i in left if i > stuck]
        except (KeyboardInterrupt, Interrupted) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            self._stop(signum)
            raise Interrupted(signum) from None
        finally:
            self._kill()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _one_worker(self, todo: list[Task], timeout: float) -> tuple[list[Task], set[int], int | None, bool]:
        """Run one worker over ``todo`` until it exits or its point times out.

        Returns (the tasks it was given, the indices it finished, the index in flight, timed out).
        """
        runner = self.runner
        rows_path, beat_path, listed = self._start(todo, runner._want_ceilings())
        reader = _Lines(rows_path)
        finished: set[int] = set()
        in_flight: int | None = None

        def take(final: bool = False) -> None:
            for msg in reader.new(final):
                i = msg["task"]
                finished.add(i)
                with runner.lock:
                    if "ceilings" in msg:
                        runner.writer.set_ceilings(msg["ceilings"])
                    else:
                        runner.writer.add(msg["rows"])
                        runner.hooks.done(listed[i], msg["rows"])

        while True:
            take()
            beat = _read_json(beat_path)
            current = beat.get("task") if beat else None
            if current is not None and current != in_flight:
                in_flight = current
                if listed[in_flight].kind != "ceilings":
                    with runner.lock:
                        runner.hooks.start(listed[in_flight])
            if self.proc.poll() is not None:
                take(final=True)  # rows written just before the exit
                return listed, finished, in_flight, False
            if (timeout and current is not None and current not in finished
                    and time.time() - float(beat["start"]) > timeout):
                self._kill()
                self.proc.wait()
                take(final=True)
                return listed, finished, in_flight, current not in finished
            time.sleep(POLL_S)

    def _stop(self, signum: int) -> None:
        """Pass the interrupt on, give the worker GRACE_S to stop, then SIGKILL it."""
        if self.proc is None:
            return
        self._kill(signum)
        try:
            self.proc.wait(timeout=GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt, Interrupted):
            self._kill()
            self.proc.wait()


class _Lines:
    """Complete JSON lines appended to a file since the last look."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, ""

    def new(self, final: bool = False) -> list[dict]:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except OSError:
            return []
        text = self.partial + text
        lines = text.split("\n")
        self.partial = "" if final else lines.pop()
        out = []
        for line in lines:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a torn line of a killed worker
        return out


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
