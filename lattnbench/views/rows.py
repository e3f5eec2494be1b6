"""How the views read a speed row: one timer's median and spread, its runs, and its marks.

A speed row's ``median``/``p20``/``p80`` belong to the timer its ``timer`` field names (the
``device`` timer; rows written before the timers were split name their method instead,
``cuda-events`` or ``host-clock...``, which is the device timer's method). ``graph_ms`` and
``latency_ms`` are the other timers' medians, and every run in ``runs`` keeps each timer's own
block. Tables, report, plot and gate all read rows through these helpers, so a timer means
the same number everywhere. Nothing here imports torch or jax.
"""
from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from lattnbench.operators import is_gated
from lattnbench.results import HOST_BOUND, TIMERS, load, quantile, row_key

#: the timers a view can show (``host`` is the enqueue time, not a time per call)
VIEW_TIMERS = ("device", "graph", "latency", "host")
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
    if timer == "host":  # host time is not device work: no roofline share
        return None
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


def inverted_modes(rows: Sequence[dict], timer: str = "device") -> list[str]:
    """One line per point whose fwd took longer than its fwd+bwd: the fwd+bwd does the fwd's work
    and more, so such a point was timed on a busy machine (or a timer is off) and should be re-run."""
    by_point: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if r.get("metric") == "time_ms" and r.get("mode") in ("fwd", "fwdbwd") and not r.get("interpreted"):
            key = (r["kernel"], r.get("seqlen"), shape_key(r))
            by_point.setdefault(key, {})[r["mode"]] = r
    lines = []
    for (kernel, _, _), modes in by_point.items():
        f, fb = timer_median(modes.get("fwd"), timer), timer_median(modes.get("fwdbwd"), timer)
        if f is not None and fb is not None and f > fb:
            lines.append(f"{kernel} {shape_label(modes['fwd'], seqlen=True)}: fwd {fmt(f)} ms > fwd+bwd {fmt(fb)} ms "
                         "by the " + timer + " timer (a busy machine or a timer problem: re-run this point)")
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


# ---- shared by report, plot and gate: loading, ordering, labels ------------------------------

class ReportError(ValueError):
    """A user error (unknown reference, missing README markers): one line, shown as is."""


MODE_ORDER = ("fwd", "bwd", "fwdbwd")
TENSOR_ORDER = ("o", "final_state", "dq", "dk", "dv", "dh0", "dg", "dbeta")
#: preferred speed-up references, best-known FlashAttention first; then any softmax kernel
REFERENCE_PREFERENCE = ("softmax/sdpa-flash", "softmax/flash-attn", "softmax/sdpa-cudnn",
                        "softmax/jax-cudnn", "softmax/sdpa-efficient", "softmax/jax-xla",
                        "softmax/naive-torch")
#: fields that make a shape group (every field of a point but kernel, seqlen, mode, metric)
SHAPE_FIELDS = ("device", "batch", "heads", "kv_heads", "dim_qk", "dim_v", "dtype", "decay",
                "varlen", "initial_state", "reverse", "input_scale", "world_size", "gate_norm", "g_dtype")
DASH = "—"


# ---------------------------------------------------------------- shared with plot and gate
def load_docs(paths: Sequence[str | Path]) -> list[dict]:
    """Load each file (ResultsError on the first bad one) with its rows de-duplicated."""
    docs = []
    for p in paths:
        doc = load(p)
        doc["path"] = str(p)
        doc["rows"] = dedupe(doc["rows"])
        docs.append(doc)
    return docs


#: --metric words of report and plot
METRIC_WORDS = {"speed": "time_ms", "memory": "peak_mb", "check": "err_ratio"}


def select_rows(docs: list[dict], modes: str | None, metrics: str | None) -> list[dict]:
    """Keep only the rows of these modes (fwd, bwd, fwdbwd) and metrics (speed, memory, check),
    comma lists; None keeps all. A word outside those is a ReportError."""
    def words(text: str | None, allowed, what: str) -> set[str] | None:
        if text is None:
            return None
        got = {w.strip() for w in text.split(",") if w.strip()}
        bad = sorted(got - set(allowed))
        if bad or not got:
            raise ReportError(f"--{what}: expected {', '.join(allowed)}, got {text!r}")
        return got

    want_modes = words(modes, ("fwd", "bwd", "fwdbwd"), "mode")
    want = words(metrics, tuple(METRIC_WORDS), "metric")
    want_metrics = None if want is None else {METRIC_WORDS[w] for w in want}
    for doc in docs:
        doc["rows"] = [r for r in doc["rows"]
                       if (want_modes is None or r.get("mode") in want_modes)
                       and (want_metrics is None or r.get("metric") in want_metrics)]
    return docs


def filter_rows(docs: list[dict], kernels: Sequence[str] | None, ns: str | None) -> list[dict]:
    """Keep the rows of kernels matching any of ``kernels`` (names or shell globs, comma lists
    allowed) and of the sequence lengths ``ns`` (the range grammar); None keeps all. A pattern
    that matches no kernel of the files, or lengths none of them has, is a ReportError."""
    import fnmatch

    from lattnbench.spec import SpecError, parse_range

    pats = [p for raw in kernels or () for p in (x.strip() for x in raw.split(",")) if p]
    present = sorted({r["kernel"] for d in docs for r in d["rows"]})
    for pat in pats:
        if not any(fnmatch.fnmatchcase(k, pat) for k in present):
            raise ReportError(f"--kernels {pat!r} matches no kernel of the file (kernels: {', '.join(present) or 'none'})")
    want_n: set[int] | None = None
    if ns is not None:
        try:
            want_n = set(parse_range(ns, "--n"))
        except SpecError as exc:
            raise ReportError(str(exc)) from None
        have = sorted({r.get("seqlen") for d in docs for r in d["rows"] if isinstance(r.get("seqlen"), int)})
        if not want_n & set(have):
            raise ReportError(f"--n {ns}: no such n in the file (n: {', '.join(map(str, have)) or 'none'})")
    for doc in docs:
        doc["rows"] = [r for r in doc["rows"]
                       if (not pats or any(fnmatch.fnmatchcase(r["kernel"], p) for p in pats))
                       and (want_n is None or r.get("seqlen") in want_n)]
    return docs


def dedupe(rows: Iterable[dict]) -> list[dict]:
    """One row per point; a later row (a resumed or repeated measurement) replaces an earlier."""
    by_key: dict[tuple, dict] = {}
    for r in rows:
        by_key[row_key(r)] = r
    return list(by_key.values())


def is_speed(row: dict) -> bool:
    """A real timing: Triton-interpreter timings on CPU say nothing about speed."""
    return row.get("metric") == "time_ms" and not row.get("interpreted")


def value(row: dict | None, timer: str | None = None) -> float | None:
    """The finite median of an ok row (of ``timer`` for a speed row when given), else None."""
    if timer is not None and row is not None and row.get("metric") == "time_ms":
        return timer_median(row, timer)
    if row is None or row.get("status") != "ok":
        return None
    v = row.get("median")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def kernel_sort_key(name: str, families: dict[str, str]) -> tuple:
    return (family_order(families.get(name, name.split("/")[0])), name)


def family_order(name: str) -> int:
    """A family's place in tables (its ``order``); an unknown family after every known one."""
    from lattnbench.operators import names

    known = names()
    return known.index(name) if name in known else len(known)


def doc_reference(doc: dict, requested: str | None = None) -> str | None:
    """The kernel a results file's speed-ups are measured against: ``requested`` (checked), else
    the file's own ``reference`` (a suite names one) when it was timed, else ``pick_reference``'s."""
    named = doc.get("reference")
    if requested is None and named and any(is_speed(r) and r["kernel"] == named for r in doc["rows"]):
        return named
    return pick_reference(doc["rows"], requested)


def pick_reference(rows: Sequence[dict], requested: str | None = None) -> str | None:
    """The kernel speed-ups are measured against: ``requested`` (checked), else a softmax one.

    Default: the first of REFERENCE_PREFERENCE with timings, then the first softmax kernel in
    row order; None when no softmax kernel was timed.
    """
    timed = [r["kernel"] for r in rows if is_speed(r)]
    if requested is not None:
        if requested not in timed:
            known = ", ".join(sorted(set(timed))) or "none"
            raise ReportError(f"unknown reference kernel {requested!r} (timed kernels: {known})")
        return requested
    for name in REFERENCE_PREFERENCE:
        if name in timed:
            return name
    from lattnbench.operators import family, names

    baselines = {n for n in names() if family(n).reference_family}
    return next((r["kernel"] for r in rows if is_speed(r) and r.get("family") in baselines), None)


def shape_key(row: dict) -> str:
    """Sortable, hashable identity of a shape group (varlen counts as on/off)."""
    d = {f: row.get(f) for f in SHAPE_FIELDS}
    d["varlen"] = bool(d["varlen"])
    return json.dumps(d, sort_keys=True)


def shape_label(row: dict, seqlen: bool = False) -> str:
    """``B4 H32 D128 bf16`` (as ``Case.label``), plus T when ``seqlen``; decay and flags too."""
    kv = f"/{row['kv_heads']}" if row.get("kv_heads") != row.get("heads") else ""
    dims = (f"D{row['dim_qk']}" if row.get("dim_qk") == row.get("dim_v")
            else f"D{row['dim_qk']}E{row['dim_v']}")
    t = f" T{row['seqlen']}" if seqlen else ""
    # γ is a per-head decay: a gated family's gates come from g, so its rows name none
    decay = row.get("decay") if not is_gated(row.get("family")) else None
    extra = "".join([f" decay={decay}" if decay else "",
                     " varlen" if row.get("varlen") else "",
                     " h0" if row.get("initial_state") else "", " rev" if row.get("reverse") else "",
                     f" x{row['input_scale']:g}" if row.get("input_scale") not in (None, 1) else "",
                     f" P{row['world_size']}" if (row.get("world_size") or 1) > 1 else "",
                     gates_label(row)])
    return f"B{row['batch']}{t} H{row['heads']}{kv} {dims} {row['dtype']}{extra}"


def gates_label(row: dict) -> str:
    """`` gate/16 g:fp32`` for a row that records its gate distribution, else empty."""
    if row.get("gate_norm") is None:
        return ""
    return f" gate/{row['gate_norm']:g} g:{row.get('g_dtype') or 'fp32'}"


def gpu_name(env: dict, rows: Sequence[dict] = ()) -> str:
    """The machine's accelerator name from the env block, whatever shape the block took."""
    for key in ("gpu", "gpu_name", "device_name"):
        v = env.get(key)
        if isinstance(v, dict):
            v = v.get("name")
        if isinstance(v, list) and v:
            v = v[0].get("name") if isinstance(v[0], dict) else v[0]
        if isinstance(v, str) and v:
            return v
    devices = sorted({str(r.get("device")) for r in rows})
    return "/".join(devices) if devices else "unknown device"


def fmt(v: float | None) -> str:
    """2-3 significant decimals: 162.9, 17.66, 0.0944."""
    if v is None:
        return DASH
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else "inf"
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:#.3g}"


# ---------------------------------------------------------------- markdown


def agreement_passes(row: dict) -> bool:
    """An ok err_ratio row within its tolerance with a finite value (NaN/Inf always fail)."""
    v = row.get("median", row.get("err"))
    tol = row.get("tol")
    if row.get("status") != "ok" or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return not (isinstance(tol, (int, float)) and v > tol)
