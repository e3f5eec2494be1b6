"""Speed rows as the runner writes them: every timer's samples per run, runs merged by the writer.

The rows go through the producers' own code (``measure.timing_fields`` for one run,
``ResultsWriter.add`` merging ``--repeat`` runs), so the views are tested on the real shape.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lattnbench.harness.points import timing_fields
from lattnbench.measure.timing import PointTiming, TimerResult


def base(kernel: str, seqlen: int, mode: str = "fwd", family: str | None = None, framework: str = "torch",
         **case) -> dict:
    fields = dict(device="cuda", batch=4, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16",
                  decay="alibi", varlen=None, initial_state=False, reverse=False)
    fields.update(case)
    fam = family or kernel.split("/")[0]
    return dict(kernel=kernel, family=fam, framework=framework, seqlen=seqlen, mode=mode,
                metric="time_ms", **fields)


def samples(median: float, n: int = 40, sigma: float = 0.01, seed: int = 0) -> list[float]:
    """``n`` log-normal samples whose median is ``median`` exactly."""
    s = np.exp(np.random.default_rng(seed).normal(0, sigma, n))
    return [float(x) for x in median * s / np.median(s)]


def one_run(row_base: dict, run: int, device: float, graph: float | None = None,
            latency: float | None = None, host: float = 0.01, throttled: bool | None = None,
            seed: int = 0, floor_ms: float | None = None) -> dict:
    """The row one run of a point gives: device samples around ``device``, graph and latency ones
    around theirs (unavailable when None), a clock sample that says ``throttled``."""
    timers = {"device": TimerResult("device", samples(device, seed=seed), "fake device")}
    timers["graph"] = (TimerResult("graph", samples(graph, seed=seed + 1), "fake graph") if graph is not None
                       else TimerResult("graph", status="unavailable", reason="needs a GPU"))
    if latency is not None:
        timers["latency"] = TimerResult("latency", samples(latency, 20, seed=seed + 2), "fake latency")
        timers["host"] = TimerResult("host", samples(host, 20, seed=seed + 3), "fake host")
    pt = PointTiming(0.01, 3, timers)
    clock = None if throttled is None else {"sm_mhz": 1980, "throttled": throttled}
    row = {**row_base, **timing_fields(pt, run, clock, None), "interpreted": False, "status": "ok", "reason": None}
    if floor_ms is not None:
        row["floor_ms"] = floor_ms
        row["pct_floor"] = 100.0 * floor_ms / row["median"]
    return row


def repeated(writer, row_base: dict, devices: Sequence[float], graphs: Sequence[float | None] | None = None,
             latencies: Sequence[float | None] | None = None, throttled: Sequence[bool | None] | None = None,
             seed: int = 0, floor_ms: float | None = None) -> None:
    """Add one point measured in ``len(devices)`` runs to ``writer`` (the writer merges them)."""
    for i, dev in enumerate(devices):
        writer.add(one_run(row_base, i, dev, graphs[i] if graphs else None,
                           latencies[i] if latencies else None, throttled=throttled[i] if throttled else None,
                           seed=seed + 10 * i, floor_ms=floor_ms))
