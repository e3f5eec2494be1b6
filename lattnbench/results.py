"""The results file: schema ``lattnbench.results/1``, written as a sweep goes, read back safely.

One JSON document per run: ``{"schema", "suite", "env", "ceilings", "rows": [...]}`` with flat
rows (see docs/methodology.md). A speed row measured in several runs (``--repeat``) holds each
run in ``runs`` and reports the median of the run medians. The writer rewrites the file atomically after every point,
so a run killed at any moment (even SIGKILL) leaves a complete, readable file of what
finished. No framework imports here: report, plot and gate read results without torch or jax.

Large committed files are stored gzip-compressed as ``X.json.gz``: ``load`` reads gzip by its magic
bytes under any name, and a ``X.json`` that does not exist is read from ``X.json.gz`` beside it.
Views name a file by ``display_name`` (``X.json`` for both), so a table made of the compressed
file is byte for byte the table made of the plain one.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lattnbench.spec import DEFAULT_G_DTYPE, DEFAULT_GATE_NORM

SCHEMA = "lattnbench.results/1"
STATUSES = ("ok", "fail", "oom", "unsupported", "unavailable", "error", "timeout")
METRICS = ("time_ms", "peak_mb", "err_ratio")
REQUIRED = ("kernel", "family", "framework", "device", "batch", "seqlen", "heads", "kv_heads",
            "dim_qk", "dim_v", "dtype", "mode", "metric", "status")
#: the fields that identify a point (a row without its measured values)
KEY_FIELDS = ("kernel", "device", "batch", "seqlen", "heads", "kv_heads", "dim_qk", "dim_v",
              "dtype", "mode", "metric", "tensor", "varlen", "initial_state", "reverse", "decay", "exec", "check",
              "input_scale", "world_size", "gate_norm", "g_dtype")
#: a key field a row may lack, and the value that means (rows written before the field existed)
KEY_DEFAULTS = {"world_size": 1}
#: key fields only rows of a gated family carry, and their value in rows written before them
GATE_DEFAULTS = {"gate_norm": DEFAULT_GATE_NORM, "g_dtype": DEFAULT_G_DTYPE}


#: the timers a speed row carries (lattnbench.measure.timing); ``device`` is the tables' one
TIMERS = ("device", "graph", "latency", "host")
#: a point is host-bound when device or latency exceeds this multiple of graph
HOST_BOUND = 1.5


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of ``xs`` (``q`` in 0..1)."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class ResultsError(ValueError):
    """A results file that cannot be read or written: one line naming the file and the problem."""


def key_value(row: dict, field: str) -> Any:
    """A key field of a row, with the value a row written before the field existed means."""
    if field in row:
        value = row[field]
        return float(value) if field == "gate_norm" and isinstance(value, (int, float)) else value
    if field in GATE_DEFAULTS:
        from lattnbench.operators import is_gated

        return GATE_DEFAULTS[field] if is_gated(row.get("family")) else None
    return KEY_DEFAULTS.get(field)


def row_key(row: dict) -> tuple:
    """Hashable identity of a point, for --resume, gate and de-duplication."""
    return tuple(json.dumps(key_value(row, f), sort_keys=True) for f in KEY_FIELDS)


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: store them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _restore(value: Any) -> Any:
    return float(value) if value in ("nan", "inf", "-inf") else value


#: what a resumed call records of its own env
RESUMED_FIELDS = ("time", "host", "commit", "gpu", "gpu_uuid", "driver", "knobs")


class ResultsWriter:
    """Accumulates rows and rewrites the whole file atomically after each ``add``."""

    def __init__(self, path: str | Path, suite: str, env: dict, ceilings: dict | None = None,
                 resume: bool = False) -> None:
        self.path = Path(path)
        self.doc: dict[str, Any] = {"schema": SCHEMA, "suite": suite, "env": env,
                                    "ceilings": ceilings or {}, "rows": []}
        if resume and self.path.exists():
            old = load(self.path)
            for key, value in old.items():  # keep what the first run recorded (reference, ...)
                if key not in ("schema", "env", "rows", "ceilings"):
                    self.doc.setdefault(key, value)
            # The env block stays the first call's; each resumed call adds where and when it ran,
            # so rows measured on another machine of the same kind remain visible as such.
            self.doc["env"] = old.get("env") or env
            self.doc["resumed"] = [*old.get("resumed", []), {k: env.get(k) for k in RESUMED_FIELDS}]
            self.doc["rows"] = [{k: _clean(v) for k, v in r.items()} for r in old["rows"]]
            self.doc["ceilings"] = self.doc["ceilings"] or old.get("ceilings", {})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsError(f"cannot create {self.path.parent}: {exc.strerror}") from None
        self._flush()

    @property
    def rows(self) -> list[dict]:
        return self.doc["rows"]

    def done_keys(self) -> set[tuple]:
        return {row_key(r) for r in self.rows}

    def set_ceilings(self, ceilings: dict) -> None:
        self.doc["ceilings"] = ceilings
        self._flush()

    def done_runs(self) -> dict[tuple, set[int]]:
        """For each point, the runs already measured (a row without ``runs`` counts as run 0)."""
        return {row_key(r): {int(x.get("run", 0)) for x in r.get("runs") or [{"run": 0}]} for r in self.rows}

    def add(self, rows: dict | Iterable[dict]) -> None:
        """Append rows; a speed row of a point already in the file is merged in as another run."""
        new = [rows] if isinstance(rows, dict) else list(rows)
        index = {row_key(r): i for i, r in enumerate(self.doc["rows"])}
        for r in new:
            r = {k: _clean(v) for k, v in r.items()}
            i = index.get(row_key(r))
            if i is not None and r.get("metric") == "time_ms" and "runs" in r:
                self.doc["rows"][i] = merge_runs(self.doc["rows"][i], r)
            else:
                index[row_key(r)] = len(self.doc["rows"])
                self.doc["rows"].append(r)
        self._flush()

    def save(self) -> None:
        """Rewrite the file now (after a change to ``doc`` outside ``add``)."""
        self._flush()

    def _flush(self) -> None:
        try:
            fd, tmp = tempfile.mkstemp(prefix=".lattnbench-", suffix=".json", dir=self.path.parent)
            os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
            with os.fdopen(fd, "w") as f:
                json.dump(self.doc, f, indent=1)
                f.write("\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            raise ResultsError(f"cannot write {self.path}: {exc.strerror}") from None


def merge_runs(old: dict, new: dict) -> dict:
    """One speed row from two measurements of a point (``--repeat``): every run kept in ``runs``.

    median: the median of the run medians; p20/p80 and samples_ms: the pooled device samples;
    run_spread: (max - min) / median of the run medians; the status: ok only when every run is.
    """
    import statistics

    runs = sorted([*(old.get("runs") or [{"run": 0, **{k: old.get(k) for k in ("status", "median", "p20", "p80")}}]),
                   *new["runs"]], key=lambda x: x.get("run", 0))
    good = [x for x in runs if x.get("status") == "ok" and isinstance(x.get("median"), (int, float))]
    bad = [x for x in runs if x.get("status") != "ok"]
    base = new if new.get("status") == "ok" or old.get("status") != "ok" else old
    row = {**base, "runs": runs, "repeat": len(runs)}
    if bad:
        row["status"], row["reason"] = bad[0].get("status", "error"), f"run {bad[0].get('run', 0)}: {bad[0].get('reason')}"
    if not good:
        return row
    meds = [x["median"] for x in good]
    pooled = [*(old.get("samples_ms") or []), *(new.get("samples_ms") or [])]
    row["median"] = statistics.median(meds)
    if pooled:
        row["p20"], row["p80"] = quantile(pooled, 0.2), quantile(pooled, 0.8)
        row["samples_ms"], row["samples"] = pooled, len(pooled)
    for k in ("graph_ms", "latency_ms", "host_ms"):
        vals = [x[k] for x in good if isinstance(x.get(k), (int, float))]
        row[k] = statistics.median(vals) if vals else None
    row["run_spread"] = (max(meds) - min(meds)) / row["median"] if row["median"] else 0.0
    slow = [v for v in (row["median"], row.get("latency_ms")) if isinstance(v, (int, float))]
    row["host_bound"] = None if row.get("graph_ms") is None else any(v > HOST_BOUND * row["graph_ms"] for v in slow)
    hot = [x.get("throttled") for x in good if x.get("throttled") is not None]
    row["throttled"] = any(hot) if hot else None
    if "floor_ms" in row and row["median"]:
        row["pct_floor"] = 100.0 * row["floor_ms"] / row["median"]
    return row


#: the first bytes of a gzip stream
GZIP_MAGIC = b"\x1f\x8b"


def display_name(path: str | Path) -> str:
    """The name of the JSON document a results file holds: ``X.json`` for ``X.json`` and ``X.json.gz``."""
    name = Path(path).name
    return name[:-3] if name.endswith(".json.gz") else name


def results_stem(path: str | Path) -> str:
    """``X`` of ``X.json`` and of ``X.json.gz`` (block names, plot names, the default suite)."""
    return Path(display_name(path)).stem


def resolve(path: str | Path) -> Path:
    """``path``, or ``path.gz`` where ``path`` is a missing ``X.json`` stored gzip-compressed."""
    path = Path(path)
    if path.suffix == ".json" and not path.exists():
        packed = path.with_name(path.name + ".gz")
        if packed.is_file():
            return packed
    return path


def read_text(path: str | Path) -> str:
    """The text of a JSON file, plain or gzip-compressed (told apart by the gzip magic bytes);
    OSError, EOFError or zlib.error (as gzip raises them) on a corrupt stream, UnicodeDecodeError."""
    data = Path(path).read_bytes()
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    return data.decode("utf-8")


def load(path: str | Path) -> dict:
    """Read and validate a results file (plain JSON or gzip-compressed JSON, see ``resolve``);
    ResultsError with one line on anything wrong."""
    path = resolve(path)
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(f"{path}: not a lattnbench results file (schema {found!r}, want {SCHEMA!r})")
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ResultsError(f"{path}: 'rows' must be a list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsError(f"{path}: row {i} is not an object")
        missing = [f for f in REQUIRED if f not in row]
        if missing:
            raise ResultsError(f"{path}: row {i} lacks {', '.join(missing)}")
        for k in ("median", "p20", "p80", "err", "tol"):
            if k in row:
                row[k] = _restore(row[k])
    doc.setdefault("env", {})
    doc.setdefault("ceilings", {})
    doc.setdefault("suite", results_stem(path))
    return doc


def to_frame(doc_or_rows: dict | list[dict]):
    """Rows as a pandas DataFrame (pandas imported lazily)."""
    import pandas as pd

    rows = doc_or_rows["rows"] if isinstance(doc_or_rows, dict) else doc_or_rows
    return pd.DataFrame(rows)


def write_csv(doc: dict, path: str | Path) -> None:
    """The CSV view of a results document (one line per row): the samples and the per-kernel
    breakdown stay in the JSON (a list in one cell helps no spreadsheet)."""
    frame = to_frame(doc)
    frame = frame.drop(columns=[c for c in ("samples_ms", "breakdown") if c in frame.columns])
    frame.to_csv(path, index=False)
