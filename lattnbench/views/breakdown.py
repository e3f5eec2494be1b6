"""Breakdown tables: the kernels one timed call launches, from rows measured with ``--breakdown``."""
from __future__ import annotations

from typing import Sequence

#: widest kernel name shown (the row keeps the whole name): the table stays within 80 columns
NAME_WIDTH = 40


def short_name(name: str) -> str:
    """A kernel's name cut to NAME_WIDTH characters, an ellipsis marking the cut."""
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 1] + "…"


def _title(row: dict) -> str:
    from lattnbench.views.rows import shape_label

    timed = row.get("median")
    timed_text = f", {timed:.4g} ms by the device timer" if isinstance(timed, (int, float)) else ""
    return f"**{row['kernel']}** {row['mode']}, {shape_label(row, seqlen=True)}{timed_text}"


def breakdown_tables(rows: Sequence[dict]) -> list[str]:
    """A markdown table per speed row that carries a breakdown: each kernel's time per call, its
    share of the profiled total and its launches per call; a failed profile is one line."""
    from lattnbench.views.report import md_table

    parts = []
    for row in rows:
        b = row.get("breakdown")
        if row.get("metric") != "time_ms" or not isinstance(b, dict):
            continue
        if b.get("status") == "error":
            parts.append(f"{_title(row)}: no breakdown ({b.get('reason')}).\n")
            continue
        kernels = b.get("kernels") or []
        total = b.get("total_ms") or 0.0
        if not kernels:
            parts.append(f"{_title(row)}: the profiler saw no kernel (it sees torch's operators and CUDA "
                         "kernels; XLA's work on a CPU is neither).\n")
            continue
        body = [[short_name(k["name"]), f"{k['ms']:.4g}", f"{100 * k['ms'] / total:.1f} %" if total else "—",
                 f"{k['launches']:g}"] for k in kernels]
        body.append(["total", f"{total:.4g}", "100 %" if total else "—",
                     f"{sum(k['launches'] for k in kernels):g}"])
        parts.append(f"{_title(row)}; {b.get('method')}:\n\n"
                     + md_table(["kernel", "ms", "share", "launches"], body))
    return parts
