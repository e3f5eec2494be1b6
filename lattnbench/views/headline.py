"""The README's headline: one table a reader takes in at a glance, not the full tables.

n down the side, a handful of kernels across (ours, fla, FlashAttention-2, cuDNN), each cell the
median time and the speed-up against fla, and a short legend. The full tables, with every kernel,
mark and timer, stay in docs/benchmarks.md. A kernel the run lacks is left out and named, so the
view renders from any results file of the shape. Nothing here imports torch or jax.
"""
from __future__ import annotations

import textwrap
from collections.abc import Sequence

from lattnbench.results import display_name
from lattnbench.views.rows import (DASH, ReportError, fmt, gpu_name, is_speed, shape_key, shape_label,
                                   timer_median)

#: (registry name, column label) of the headline's kernels, in column order
HEADLINE_KERNELS = (("lightning/gluon", "gluon"), ("lightning/triton", "triton"), ("lightning/fla-chunk", "fla"),
                    ("softmax/sdpa-flash", "FA2"), ("softmax/sdpa-cudnn", "cuDNN"))
#: what each label stands for, in the legend
LABEL_NOTE = {"lightning/gluon": "ours, Gluon sm_90", "lightning/triton": "ours, Triton",
              "lightning/fla-chunk": "fla-core's chunk kernel", "softmax/sdpa-flash": "FlashAttention-2 via torch SDPA",
              "softmax/sdpa-cudnn": "cuDNN attention via torch SDPA"}
#: the kernel the speed-ups are measured against
AGAINST = "lightning/fla-chunk"
MODE_WORDS = {"fwd": "fwd", "bwd": "bwd", "fwdbwd": "fwd+bwd"}
#: legend lines wrap here: a README line stays readable in an editor and a diff
LEGEND_WIDTH = 100


def _md(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    widths = [max(len(c) for c in col) for col in zip(header, *body)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in body)]) + "\n"


def headline(doc: dict, mode: str = "fwdbwd", timer: str = "device",
             kernels: Sequence[tuple[str, str]] = HEADLINE_KERNELS, against: str = AGAINST) -> str:
    """The headline markdown of one results file: the shape with most of ``kernels`` timed in ``mode``."""
    rows = [r for r in doc["rows"] if is_speed(r) and r.get("mode") == mode]
    wanted = [name for name, _ in kernels]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["kernel"] in wanted:
            groups.setdefault(shape_key(r), []).append(r)
    if not groups:
        raise ReportError(f"no {mode} timings of {', '.join(wanted)} for a headline")
    key = max(sorted(groups), key=lambda k: len({r["kernel"] for r in groups[k]}))
    g = groups[key]
    present = {r["kernel"] for r in g}
    cols = [(name, label) for name, label in kernels if name in present]
    cells = {(r["seqlen"], r["kernel"]): r for r in g}
    base = against if against in present else None
    body = []
    for n in sorted({r["seqlen"] for r in g}):
        ref = timer_median(cells.get((n, base)), timer) if base else None
        line = [str(n)]
        for name, _ in cols:
            v = timer_median(cells.get((n, name)), timer)
            row = cells.get((n, name))
            text = fmt(v) if v is not None else (str(row["status"]) if row is not None else DASH)
            if base and name != base and v and ref is not None:
                text += f" ({ref / v:.2f}×)"
            line.append(text)
        body.append(line)
    runs = max((len(r.get("runs") or []) for r in g), default=0)
    how = f"median of {runs} runs" if runs > 1 else "median"
    source = f"`{display_name(doc.get('path', 'results.json'))}`, {gpu_name(doc.get('env') or {}, g)}"
    legend = [f"{MODE_WORDS.get(mode, mode)} time in ms, {shape_label(g[0])}, {timer} timer, {how}; from {source}."]
    if base:
        legend.append(f"(k×) = {_label(base, kernels)}'s time / the kernel's: above 1 is faster than "
                      f"{_label(base, kernels)}.")
    legend.append("; ".join(f"{label} = `{name}` ({LABEL_NOTE.get(name, name)})" for name, label in cols) + ".")
    missing = [name for name in wanted if name not in present]
    if missing:
        legend.append(f"Not in this run: {', '.join(f'`{m}`' for m in missing)}.")
    text = "\n".join(textwrap.fill(p, LEGEND_WIDTH, break_on_hyphens=False, break_long_words=False)
                     for p in legend)
    return _md(["n", *(label for _, label in cols)], body) + "\n" + text + "\n"


def _label(name: str, kernels: Sequence[tuple[str, str]]) -> str:
    return next((label for n, label in kernels if n == name), name)
