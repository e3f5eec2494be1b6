"""Two or more runs side by side, for people: per point and mode, each run's time, its ratio to the
first run's, and whether that is faster, slower or within noise.

``gate`` is CI's verdict (ratios to a same-run reference, a threshold, an exit status);
``compare`` shows the times as they are, so it suits runs of one machine (before and after a
change) or of two machines. Noise is judged from what each row holds: with two or more runs
(``--repeat``) the range of the run medians, else the p20-p80 range of the samples. Two ranges
that overlap are within noise; the first run's row is the baseline of every other.
Nothing here imports torch or jax.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from lattnbench.results import row_key
from lattnbench.views.rows import MODE_ORDER, ReportError, is_speed, run_medians, shape_key, shape_label, \
    timer_median, timer_range

FASTER, SLOWER, NOISE = "faster", "slower", "~"
#: what a verdict cell says, in the legend
VERDICT_NOTE = (f"{FASTER} / {SLOWER}: the ranges do not overlap; {NOISE}: within noise (they overlap); "
                "range: the run medians' with several runs, else p20-p80")


@dataclass
class Line:
    """One point and mode across the runs (``--json`` gives these as they are)."""

    kernel: str
    shape: str
    n: int
    mode: str
    times: list[float | None]
    ratios: list[float | None] = field(default_factory=list)
    verdicts: list[str | None] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    key: dict = field(default_factory=dict)
    #: kernel name -> its ms per call in each run, where two or more runs profiled the point (--breakdown)
    kernels: dict[str, list[float | None]] = field(default_factory=dict)


def noise_range(row: dict | None, timer: str) -> tuple[float, float] | None:
    """The range a re-run would plausibly land in: the run medians' span with >= 2 runs, else p20-p80."""
    meds = list(run_medians(row, timer).values())
    if len(meds) >= 2:
        return min(meds), max(meds)
    return timer_range(row, timer)


def verdict(base: dict | None, other: dict | None, timer: str) -> str | None:
    """faster, slower or ~ for ``other`` against ``base``; None when either has no time."""
    a, b = timer_median(base, timer), timer_median(other, timer)
    if a is None or b is None:
        return None
    ra, rb = noise_range(base, timer), noise_range(other, timer)
    if ra is None or rb is None:  # no spread recorded: nothing tells a change from noise
        return NOISE
    if rb[1] < ra[0]:
        return FASTER
    if rb[0] > ra[1]:
        return SLOWER
    return NOISE


def kernel_times(rows: Sequence[dict | None]) -> dict[str, list[float | None]]:
    """Each kernel's ms per call in each run's breakdown (None where a run has no such kernel), in
    the order of the first breakdown that names it; empty unless two or more runs have one."""
    kernels = [{k["name"]: k["ms"] for k in (r.get("breakdown") or {}).get("kernels") or []} if r else {}
               for r in rows]
    if sum(bool(k) for k in kernels) < 2:
        return {}
    names = list(dict.fromkeys(name for k in kernels for name in k))
    return {name: [k.get(name) if k else None for k in kernels] for name in names}


def compare_runs(docs: Sequence[dict], timer: str = "device") -> list[Line]:
    """A line per speed point and mode present in at least two of ``docs``, the first as the baseline."""
    if len(docs) < 2:
        raise ReportError("compare needs two or more results files")
    tables = [{row_key(r): r for r in d["rows"] if is_speed(r)} for d in docs]
    keys: dict[tuple, dict] = {}
    for t in tables:
        for k, r in t.items():
            keys.setdefault(k, r)
    lines = []
    for k, r in keys.items():
        rows = [t.get(k) for t in tables]
        if sum(x is not None for x in rows) < 2:
            continue
        times = [timer_median(x, timer) for x in rows]
        base = rows[0]
        ratios = [None if times[0] is None or t is None or not times[0] else t / times[0] for t in times[1:]]
        line = Line(r["kernel"], f"{shape_label(r)} · {r.get('device')}", int(r["seqlen"]), str(r["mode"]), times,
                    ratios, [verdict(base, x, timer) for x in rows[1:]],
                    ["missing" if x is None else str(x.get("status")) for x in rows],
                    {f: r.get(f) for f in ("kernel", "seqlen", "mode", "dtype", "batch", "heads", "dim_qk", "device")},
                    kernel_times(rows))
        lines.append((r, line))
    if not lines:
        raise ReportError("the files share no timed point: nothing to compare")
    lines.sort(key=lambda rl: (MODE_ORDER.index(rl[1].mode) if rl[1].mode in MODE_ORDER else 9, shape_key(rl[0]),
                               rl[1].kernel, rl[1].n))
    return [line for _, line in lines]


def to_json(lines: Sequence[Line], files: Sequence[str], timer: str) -> str:
    counts: dict[str, int] = {}
    for line in lines:
        for v in line.verdicts:
            if v is not None:
                counts[v] = counts.get(v, 0) + 1
    doc = {"files": list(files), "baseline": files[0], "timer": timer, "method": VERDICT_NOTE,
           "counts": dict(sorted(counts.items())), "points": [asdict(x) for x in lines]}
    return json.dumps(doc, indent=1, allow_nan=False)
