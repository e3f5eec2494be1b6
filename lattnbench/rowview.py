"""How the views read a speed row: one timer's median and spread, its runs, and its marks.

A speed row's ``median``/``p20``/``p80`` belong to the timer its ``timer`` field names (the
``device`` timer; rows written before the timers were split name their method instead,
``cuda-events`` or ``host-clock...``, which is the device timer's method). ``graph_ms`` and
``latency_ms`` are the other timers' medians, and every run in ``runs`` keeps each timer's own
block. Tables, report, plot and gate all read rows through these helpers, so a timer means
the same number everywhere. Nothing here imports torch or jax.
"""
from __future__ import annotations

import math
import statistics

from lattnbench.timing import HOST_BOUND, TIMERS, quantile

#: the timers a view can show (``host`` is the enqueue time, not a time per call)
VIEW_TIMERS = ("device", "graph", "latency")
#: where a row keeps the median of a timer other than its own
MEDIAN_FIELD = {"graph": "graph_ms", "latency": "latency_ms", "host": "host_ms"}
HOST_MARK = "†"
THROTTLE_MARK = "‡"
HOST_NOTE = f"{HOST_MARK} host-bound: device or latency > {HOST_BOUND:g}× graph"
THROTTLE_NOTE = f"{THROTTLE_MARK} throttled: NVML saw a thermal or power slowdown while timing"
SPREAD_NOTE = "±p% = spread across runs: half the range of the run medians, over their median"


class UnknownTimer(ValueError):
    """A ``--timer`` that is not one of VIEW_TIMERS: one line, exit 2."""


def parse_timer(text: str) -> str:
    t = str(text).strip().lower()
    if t not in VIEW_TIMERS:
        raise UnknownTimer(f"unknown timer {text!r}: choose from {', '.join(VIEW_TIMERS)}")
    return t


def _finite(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def row_timer(row: dict) -> str:
    """The timer behind the row's median / p20 / p80 (older method names read as device)."""
    t = row.get("timer")
    return t if t in TIMERS else "device"


def _ok_runs(row: dict) -> list[dict]:
    return [x for x in row.get("runs") or [] if isinstance(x, dict) and x.get("status") == "ok"]


def _run_value(run: dict, timer: str, own: str) -> float | None:
    if timer == own:
        return _finite(run.get("median"))
    v = _finite(run.get(f"{timer}_ms"))
    if v is None:
        block = (run.get("timers") or {}).get(timer) or {}
        v = _finite(block.get("median")) if block.get("status") == "ok" else None
    return v


def timer_median(row: dict | None, timer: str = "device") -> float | None:
    """The finite median of ``timer`` for an ok row, else None (the timer did not run)."""
    if row is None or row.get("status") != "ok":
        return None
    own = row_timer(row)
    if timer == own:
        return _finite(row.get("median"))
    field = MEDIAN_FIELD.get(timer)
    if field is not None and field in row:
        return _finite(row.get(field))
    meds = [v for x in _ok_runs(row) if (v := _run_value(x, timer, own)) is not None]
    return statistics.median(meds) if meds else None


def timer_range(row: dict | None, timer: str = "device") -> tuple[float, float] | None:
    """(p20, p80) of ``timer``'s samples: the row's own, else from its runs (pooled when several)."""
    if timer_median(row, timer) is None:
        return None
    assert row is not None
    if timer == row_timer(row):
        lo, hi = _finite(row.get("p20")), _finite(row.get("p80"))
        return (lo, hi) if lo is not None and hi is not None else None
    blocks = [b for x in _ok_runs(row) if (b := (x.get("timers") or {}).get(timer)) and b.get("status") == "ok"]
    pooled = [s for b in blocks for s in b.get("samples_ms") or [] if _finite(s) is not None]
    if len(blocks) > 1 and pooled:
        return quantile(pooled, 0.2), quantile(pooled, 0.8)
    if len(blocks) == 1:
        lo, hi = _finite(blocks[0].get("p20")), _finite(blocks[0].get("p80"))
        if lo is not None and hi is not None:
            return lo, hi
    return None


def pct_floor(row: dict, v: float, timer: str = "device") -> float | None:
    """% of the roofline floor for ``v``, the shown timer's median (a row's pct_floor is its own timer's)."""
    floor = _finite(row.get("floor_ms"))
    if floor is not None and v:
        return 100.0 * floor / v
    return _finite(row.get("pct_floor")) if timer == row_timer(row) else None


def run_medians(row: dict | None, timer: str = "device") -> dict[int, float]:
    """Run index -> that run's median of ``timer``, for every ok run that has one."""
    if row is None:
        return {}
    own = row_timer(row)
    out = {}
    for i, x in enumerate(_ok_runs(row)):
        v = _run_value(x, timer, own)
        if v is not None:
            out[int(x.get("run", i))] = v
    return out


def run_spread(row: dict | None, timer: str = "device") -> float | None:
    """(max - min) / median of the run medians; None for fewer than two ok runs."""
    meds = list(run_medians(row, timer).values())
    if len(meds) < 2:
        return None
    mid = statistics.median(meds)
    return (max(meds) - min(meds)) / mid if mid else None


def spread_text(row: dict | None, timer: str = "device") -> str:
    """``±3%`` (half the run range over the median) when the point was measured in several runs."""
    s = run_spread(row, timer)
    if s is None:
        return ""
    half = 100 * s / 2
    return f"±{half:.1f}%" if half < 1 else f"±{half:.0f}%"


def marks(row: dict | None) -> str:
    """``†`` for a host-bound point, ``‡`` for a throttled one (either, both or neither)."""
    if row is None or row.get("status") != "ok":
        return ""
    return (HOST_MARK if row.get("host_bound") is True else "") + (THROTTLE_MARK if row.get("throttled") is True else "")


def legend(rows: list[dict], timer: str = "device") -> list[str]:
    """The legend lines the marks and spreads shown for ``rows`` need (none when none shows)."""
    shown = [r for r in rows if r.get("status") == "ok"]
    lines = []
    if any(r.get("host_bound") is True for r in shown):
        lines.append(HOST_NOTE)
    if any(r.get("throttled") is True for r in shown):
        lines.append(THROTTLE_NOTE)
    if any(run_spread(r, timer) is not None for r in shown):
        lines.append(SPREAD_NOTE)
    return lines


def sig3(v: float | None) -> str:
    """Three significant digits without an exponent: 0.0123, 0.151, 1.71, 17.7, 272, 1234."""
    if v is None:
        return "—"
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else "inf"
    a = abs(v)
    if a == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(a)))
    text = f"{v:.{decimals}f}"
    if decimals and len(text.replace("-", "").replace(".", "").lstrip("0")) > 3:
        text = f"{v:.{decimals - 1}f}"  # 9.996 rounds up to 10.00: keep three digits
    return text
