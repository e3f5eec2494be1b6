"""The ``lattnbench.static/1`` results file: an env block and one flat row per metric.

A row: ``{"kernel", "config", "shape", "mode", "metric", "value", "compiler": {...}}``. Triton
rows carry ``compiler = {"triton": version}``, JAX rows ``{"jax": ..., "jaxlib": ...}``: the
compiler is part of what a number means, so the gate compares a row only with a baseline row of
the same compiler (``row_key`` leaves it out, ``compiler_key`` gives it).
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from lattnbench.results import read_text

SCHEMA = "lattnbench.static/1"


class StaticError(ValueError):
    """A file that is missing or not a static results file: one line, exit 2."""


def row_key(row: dict) -> tuple:
    """What a row measures, compiler aside: (kernel, config, shape, mode, metric)."""
    return (row["kernel"], row.get("config") or "", row.get("shape") or "", row.get("mode") or "", row["metric"])


def compiler_key(row: dict) -> tuple:
    """The compiler versions a row came from, as a sorted tuple of (name, version)."""
    return tuple(sorted((row.get("compiler") or {}).items()))


def document(rows: list[dict], env: dict) -> dict:
    """The file's content."""
    return {"schema": SCHEMA, "env": env, "rows": sorted(rows, key=row_key)}


def write(doc: dict, path: str | Path) -> None:
    """Write atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def load(path: str | Path) -> dict:
    """A static results document (plain or gzip-compressed JSON), or StaticError naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise StaticError(f"{path}: no such file")
    try:
        doc = json.loads(read_text(path))  # plain or gzip-compressed JSON
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise StaticError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise StaticError(f"{path}: not a lattnbench static file (schema {found!r}, want {SCHEMA!r})")
    if not isinstance(doc.get("rows"), list):
        raise StaticError(f"{path}: no rows")
    return doc
