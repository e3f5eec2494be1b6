"""Compare a run against a baseline and say whether it regressed (CI's exit code).

Speed is judged by the ratio kernel_time / reference_time measured in the *same* run, so a
slower CI machine, a different clock or a busy neighbour cancels out; the reference defaults
to the first softmax kernel timed in both files (softmax/sdpa-flash when present).

Significance rule (why: a 10% threshold alone flags noise on short kernels, and samples
alone flag 0.3% shifts on long ones). For a point timed in both runs, with
``change = (k_cur/r_cur) / (k_base/r_base) - 1`` from the medians (a point measured in several
``--repeat`` runs has the median of its run medians as its median), an interval of the change
is formed by the first that applies of the rules below, and the change is significant when the
interval lies wholly beyond the threshold (above it for a regression, below its mirror image
for an improvement), not merely away from 0: an interval reaching back inside the threshold is
what unchanged code gives on a busy machine.

* runs: if in both files the kernel and the reference each carry >= 2 ok runs at this point,
  and at least 2 run indices are common to the two in each file, the per-run ratios
  ``k_run_i / r_run_i`` are formed by run index (the two were measured in the same pass, so a
  pass's machine state cancels); the interval is the change from the baseline's range of
  ratios to the current one's (``cur_min/base_max - 1 .. cur_max/base_min - 1``). Runs, not
  samples, are the unit here because samples within one run share that run's state (clocks,
  placement, neighbours) and understate how much a re-run moves;
* if all four rows carry ``samples_ms`` (>= 5 finite each), a percentile bootstrap: each of
  the four sample sets is resampled independently (they are unpaired measurements), the
  median of each replicate taken, and the 95% interval of ``log(change + 1)`` formed from
  1000 replicates (seeded from the point's key, so the verdict is reproducible);
* otherwise, if p20/p80 are present, the interval runs between the ratios' p20–p80 ranges
  (k.p20/r.p80 .. k.p80/r.p20) of the two runs;
* otherwise (no spread recorded) the threshold alone decides.

The default threshold is the baseline's recorded one (a suite's ``threshold``), else 10% for
GPU runs and CPU_THRESHOLD for CPU runs: on a CPU shared with other work, a re-run of unchanged
code moves a kernel's ratio to the reference by tens of percent.

Verdicts: ``REGRESSION`` change > threshold and significant; ``~`` change > threshold but not
significant (reported, not failing); ``faster`` the mirror image for improvements; ``FAIL``
an err_ratio row with status fail, a NaN/Inf, or a value above its tol (always, baseline or
not); ``LOST`` a point ok in the baseline and now missing or not ok (fail, error, oom,
timeout, unsupported, unavailable: a runner that lost a package must be re-baselined on
purpose). REGRESSION, FAIL and LOST fail the gate. Peak memory is gated only by LOST;
interpreted (Triton-on-CPU) timings only by LOST.
"""
from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from lattnbench.views.rows import agreement_passes, is_speed, pick_reference, shape_label
from lattnbench.results import GATE_DEFAULTS, KEY_FIELDS, row_key

BOOTSTRAP = 1000
CONFIDENCE = 0.95
MIN_SAMPLES = 5
#: runs of the kernel and of the reference, paired by run index, that the runs rule needs per file
MIN_RUNS = 2
FAILING = ("REGRESSION", "FAIL", "LOST")
#: default thresholds when the baseline records none: GPU runs, and CPU runs, whose ratios to the
#: reference move by up to 2.3x between re-runs of unchanged code on 2 shared cores (docs/methodology.md)
GPU_THRESHOLD = 0.10
CPU_THRESHOLD = 1.00
METHOD = (f"a change counts when its interval lies wholly beyond the threshold: per-run kernel/reference "
          f"ratios (>= {MIN_RUNS} runs in both files, the ratio ranges' extremes); else a percentile bootstrap "
          f"({BOOTSTRAP} replicates, {CONFIDENCE:.0%} interval) on medians of samples_ms; else the p20-p80 "
          "ratio ranges; else the threshold alone")
#: the name each significance rule goes by in a point's ``method``
METHODS = ("runs", "bootstrap", "p20-p80", "threshold")


class GateError(ValueError):
    """Bad input to the gate (threshold, reference): one line, exit 2."""


@dataclass
class Point:
    """One line of the verdict table (and of ``--json``)."""

    kernel: str
    case: str
    n: int
    mode: str
    metric: str
    baseline: float | str | None
    current: float | str | None
    change: float | None = None
    interval: tuple[float, float] | None = None
    significant: bool | None = None
    method: str | None = None
    verdict: str = "ok"
    reason: str = ""
    key: dict = field(default_factory=dict)


def parse_threshold(text: str) -> float:
    """``10%`` or ``0.1`` -> 0.1; negative, non-numeric or a bare ``10`` is an error."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise GateError(f"bad threshold {text!r}: write a percentage like 10% or a fraction like 0.1") from None
    if not math.isfinite(v) or v < 0:
        raise GateError(f"bad threshold {text!r}: it must be a non-negative percentage like 10%")
    if not t.endswith("%") and v >= 1:
        raise GateError(f"ambiguous threshold {text!r}: write {t}% for a percentage (0.1 = 10%)")
    return v


def default_threshold(rows: Sequence[dict]) -> tuple[float, str]:
    """The threshold for a baseline that records none, and what it is called: CPU_THRESHOLD when
    every timed row ran on a CPU, else GPU_THRESHOLD."""
    devices = {r.get("device") for r in rows if is_speed(r)}
    if devices == {"cpu"}:
        return CPU_THRESHOLD, "the default for CPU runs"
    return GPU_THRESHOLD, "the default"


_GATE_FIELDS = {KEY_FIELDS.index(f) for f in GATE_DEFAULTS}


def _point_key(row: dict, gates: bool = True) -> tuple:
    """Every identity field but the kernel; without ``gates``, the gate distribution as a row of
    an ungated family has it (none), so a GLA row finds a Lightning or softmax reference."""
    key = row_key(row)
    return tuple("null" if (not gates and i in _GATE_FIELDS) else v for i, v in enumerate(key) if i)


def _ref_of(refs: dict, row: dict | None):
    """The reference row measured at ``row``'s point: with the same inputs, else at the same shape."""
    if row is None:
        return None
    return refs.get(_point_key(row)) or refs.get(_point_key(row, gates=False))


def _samples(row: dict):
    import numpy as np

    s = row.get("samples_ms")
    if not isinstance(s, list):
        return None
    a = np.array([x for x in s if isinstance(x, (int, float))], dtype=float)
    a = a[np.isfinite(a) & (a > 0)]
    return a if a.size >= MIN_SAMPLES else None


def run_ratios(kernel: dict, reference: dict) -> list[float] | None:
    """kernel/reference device medians of the runs both measured (paired by run index), or None
    when fewer than MIN_RUNS pairs exist."""
    from lattnbench.views.rows import run_medians

    k, r = run_medians(kernel), run_medians(reference)
    pairs = sorted(set(k) & set(r))
    if len(pairs) < MIN_RUNS:
        return None
    ratios = [k[i] / r[i] for i in pairs if k[i] > 0 and r[i] > 0]
    return ratios if len(ratios) >= MIN_RUNS else None


def significance(k_cur: dict, r_cur: dict, k_base: dict, r_base: dict,
                 seed: int, threshold: float = 0.0) -> tuple[tuple[float, float] | None, bool, str]:
    """(interval of the change, beyond the threshold?, rule used) by the rule in the module docstring.

    The change counts when its whole interval lies beyond ``threshold`` on either side, not
    merely away from 0: samples of one run share that run's machine state, so an interval from
    them is narrower than what a re-run moves, and a change just past the threshold with an
    interval reaching back inside it is what unchanged code does on a busy machine.
    """
    import numpy as np

    up, down = math.log1p(threshold), -math.log1p(threshold)
    cur_runs, base_runs = run_ratios(k_cur, r_cur), run_ratios(k_base, r_base)
    if cur_runs is not None and base_runs is not None:
        cur_lo, cur_hi, base_lo, base_hi = min(cur_runs), max(cur_runs), min(base_runs), max(base_runs)
        lo, hi = cur_lo / base_hi - 1, cur_hi / base_lo - 1
        return (lo, hi), bool(math.log1p(lo) > up or math.log1p(hi) < down), "runs"
    sets = [_samples(r) for r in (k_cur, r_cur, k_base, r_base)]
    if all(s is not None for s in sets):
        rng = np.random.default_rng(seed)
        meds = [np.median(s[rng.integers(0, s.size, size=(BOOTSTRAP, s.size))], axis=1) for s in sets]
        log_change = np.log(meds[0]) - np.log(meds[1]) - np.log(meds[2]) + np.log(meds[3])
        tail = (1 - CONFIDENCE) / 2 * 100
        lo, hi = np.percentile(log_change, [tail, 100 - tail])
        return (math.expm1(lo), math.expm1(hi)), bool(lo > up or hi < down), "bootstrap"
    spreads = [(r.get("p20"), r.get("p80")) for r in (k_cur, r_cur, k_base, r_base)]
    if all(isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0
           for a, b in spreads):
        (kc20, kc80), (rc20, rc80), (kb20, kb80), (rb20, rb80) = spreads
        cur_lo, cur_hi = kc20 / rc80, kc80 / rc20
        base_lo, base_hi = kb20 / rb80, kb80 / rb20
        lo, hi = cur_lo / base_hi - 1, cur_hi / base_lo - 1
        return None, bool(math.log1p(lo) > up or math.log1p(hi) < down), "p20-p80"
    return None, True, "threshold"


def _order(row: dict) -> tuple:
    """Kernel, then metric, mode, shape and n ascending: the order a reader scans."""
    from lattnbench.views.rows import MODE_ORDER, TENSOR_ORDER, shape_key

    mode, tensor = row.get("mode"), row.get("tensor")
    return (row["kernel"], ("time_ms", "peak_mb", "err_ratio").index(row["metric"])
            if row["metric"] in ("time_ms", "peak_mb", "err_ratio") else 9,
            MODE_ORDER.index(mode) if mode in MODE_ORDER else 9, shape_key(row),
            row.get("seqlen") if isinstance(row.get("seqlen"), int) else 0,
            TENSOR_ORDER.index(tensor) if tensor in TENSOR_ORDER else 9, json.dumps(row_key(row)))


def _ratio(k: dict | None, r: dict | None) -> float | None:
    from lattnbench.views.rows import value

    kv, rv = value(k, "device"), value(r, "device")
    return kv / rv if kv is not None and rv else None


def _status(row: dict | None) -> str:
    return "missing" if row is None else str(row.get("status"))


def _err_value(row: dict | None) -> float | str | None:
    if row is None:
        return "missing"
    v = row.get("median", row.get("err"))
    return float(v) if isinstance(v, (int, float)) else _status(row)


def resolve_reference(current: Sequence[dict], baseline: Sequence[dict], requested: str | None) -> str | None:
    """The requested reference (timed in both files) or the default one timed in both."""
    cur = {r["kernel"] for r in current if is_speed(r)}
    base = {r["kernel"] for r in baseline if is_speed(r)}
    if requested is not None:
        missing = [name for name, ks in (("current", cur), ("baseline", base)) if requested not in ks]
        if missing:
            known = ", ".join(sorted(cur & base)) or "none"
            raise GateError(f"unknown reference kernel {requested!r}: not timed in the "
                            f"{' and '.join(missing)} file (timed in both: {known})")
        return requested
    ref = pick_reference([r for r in current if r["kernel"] in base])
    if ref is None and cur & base:
        raise GateError("no softmax kernel is timed in both files: pass --reference KERNEL")
    return ref


def compare(current: Sequence[dict], baseline: Sequence[dict], threshold: float,
            reference: str | None = None, common_only: bool = False) -> tuple[list[Point], str | None]:
    """Every point's verdict, in a stable order, and the reference used.

    ``common_only`` (files of different suites): the points of one file that the other never
    measured are left out rather than LOST.
    """
    absolute = reference is not None and reference.lower() == NO_REFERENCE
    ref = None if absolute else resolve_reference(current, baseline, reference)
    cur = {row_key(r): r for r in current}
    base = {row_key(r): r for r in baseline}
    if absolute:  # each time against 1: the same machine in one sitting (e.g. alone vs in a suite)
        ref_cur = {_point_key(r): _unit(r) for r in current}
        ref_base = {_point_key(r): _unit(r) for r in baseline}
    else:
        ref_cur = {_point_key(r): r for r in current if r["kernel"] == ref}
        ref_base = {_point_key(r): r for r in baseline if r["kernel"] == ref}
    points = []
    merged = {k: v for k, v in {**base, **cur}.items() if not common_only or (k in base and k in cur)}
    for key in sorted(merged, key=lambda k: _order(merged[k])):
        c, b = cur.get(key), base.get(key)
        row = merged[key]
        metric = {"time_ms": "time", "peak_mb": "memory"}.get(row["metric"], f"err {row.get('tensor')}")
        p = Point(row["kernel"], shape_label(row) + f" {row.get('device')}", row["seqlen"], row["mode"], metric,
                  None, None, key={f: row.get(f) for f in ("kernel", "seqlen", "mode", "metric", "tensor")})
        lost = b is not None and b.get("status") == "ok" and (c is None or c.get("status") != "ok")
        if row["metric"] == "err_ratio":
            p.baseline, p.current = _err_value(b), _err_value(c)
            if c is not None and (c.get("status") == "fail" or (c.get("status") == "ok" and not agreement_passes(c))):
                p.verdict, p.reason = "FAIL", f"err above tol {c.get('tol')} or not finite"
            elif lost:
                p.verdict, p.reason = "LOST", f"ok in the baseline, {_status(c)} now"
            elif b is None:
                p.verdict = "new"
            points.append(p)
            continue
        if lost:
            p.baseline, p.current = "ok", _status(c)
            p.verdict, p.reason = "LOST", f"ok in the baseline, {_status(c)} now"
            points.append(p)
            continue
        if not is_speed(row) or row["kernel"] == ref:
            continue  # memory and interpreted timings gate by status only; ref/ref is 1
        if b is None:
            p.current, p.verdict = _ratio(c, _ref_of(ref_cur, c)) or _status(c), "new"
            points.append(p)
            continue
        if c is None or c.get("status") != "ok":
            p.baseline, p.current, p.verdict = _status(b), _status(c), "ok"
            p.reason = "not ok in either run"
            points.append(p)
            continue
        rc, rb = _ref_of(ref_cur, c), _ref_of(ref_base, b)
        p.baseline, p.current = _ratio(b, rb), _ratio(c, rc)
        if p.baseline is None or p.current is None:
            p.baseline = p.baseline if p.baseline is not None else f"ref {_status(rb)}"
            p.current = p.current if p.current is not None else f"ref {_status(rc)}"
            p.verdict, p.reason = "no ref", f"{ref} not ok at this point in both runs"
            points.append(p)
            continue
        assert rc is not None and rb is not None
        p.change = p.current / p.baseline - 1
        seed = zlib.crc32(json.dumps(key).encode())
        p.interval, p.significant, p.method = significance(c, rc, b, rb, seed, threshold)
        if p.change > threshold:
            p.verdict = "REGRESSION" if p.significant else "~"
        elif (1 + p.change) * (1 + threshold) < 1:
            p.verdict = "faster" if p.significant else "~"
        points.append(p)
    return points, ref


#: ``--reference none``: compare times as they are, not as ratios to a kernel of the same run
NO_REFERENCE = "none"


def _unit(row: dict) -> dict:
    """A stand-in reference of exactly 1 ms, with as many samples and the same runs as ``row``."""
    runs = [{"run": x.get("run", 0), "status": "ok", "median": 1.0} for x in row.get("runs") or []]
    n = len(row.get("samples_ms") or []) or 1
    return {**row, "kernel": "(1 ms)", "status": "ok", "median": 1.0, "p20": 1.0, "p80": 1.0,
            "samples_ms": [1.0] * n, "runs": runs, "timer": "device"}


def failed(points: Sequence[Point]) -> bool:
    return any(p.verdict in FAILING for p in points)


def to_json(points: Sequence[Point], **meta) -> str:
    """The machine-readable verdict: NaN/Inf become null so the output stays standard JSON."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return v

    counts: dict[str, int] = {}
    for p in points:
        counts[p.verdict] = counts.get(p.verdict, 0) + 1
    doc = {**meta, "ok": not failed(points), "method": METHOD, "counts": dict(sorted(counts.items())),
           "points": [asdict(p) for p in points]}
    return json.dumps(clean(doc), indent=1, allow_nan=False)
