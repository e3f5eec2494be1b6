"""Compare a static results file against a baseline: which compile metrics regressed.

Like with like: a row is compared only with the baseline row of the same (kernel, config, shape,
mode, metric) *and* the same compiler versions (``compiler`` in the row: triton, or jax and
jaxlib). Rows whose compiler differs are skipped and counted, never compared: a register count of
Triton 3.9 says nothing about one of Triton 3.6.

Rules (a rule fails the row when it holds):

* ``spilled_bytes``: any growth (a new spill, or more of one);
* ``registers``, ``shared_bytes``: growth beyond ``threshold`` (0 % by default);
* ``loop_instructions`` (PTX instructions inside the chunk loop): growth beyond 2 %;
* ``loop_barriers`` (``bar.sync`` inside the chunk loop): any growth;
* ``mma`` (mma / wgmma instructions) and ``wgmma`` (the Hopper ones alone): any loss;
* ``flops``, ``bytes_accessed``, ``temp_bytes`` (XLA): growth beyond 1 %;
* a row present in the baseline (same compiler) and missing now: LOST.

Other metrics (``ptx_instructions``, ``output_bytes``) are shown in ``--json`` but not gated.
Imports neither torch nor jax nor triton: CI gates from the two files alone.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from lattnbench.static.results import compiler_key, row_key

LOOP_THRESHOLD = 0.02
XLA_THRESHOLD = 0.01
#: metric -> rule: "any-growth", "threshold" (the caller's), a fixed growth fraction, or "no-loss"
RULES: dict[str, str | float] = {
    "spilled_bytes": "any-growth",
    "registers": "threshold",
    "shared_bytes": "threshold",
    "loop_instructions": LOOP_THRESHOLD,
    "loop_barriers": "any-growth",
    "mma": "no-loss",
    "wgmma": "no-loss",
    "flops": XLA_THRESHOLD,
    "bytes_accessed": XLA_THRESHOLD,
    "temp_bytes": XLA_THRESHOLD,
}


@dataclass
class Finding:
    """One compared row (or a lost one)."""

    kernel: str
    config: str
    shape: str
    mode: str
    metric: str
    old: float | None
    new: float | None
    verdict: str  # "ok", "REGRESSION", "LOST", "changed" (an ungated metric that moved)
    limit: str = ""

    def line(self) -> str:
        """The failure line: kernel, config, metric, old and new values."""
        where = " ".join(x for x in (self.config, self.shape, self.mode) if x and x != "compile")
        if self.verdict == "LOST":
            return f"LOST {self.kernel} [{where}] {self.metric}: {_fmt(self.old)} in the baseline, missing now"
        change = ""
        if self.old not in (None, 0) and self.new is not None:
            change = f" ({self.new / self.old - 1:+.1%}"
            change += f", limit {self.limit})" if self.limit else ")"
        elif self.limit:
            change = f" (limit {self.limit})"
        return f"{self.verdict} {self.kernel} [{where}] {self.metric}: {_fmt(self.old)} -> {_fmt(self.new)}{change}"


@dataclass
class Comparison:
    """The gate's verdict: every finding, what was skipped (compiler differs) and what is new."""

    findings: list[Finding]
    skipped: dict[str, int]  # "baseline compiler -> current compiler" -> rows
    new: int

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict in ("REGRESSION", "LOST")]

    @property
    def compared(self) -> int:
        return sum(1 for f in self.findings if f.verdict != "LOST")

    def to_dict(self) -> dict:
        return {"passed": not self.failures, "compared": self.compared, "new": self.new,
                "skipped": self.skipped, "failures": [asdict(f) for f in self.failures],
                "findings": [asdict(f) for f in self.findings]}


def _fmt(v) -> str:
    if v is None:
        return "—"
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def _label(ckey: tuple) -> str:
    return " ".join(f"{name} {ver}" for name, ver in ckey) or "unknown compiler"


def _judge(metric: str, old: float, new: float, threshold: float) -> tuple[str, str]:
    """(verdict, limit text) of one metric's change."""
    rule = RULES.get(metric)
    if rule is None:
        return ("ok" if new == old else "changed"), ""
    if rule == "any-growth":
        return ("REGRESSION" if new > old else "ok"), "no growth"
    if rule == "no-loss":
        return ("REGRESSION" if new < old else "ok"), "no loss"
    frac = threshold if rule == "threshold" else float(rule)
    limit = f"+{frac:.0%}" if frac * 100 == int(frac * 100) else f"+{frac:.1%}"
    grew = new > old * (1 + frac) if old else new > old
    return ("REGRESSION" if grew else "ok"), limit


def compare(current: list[dict], baseline: list[dict], threshold: float = 0.0) -> Comparison:
    """Findings of every row of ``current`` against ``baseline``, like with like."""
    cur = {(row_key(r), compiler_key(r)): r for r in current}
    cur_keys = {row_key(r): compiler_key(r) for r in current}
    findings: list[Finding] = []
    skipped: dict[str, int] = {}
    seen = set()
    for b in baseline:
        key, ckey = row_key(b), compiler_key(b)
        kernel, config, shape, mode, metric = key
        c = cur.get((key, ckey))
        if c is None:
            if key in cur_keys:  # measured now, by another compiler
                what = f"{_label(ckey)} -> {_label(cur_keys[key])}"
                skipped[what] = skipped.get(what, 0) + 1
                seen.add(key)
                continue
            findings.append(Finding(kernel, config, shape, mode, metric, b["value"], None, "LOST"))
            continue
        seen.add(key)
        verdict, limit = _judge(metric, float(b["value"]), float(c["value"]), threshold)
        findings.append(Finding(kernel, config, shape, mode, metric, b["value"], c["value"], verdict, limit))
    new = sum(1 for r in current if row_key(r) not in seen)
    return Comparison(findings, skipped, new)
