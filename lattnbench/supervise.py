"""Per-point timeout: a sweep supervised from a parent process (``--point-timeout SECONDS``).

A hung CUDA kernel (or a deadlocked compiler, or a ``time.sleep`` in a plugin) cannot be
interrupted from inside its own process, so the timeout is enforced from outside:

- ``supervise(out_path, timeout_s)`` is called by a command once its arguments are validated
  and its results file is decided. With a timeout of 0 (the default) or inside a supervised
  child it returns at once and the command runs in-process as before.
- Otherwise this process becomes the *parent*: it re-runs the very same command as one child
  (``python -c <boot> <command> <same options> --out <path>``) in its own process group, with
  ``LATTNBENCH_HEARTBEAT`` naming a heartbeat file. The child runs the whole sweep (one
  start-up, not one per point) and writes a heartbeat before each point: the rows that point
  will produce (kernel, case fields, modes, metric) and its start time; ``finish`` clears it.
- When the in-flight point is older than the timeout, the parent SIGKILLs the child's process
  group, appends ``timeout`` rows ("no result after N s (per-point timeout)") for the point's
  rows not yet in the results file, and restarts the child with ``--resume``: the finished
  points are skipped, the timed-out one too, and the sweep goes on. A child that dies
  abnormally (a segfault, an abort) with a point in flight is handled the same way, with
  ``error`` rows naming how it died.
- The parent exits with the final child's exit code, and 1 if any point timed out or crashed.
  Ctrl-C (or SIGTERM) in the parent is forwarded to the child, which saves and stops; the
  parent waits for it (SIGKILL after ``GRACE_S``), keeps the file and exits 130 (143).
  The child is also SIGKILLed by the kernel should the parent die (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

#: set in a supervised child: the path of its heartbeat file
CHILD_ENV = "LATTNBENCH_HEARTBEAT"
#: how the child is started: the console script's entry point under the same interpreter
BOOT = "import sys; sys.argv[0] = 'lattnbench'; from lattnbench.supervise import child_main; child_main()"
#: set in a supervised child: the parent's pid (the child exits when it is gone)
PARENT_ENV = "LATTNBENCH_SUPERVISOR_PID"
#: after Ctrl-C / SIGTERM: how long the child may take to save and exit before SIGKILL
GRACE_S = 15.0
#: exit codes of a child that ended on its own terms (ok, failures, usage, interrupted)
CLEAN_EXITS = (0, 1, 2, 130)

POINT_TIMEOUT = Annotated[str, typer.Option(
    "--point-timeout", metavar="SECONDS",
    help="Give up on a point (a hung kernel) after this many seconds: it is recorded as 'timeout' and "
    "the sweep goes on in a restarted worker process. 0 = off (run in-process).")]


# ---- options ---------------------------------------------------------------------------------

def parse_timeout(text: str | float | None) -> float:
    """``--point-timeout`` → seconds (0 = off); a one-line usage error (exit 2) otherwise."""
    from lattnbench.commands.common import die

    if text is None:
        return 0.0
    try:
        value = float(text)
    except (TypeError, ValueError):
        die(f"bad --point-timeout {text!r}: give seconds, e.g. 600 (0 = off)")
    if not math.isfinite(value) or value < 0:
        die(f"bad --point-timeout {text!r}: give a finite number of seconds >= 0 (0 = off)")
    return value


def is_child() -> bool:
    return bool(os.environ.get(CHILD_ENV))


# ---- child side ------------------------------------------------------------------------------

def _write_json(path: str | Path, obj: dict) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)  # atomic: the parent never reads half a heartbeat


def heartbeat(entry=None, case=None, device: str | None = None, modes=(), metric: str | None = None,
              tensors=None, **extra) -> None:
    """In a supervised child: record the point about to run; with no entry, that none is in flight.

    The heartbeat holds the rows the point will produce (``base_row`` for each mode, times each
    tensor for ``err_ratio``), so the parent can record them as ``timeout`` without knowing what
    kind of measurement it was. Outside a supervised child this does nothing (one env lookup).
    """
    path = os.environ.get(CHILD_ENV)
    if not path:
        return
    rows: list[dict] = []
    label = None
    if entry is not None:
        from lattnbench.measure import base_row

        label = f"{entry.name} {case.label()}"
        for mode in modes:
            base = {**base_row(entry, case, device, mode, metric), **extra}
            rows.extend([{**base, "tensor": t} for t in tensors] if tensors else [base])
    try:
        _write_json(path, {"pid": os.getpid(), "start": time.time(), "label": label, "rows": rows})
    except OSError:
        pass  # the parent then sees an older heartbeat; a missing one must not fail a point


def heartbeat_check(entry, case, device: str) -> None:
    """Heartbeat for one check-grad point (its err_ratio rows, one per tensor, with tol)."""
    if not os.environ.get(CHILD_ENV):
        return
    from lattnbench.tolerance import TOLERANCE
    from lattnbench.verify import expected_tensors

    heartbeat(entry, case, device, ["fwdbwd"], "err_ratio", tensors=expected_tensors(entry, case),
              tol=TOLERANCE[case.dtype])


# ---- parent side -----------------------------------------------------------------------------

def supervise(out_path: str | Path, timeout_s: float, out_arg: str | Path | None = None) -> None:
    """Run the current command under a per-point timeout, then exit; a no-op when off or in a child.

    ``out_path`` is the results file the parent appends ``timeout`` rows to; ``out_arg`` the
    ``--out`` value the child gets (default ``out_path``; ``run`` passes its directory).
    """
    if not timeout_s or timeout_s <= 0 or is_child():
        return
    opts, args = child_argv(out_arg if out_arg is not None else out_path)
    code = Supervisor(Path(out_path), float(timeout_s), opts, args).run()
    raise typer.Exit(code)


def child_argv(out_arg: str | Path) -> tuple[list[str], list[str]]:
    """The current command line rebuilt from click's parsed parameters: (command + options, arguments).

    Rebuilt rather than copied from ``sys.argv`` so that it also works in-process (CliRunner,
    ``app([...])``); ``--out`` is replaced by the path the parent decided.
    """
    ctx = _current_context()
    opts: list[str] = [ctx.info_name]
    args: list[str] = []
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        kind = getattr(p, "param_type_name", "")
        if kind == "argument":
            values = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
            args.extend(str(v) for v in values)
            continue
        if kind != "option" or p.name == "out" or value is None:
            continue
        longest = max(p.opts, key=len)
        if getattr(p, "is_flag", False) and getattr(p, "is_bool_flag", True):
            if p.secondary_opts:
                opts.append(longest if value else max(p.secondary_opts, key=len))
            elif value:
                opts.append(longest)
        elif getattr(p, "multiple", False) or isinstance(value, (list, tuple)):
            opts.extend(f"{longest}={v}" for v in value)
        else:
            opts.append(f"{longest}={value}")
    opts.append(f"--out={out_arg}")
    return opts, args


def _current_context():
    """The running command's click context (Typer >= 0.25 vendors click as ``typer._click``)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # an older Typer on the real click
        from click import get_current_context
    try:
        return get_current_context()
    except RuntimeError:
        from click import get_current_context as click_context

        return click_context()


def die_with_parent() -> None:
    """In a child: be SIGKILLed when the supervising parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - then the child merely outlives a killed parent
            pass
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit() and os.getppid() != int(parent):
        sys.exit(130)  # the parent died before the death signal was armed


def child_main() -> None:
    """Entry point of a supervised child: die with the parent, then the normal CLI."""
    die_with_parent()
    from lattnbench.cli import main

    main()


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


class _Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Supervisor:
    """Runs one child at a time over the sweep; restarts it with --resume after a timeout."""

    def __init__(self, out_path: Path, timeout_s: float, opts: list[str], args: list[str]) -> None:
        self.out_path, self.timeout_s = out_path, timeout_s
        self.opts, self.args = opts, args
        self.poll_s = min(1.0, max(0.05, timeout_s / 20))
        self.proc: subprocess.Popen | None = None

    # -- the child ---------------------------------------------------------------------------
    def _env(self, heartbeat_path: Path) -> dict[str, str]:
        env = dict(os.environ)
        env[CHILD_ENV] = str(heartbeat_path)
        env[PARENT_ENV] = str(os.getpid())
        # the child must import what this process imports (plugins on a path added at run time)
        prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        extra = [p for p in sys.path if p and os.path.isdir(p)
                 and not any(os.path.realpath(p).startswith(x) for x in prefixes)]
        paths = [*extra, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def _start(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", BOOT, *argv], env=env, start_new_session=True)

    def _kill(self, sig: int = signal.SIGKILL) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            beat = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return beat if isinstance(beat, dict) and isinstance(beat.get("rows"), list) else None

    def _watch(self, heartbeat_path: Path) -> tuple[str, dict | None]:
        """Wait for the child: ('exit', last heartbeat) or ('timeout', the in-flight heartbeat)."""
        assert self.proc is not None
        while True:
            try:
                self.proc.wait(timeout=self.poll_s)
                return "exit", self._read(heartbeat_path)
            except subprocess.TimeoutExpired:
                pass
            beat = self._read(heartbeat_path)
            if beat and beat["rows"] and time.time() - float(beat.get("start", time.time())) > self.timeout_s:
                return "timeout", beat

    # -- the results file --------------------------------------------------------------------
    def _record(self, beat: dict, status: str, reason: str) -> int:
        """Append ``status`` rows for the heartbeat's rows not yet in the file; how many."""
        from lattnbench.results import ResultsError, ResultsWriter, load, row_key

        try:
            old = load(self.out_path) if self.out_path.exists() else None
            if old is None:
                writer = ResultsWriter(self.out_path, self.out_path.stem, {})
            else:
                writer = ResultsWriter(self.out_path, old["suite"], old["env"], old["ceilings"], resume=True)
                for key, value in old.items():  # keep what the command added (e.g. run's reference)
                    writer.doc.setdefault(key, value)
            done = writer.done_keys()
            new = [{**r, "status": status, "reason": reason} for r in beat["rows"] if row_key(r) not in done]
            if new:
                writer.add(new)
        except ResultsError as exc:
            from lattnbench.commands.common import err

            err.print(f"[bold red]error:[/] cannot record the {status}: {exc}", highlight=False, soft_wrap=True)
            return 0
        return len(new)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        from lattnbench.commands.common import err

        workdir = Path(tempfile.mkdtemp(prefix="lattnbench-supervise-"))
        heartbeat_path = workdir / "heartbeat.json"
        env = self._env(heartbeat_path)
        opts = list(self.opts)
        trouble = 0
        old_term = signal.getsignal(signal.SIGTERM)

        def on_term(signum, _frame):
            raise _Signalled(signum)

        signal.signal(signal.SIGTERM, on_term)
        try:
            while True:
                heartbeat_path.unlink(missing_ok=True)
                self.proc = self._start([*opts, "--", *self.args] if self.args else [*opts], env)
                outcome, beat = self._watch(heartbeat_path)
                label = (beat or {}).get("label") or "the point in flight"
                if outcome == "timeout":
                    self._kill(signal.SIGKILL)
                    self.proc.wait()
                    added = self._record(beat, "timeout",
                                         f"no result after {self.timeout_s:g} s (per-point timeout)")
                    what = f"timeout: {label} gave no result after {self.timeout_s:g} s"
                else:
                    rc = self.proc.returncode
                    in_flight = bool(beat and beat["rows"])
                    if rc in CLEAN_EXITS and (rc in (0, 2, 130) or not in_flight):
                        return 1 if trouble and rc == 0 else rc
                    if not in_flight:
                        err.print(f"[bold red]error:[/] the worker process died ({_describe(rc)}) "
                                  "outside any point", highlight=False, soft_wrap=True)
                        return 1
                    added = self._record(beat, "error", f"the process died ({_describe(rc)}) while "
                                         "running this point")
                    what = f"crash: the worker died ({_describe(rc)}) running {label}"
                trouble += 1
                if not added:
                    err.print(f"[bold red]error:[/] {what}, and no new row could be recorded; stopping",
                              highlight=False, soft_wrap=True)
                    return 1
                err.print(f"[yellow]{what}; recorded, restarting with --resume[/]", highlight=False, soft_wrap=True)
                if "--resume" not in opts:
                    opts.append("--resume")
        except (KeyboardInterrupt, _Signalled) as exc:
            signum = exc.signum if isinstance(exc, _Signalled) else signal.SIGINT
            self._stop(signum)
            err.print("[yellow]interrupted: every finished point is saved; --resume continues[/]", soft_wrap=True)
            return 128 + signum
        finally:
            self._kill(signal.SIGKILL)
            signal.signal(signal.SIGTERM, old_term)
            shutil.rmtree(workdir, ignore_errors=True)

    def _stop(self, signum: int) -> None:
        """Forward the interrupt, give the child GRACE_S to save and exit, then SIGKILL it."""
        if self.proc is None:
            return
        self._kill(signum)
        try:
            self.proc.wait(timeout=GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt, _Signalled):
            self._kill(signal.SIGKILL)
            self.proc.wait()
