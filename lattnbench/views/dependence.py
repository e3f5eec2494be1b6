"""What the input values do: a kernel whose time or error moves with the distribution of its inputs.

A benchmark that varies shapes but never values can hide a kernel's worst case. Rows record how
their inputs were drawn (``decay`` for the Lightning family, ``gate_norm`` and ``g_dtype`` for gated
families, ``input_scale``); these helpers compare one kernel's rows that differ only there:

- ``data_dependence``: speed rows of one kernel, shape, length, mode and device whose times span
  more than DEPENDENCE_LIMIT (slowest / fastest) across distributions in one file. Report marks
  them with DEPENDENCE_MARK and that ratio.
- ``worst_distributions``: per kernel and tensor, the distribution with the largest error.

Nothing here imports torch or jax.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence

from lattnbench.operators import is_decayed
from lattnbench.spec import DISTRIBUTION_FIELDS
from lattnbench.views.rows import SHAPE_FIELDS, TENSOR_ORDER, gates_label, is_speed, kernel_sort_key, timer_median

#: slowest / fastest time across input distributions above which a kernel depends on the data
DEPENDENCE_LIMIT = 1.25
#: largest / smallest err of one tensor across input distributions above which report lists it
ERROR_DEPENDENCE_LIMIT = 2.0
DEPENDENCE_MARK = "§"
DEPENDENCE_NOTE = (f"{DEPENDENCE_MARK}k× data-dependent: this kernel's time at this shape and mode spans k× "
                   f"(slowest / fastest) across the input distributions in the file (flagged above "
                   f"{DEPENDENCE_LIMIT:g}×)")


def distribution_label(row: dict) -> str:
    """``decay=strong gate/0.1 g:bf16``: how a row's inputs were drawn (its family's fields only)."""
    parts = []
    if is_decayed(row.get("family")) and row.get("decay"):
        parts.append(f"decay={row['decay']}")
    if gates_label(row):
        parts.append(gates_label(row).strip())
    if row.get("input_scale") not in (None, 1):
        parts.append(f"x{row['input_scale']:g}")
    return " ".join(parts) or "default"


def _shape_without_distribution(row: dict) -> str:
    keep = [f for f in SHAPE_FIELDS if f not in DISTRIBUTION_FIELDS]
    d = {f: row.get(f) for f in keep}
    d["varlen"] = bool(d.get("varlen"))
    return json.dumps(d, sort_keys=True)


def _distribution_key(row: dict) -> str:
    return json.dumps({f: row.get(f) for f in DISTRIBUTION_FIELDS}, sort_keys=True, default=str)


def data_dependence(rows: Sequence[dict], timer: str = "device") -> dict[int, float]:
    """``id(row)`` -> slowest / fastest time of its kernel, shape, length and mode across the input
    distributions present, for every ok speed row whose group spans more than DEPENDENCE_LIMIT."""
    groups: dict[tuple, list[tuple[dict, float]]] = defaultdict(list)
    for r in rows:
        if not is_speed(r) or r.get("status") != "ok":
            continue
        v = timer_median(r, timer)
        if v is None or not v > 0:
            continue
        groups[(r["kernel"], _shape_without_distribution(r), r.get("seqlen"), r.get("mode"))].append((r, v))
    out: dict[int, float] = {}
    for members in groups.values():
        if len({_distribution_key(r) for r, _ in members}) < 2:
            continue
        times = [v for _, v in members]
        ratio = max(times) / min(times)
        if ratio > DEPENDENCE_LIMIT:
            out.update({id(r): ratio for r, _ in members})
    return out


def dependence_mark(ratio: float | None) -> str:
    """``§2.9×`` for a flagged row, else empty."""
    if ratio is None:
        return ""
    return f"{DEPENDENCE_MARK}{ratio:.2g}×" if ratio < 10 else f"{DEPENDENCE_MARK}{ratio:.0f}×"


def dependence_summary(rows: Sequence[dict], timer: str = "device") -> list[list[str]]:
    """One line per flagged kernel, shape and mode: the fastest and slowest distribution and their ratio
    at the length where the ratio is largest (kernel, mode, n, fastest, slowest, ratio)."""
    flagged = data_dependence(rows, timer)
    best: dict[tuple, tuple[float, list[str]]] = {}
    by_group: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if id(r) in flagged:
            by_group[(r["kernel"], _shape_without_distribution(r), r.get("seqlen"), r.get("mode"))].append(r)
    for (kernel, shape, n, mode), members in by_group.items():
        times = [(timer_median(r, timer), r) for r in members]
        (fast, rf), (slow, rs) = min(times, key=lambda x: x[0]), max(times, key=lambda x: x[0])
        ratio = slow / fast
        key = (kernel, shape, mode)
        if key not in best or ratio > best[key][0]:
            best[key] = (ratio, [kernel, mode, str(n), f"{distribution_label(rf)} ({fast:.3g} ms)",
                                 f"{distribution_label(rs)} ({slow:.3g} ms)", f"{ratio:.2f}×"])
    families = {r["kernel"]: r.get("family", "") for r in rows}
    return [line for _, line in sorted(best.values(),
                                       key=lambda x: (kernel_sort_key(x[1][0], families), x[1][1], -x[0]))]


def moves_with_data(w: dict) -> bool:
    """A worst-distribution entry whose error the values move by more than ERROR_DEPENDENCE_LIMIT,
    or that fails."""
    return not w["passed"] or w["err"] > ERROR_DEPENDENCE_LIMIT * max(w["best_err"], 1e-300)


def worst_distributions(rows: Sequence[dict]) -> list[dict]:
    """Per kernel, dtype and tensor with rows at two or more input distributions: the distribution whose
    largest error is the worst (NaN / Inf counts as worst), with that error, its tolerance and
    whether it passed, and the best one beside it. Each: {kernel, tensor, distribution, err, tol, n, dtype,
    passed, best_distribution, best_err}."""
    from lattnbench.views.rows import agreement_passes

    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("metric") == "err_ratio" and r.get("status") in ("ok", "fail"):
            groups[(r["kernel"], str(r.get("dtype")), str(r.get("tensor")))].append(r)

    def err(r: dict) -> float:
        v = r.get("median", r.get("err"))
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return math.inf
        return float(v)

    out = []
    for (kernel, _, tensor), rs in groups.items():
        if len({_distribution_key(r) for r in rs}) < 2:
            continue
        worst, best = max(rs, key=err), min(rs, key=err)
        out.append({"kernel": kernel, "tensor": tensor, "distribution": distribution_label(worst),
                    "err": err(worst), "tol": worst.get("tol"), "n": worst.get("seqlen"),
                    "dtype": worst.get("dtype"), "passed": agreement_passes(worst),
                    "best_distribution": distribution_label(best), "best_err": err(best)})
    families = {r["kernel"]: r.get("family", "") for r in rows}
    order = {t: i for i, t in enumerate(TENSOR_ORDER)}
    return sorted(out, key=lambda d: (kernel_sort_key(d["kernel"], families), str(d["dtype"]),
                                      order.get(d["tensor"], 99)))
