"""The command line that reproduces a measuring run, and the interrupted run ``--resume`` continues.

A run records the options it was given (``invocation``) and its ``state`` (running, interrupted,
finished) in its results file. After Ctrl-C the user is shown the exact command that continues
it; ``--resume`` without ``--out`` looks for the newest unfinished file of the same command and
options, because default file names carry the start time and nobody should have to copy one.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

#: results-file ``state`` values: a file left ``running`` was killed without a chance to say so
RUNNING, INTERRUPTED, FINISHED = "running", "interrupted", "finished"
UNFINISHED = (RUNNING, INTERRUPTED)


def cli_args(options: Sequence[tuple[str, object]]) -> list[str]:
    """``[(flag, value), ...]`` as argv: None and False are left out, True is a bare flag, lists
    are comma-joined (the sweep options accept comma lists)."""
    args: list[str] = []
    for flag, value in options:
        if value is None or value is False or value == [] or value == ():
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def resume_command(command: str, args: Sequence[str], out: Path | None) -> str:
    """The shell line that continues a run: the same options, its output, ``--resume``."""
    tail = ["--out", str(out)] if out is not None else []
    return shlex.join(["lattnbench", command, *args, *tail, "--resume"])


def _read_head(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def unfinished_runs(folder: Path, command: str) -> list[tuple[Path, dict]]:
    """The unfinished results files of ``command`` in ``folder``, newest first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob(f"{command}-*.json"):
        doc = _read_head(path)
        inv = (doc or {}).get("invocation")
        if doc is not None and doc.get("state") in UNFINISHED and isinstance(inv, dict) \
                and inv.get("command") == command:
            found.append((path.stat().st_mtime, path, inv))
    return [(p, inv) for _, p, inv in sorted(found, key=lambda t: (t[0], str(t[1])), reverse=True)]


class NoRunToResume(LookupError):
    """``--resume`` without ``--out`` and no unfinished run of the same options: one line, exit 2."""


def find_resumable(folder: Path, command: str, args: Sequence[str]) -> Path:
    """The newest unfinished run of ``command`` with exactly ``args``; NoRunToResume says which
    unfinished runs there are when none matches."""
    runs = unfinished_runs(folder, command)
    for path, inv in runs:
        if list(inv.get("args") or []) == list(args):
            return path
    if not runs:
        raise NoRunToResume(f"--resume: no interrupted `{command}` run in {folder}; give --out FILE")
    path, inv = runs[0]
    raise NoRunToResume(f"--resume: no interrupted `{command}` run with these options in {folder}; the newest "
                        f"is {path} ({resume_command(command, inv.get('args') or [], path)})")
