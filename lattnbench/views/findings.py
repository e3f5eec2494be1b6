"""Agreement as findings: one line per kernel with how its points came out, then one line per
finding (a kernel, a dtype and one way of going wrong), for runs too wide for per-case tables.

A point is a (kernel, case) of check-grad or check-rows. It passes when every tensor it computed
is within tolerance; it is refused when every tensor is unsupported or unavailable; otherwise it
fails. A finding groups the failing tensors of one kernel and dtype by what went wrong: over the
tolerance, not finite (err inf or NaN, the output non-finite or of another shape), or an error
(out of shared memory, a timeout, a crashed worker). Same rows, same bytes.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from lattnbench.views.rows import DASH, SHAPE_FIELDS, TENSOR_ORDER, agreement_passes, kernel_sort_key, shape_label

_DTYPES = ("fp32", "fp16", "bf16")
_REFUSED = ("unsupported", "unavailable")


def _case_key(row: dict) -> tuple:
    """What tells one point of a kernel from another: its shape group and length."""
    return tuple(str(row.get(f)) for f in (*SHAPE_FIELDS, "seqlen"))


def _case_order(row: dict) -> tuple:
    """Shortest and narrowest first, then the flags."""
    num = lambda f: row.get(f) if isinstance(row.get(f), (int, float)) else -1  # noqa: E731
    return (num("seqlen"), num("dim_qk"), num("dim_v"), num("batch"), _case_key(row), str(row.get("tensor")))


def _case_text(row: dict) -> str:
    """``B2 T65 H4 D48E96 fp32 decay=lightning``, plus the batch row of a check-rows point."""
    return shape_label(row, seqlen=True) + (f" {row['check']}" if row.get("check") else "")


def _what(row: dict) -> str:
    status = row.get("status")
    if status == "fail" or (status == "ok" and not agreement_passes(row)):
        v = row.get("median", row.get("err"))
        return "not finite" if isinstance(v, (int, float)) and not math.isfinite(v) else "over tolerance"
    reason = str(row.get("reason") or status)
    if "out of resource" in reason.lower():
        return "out of shared memory" if "shared memory" in reason else "out of resources"
    if status == "timeout":
        return "timeout"
    if "died" in reason:
        return "worker died"
    return f"{status}: {reason.split(':')[0][:40]}"


def _tensor_list(tensors) -> str:
    return ", ".join(sorted(tensors, key=lambda t: (TENSOR_ORDER.index(t) if t in TENSOR_ORDER else 99, t)))


def _err_range(rows: list[dict]) -> str:
    vals = [float(r["median"]) for r in rows if isinstance(r.get("median"), (int, float))]
    finite = [v for v in vals if math.isfinite(v)]
    if not finite:
        return "inf" if vals else DASH
    lo, hi = min(finite), max(finite)
    return f"{lo:.1e}" if lo == hi else f"{lo:.1e} – {hi:.1e}"


def _tol_range(rows: list[dict]) -> str:
    tols = sorted({float(r["tol"]) for r in rows if isinstance(r.get("tol"), (int, float))})
    return ", ".join(f"{t:.2g}" for t in tols) or DASH


def render_findings(rows: Sequence[dict]) -> str:
    """Two markdown tables: kernels (points passed / failed / refused, determinism), then findings."""
    from lattnbench.views.report import md_table

    rows = [r for r in rows if r.get("metric") == "err_ratio"]
    if not rows:
        return "No agreement rows.\n"
    families = {r["kernel"]: r.get("family", "") for r in rows}
    kernels = sorted(families, key=lambda k: kernel_sort_key(k, families))
    points: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        points[(r["kernel"], _case_key(r))].append(r)

    def verdict(prow: list[dict]) -> str:
        if all(r.get("status") in _REFUSED for r in prow):
            return "refused"
        bad = [r for r in prow if r.get("status") not in _REFUSED and not agreement_passes(r)]
        return "fail" if bad else "pass"

    summary = []
    for k in kernels:
        mine = {key: prow for (kk, key), prow in points.items() if kk == k}
        counts = defaultdict(int)
        for prow in mine.values():
            counts[verdict(prow)] += 1
        reasons = sorted({str(r.get("reason")).split(":")[0] for prow in mine.values() if verdict(prow) == "refused"
                          for r in prow if r.get("reason")})
        det = [r.get("deterministic") for prow in mine.values() for r in prow if r.get("deterministic") is not None]
        det_text = DASH if not det else ("yes" if all(det) else f"no ({det.count(False)} of {len(det)} tensors)")
        summary.append([k, str(len(mine)), str(counts["pass"]), str(counts["fail"]), str(counts["refused"]),
                        "; ".join(reasons) or DASH, det_text])

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for (k, key), prow in points.items():
        for r in prow:
            if r.get("status") not in _REFUSED and not agreement_passes(r):
                groups[(k, str(r.get("dtype")), _what(r))].append(r)
    run_points = defaultdict(int)  # points not refused, per (kernel, dtype)
    for (k, key), prow in points.items():
        if verdict(prow) != "refused":
            run_points[(k, str(prow[0].get("dtype")))] += 1
    order = lambda g: (kernel_sort_key(g[0], families),  # noqa: E731
                       _DTYPES.index(g[1]) if g[1] in _DTYPES else 9, g[1], g[2])
    found = []
    for g in sorted(groups, key=order):
        grp = groups[g]
        cases = sorted({_case_key(r) for r in grp})
        first = min(grp, key=_case_order)
        found.append([g[0], g[1], g[2], _tensor_list({str(r.get("tensor")) for r in grp}),
                      f"{len(cases)} of {run_points[(g[0], g[1])]}", _err_range(grp), _tol_range(grp),
                      _case_text(first)])
    out = ("Points (kernel × case): pass = every tensor within tolerance, refused = the kernel declares "
           "the case unsupported (reasons listed) or is not installed.\n\n"
           + md_table(["kernel", "points", "pass", "fail", "refused", "refusals", "bitwise repeatable"],
                      summary, left=1))
    if found:
        out += ("\nFindings: one line per kernel, dtype and way of failing; `cases` counts the failing "
                "points among those the kernel ran in that dtype; `e.g.` is the first such case.\n\n"
                + md_table(["kernel", "dtype", "finding", "tensors", "cases", "err", "tol", "e.g."], found, left=4))
    else:
        out += "\nNo findings: every point run passed.\n"
    return out
