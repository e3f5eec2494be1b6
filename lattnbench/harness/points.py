"""The sweep engine: run kernels over cases, one isolated point at a time, rows as they finish.

Every point is guarded: a missing package, an unsupported case, running out of memory, a
compile error or NaNs in the output become a row with a status and a reason, and the sweep
goes on. Rows reach the ``ResultsWriter`` as soon as they exist, so nothing measured is lost.
"""
from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lattnbench.errors import PointTimeout, Unsupported
from lattnbench.measure.timing import REPLAY, SPEED_ROUNDS
from lattnbench.registry import KernelEntry
from lattnbench.operators import family
from lattnbench.spec import Case

FAILED = ("error", "fail", "timeout")


def cuda_devices() -> int:
    """How many CUDA GPUs the driver sees, asked of libcuda itself (no framework is imported,
    so a JAX-only run never loads torch, and no CUDA context is made)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when the driver sees a GPU, else ``cpu``; ``cuda``/``cpu`` checked.

    On the CPU, Triton kernels run in Triton's interpreter: TRITON_INTERPRET is set here,
    before any kernel module is imported (Triton reads it when a kernel is defined).
    """
    device = device.lower()
    if device not in ("auto", "cuda", "cpu"):
        raise Unsupported(f"unknown device {device!r}: choose auto, cuda or cpu")
    gpus = cuda_devices() if device != "cpu" else 0
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    if device == "cuda" and not gpus:
        raise Unsupported("--device cuda was asked for, but no CUDA GPU is visible")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def make_problem(entry: KernelEntry, case: Case, device: str, seed: int = 0, arrays=None):
    """The framework adapter's problem object for one kernel and case (imports lazily)."""
    if entry.framework == "torch":
        if entry.sequence_parallel:
            from lattnbench.adapters.sharded import ShardedTorchProblem
            return ShardedTorchProblem(entry, case, device, seed, arrays)
        from lattnbench.adapters.torch_problem import TorchProblem
        return TorchProblem(entry, case, device, seed, arrays)
    from lattnbench.adapters.jax_problem import JaxProblem
    return JaxProblem(entry, case, device, seed, arrays)


def base_row(entry: KernelEntry, case: Case, device: str, mode: str, metric: str) -> dict:
    row = {"kernel": entry.name, "family": entry.family, "framework": entry.framework,
           "device": device, **case.fields(gated=family(entry.family).gated), "mode": mode, "metric": metric}
    if entry.sequence_parallel:  # every row of a sequence-parallel kernel says how it was split
        row["world_size"] = case.world_size
        row["seqlen_per_rank"] = -(-case.seqlen // case.world_size)  # the largest shard
    return row


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line; a message whose first line only says where (a Triton
    CompilationError's ``at 11:4:``) gets its last line, the actual error, appended."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    msg = text[0] if text else ""
    if msg.endswith(":") and len(text) > 1:
        msg = f"{msg} {text[-1]}"
    return f"{type(exc).__name__}: {msg}"[:300]


def classify(exc: BaseException, entry: KernelEntry) -> tuple[str, str]:
    """(status, reason) for an exception raised while measuring a point."""
    if isinstance(exc, Unsupported):
        return "unsupported", str(exc)
    if isinstance(exc, PointTimeout):
        return "timeout", str(exc)
    oom = False
    if entry.framework == "torch":
        from lattnbench.adapters.torch_problem import is_oom
        oom = is_oom(exc)
    else:
        from lattnbench.adapters.jax_problem import is_oom
        oom = is_oom(exc)
    return ("oom", one_line(exc)) if oom else ("error", one_line(exc))


def rank_share(case: Case) -> Case:
    """The part of ``case`` one rank holds (the largest shard), as a world-size-1 case."""
    if case.world_size == 1:
        return case
    return case.with_(seqlen=-(-case.seqlen // case.world_size), varlen=None, world_size=1)


def point_gate(entry: KernelEntry, case: Case, device: str) -> tuple[str, str] | None:
    """(status, reason) when the kernel cannot run the case here (unavailable / unsupported), else None."""
    reason = entry.available(device)
    if reason is not None:
        return "unavailable", reason
    reason = entry.supports(case, device)
    if reason is not None:
        return "unsupported", reason
    if device == "cpu" and entry.interpreted_on_cpu:
        from lattnbench.harness import interpreter_bf16, interpreter_calls

        interpreter_calls.install()
        if not interpreter_bf16.install() and case.dtype == "bf16":
            return "unsupported", ("this Triton's interpreter computes bf16 on its bit patterns (triton#11584) "
                                   "in a form lattnbench cannot correct; bf16 is checked on the GPU")
    return None


def _finite(result) -> bool:
    """True when every array in a (nested) result is free of NaN/Inf."""
    import numpy as np

    stack = [result]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        if isinstance(x, (tuple, list)):
            stack.extend(x)
        elif hasattr(x, "detach"):
            import torch
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                return False
        elif hasattr(x, "dtype") and hasattr(x, "shape"):
            if not np.isfinite(np.asarray(x, dtype=np.float32)).all():
                return False
    return True


def _cleanup(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch
        torch.cuda.empty_cache()


@dataclass
class Sweeper:
    """Runs speed / memory points and hands each finished row to ``emit``."""

    device: str
    emit: Callable[[list[dict]], None]
    ceilings: dict
    budget_s: float = 0.5
    rounds: int | None = None  # rounds per speed point: None is SPEED_ROUNDS on a GPU, 1 on a CPU
    settle_c: float | None = None  # wait for the GPU to cool to this temperature before a point
    breakdown: bool = False  # also profile each timed mode: the time of every kernel a call launches

    def _gate(self, entry: KernelEntry, case: Case, modes: Iterable[str], metric: str) -> list[dict] | None:
        """Rows for points that cannot run (unavailable / unsupported / oom), or None to go ahead.

        Memory sense: a mode whose estimated need (``lattnbench.harness.memory_fit``) exceeds what
        the device has free is recorded as ``oom`` without running. When only some modes of
        the point are too big, their rows are emitted here and they are dropped from ``modes``
        (this point's own list) so that the others still run.
        """
        gated = point_gate(entry, case, self.device)
        if gated is None:
            from lattnbench.harness.memory_fit import too_big
            from lattnbench.measure.memory_estimate import free_bytes

            free = free_bytes(self.device)
            mine = rank_share(case)  # each GPU holds its shard only
            big = {m: r for m in modes if (r := too_big(entry, mine, m, self.device, free)) is not None}
            if not big:
                return None
            rows = self._rows(entry, case, list(big), metric, "oom", big)
            if len(big) == len(modes):
                return rows
            self.emit(rows)
            modes[:] = [m for m in modes if m not in big]
            return None
        return self._rows(entry, case, modes, metric, *gated)

    def _rows(self, entry, case, modes, metric, status: str, reason: str | dict[str, str]) -> list[dict]:
        """One row per mode with a status and a reason (one for all, or one per mode)."""
        why = reason if isinstance(reason, dict) else dict.fromkeys(modes, reason)
        return [{**base_row(entry, case, self.device, m, metric), "status": status, "reason": why[m]}
                for m in modes]

    def speed(self, entry: KernelEntry, case: Case, modes: Iterable[str], run: int = 0) -> list[dict]:
        """Time each mode with every timer; one row per mode (``timer`` names the tables' one)."""
        from lattnbench.measure.roofline import floor_ms
        from lattnbench.measure.timing import measure_point

        modes = list(modes)
        if not modes:
            return []
        rows = self._gate(entry, case, modes, "time_ms")
        if rows is not None:
            self.emit(rows)
            return rows
        rows, problem = [], None
        interpreted = self.device == "cpu" and entry.interpreted_on_cpu
        try:
            problem = make_problem(entry, case, self.device)
            backend = timing_backend(problem, self.device)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row
            status, reason = classify(exc, entry)
            rows = self._rows(entry, case, modes, "time_ms", status, reason)
            self.emit(rows)
            return rows
        settled = None
        if self.settle_c is not None and self.device != "cpu":
            from lattnbench.measure import clocks

            settled = clocks.settle(self.settle_c)
        timers = ("device",) if interpreted else ("device", "latency")
        graphs = not interpreted and problem.graph_timer
        rounds = self.rounds if self.rounds is not None else (1 if self.device == "cpu" else SPEED_ROUNDS)
        timed: dict[str, tuple] = {}  # mode -> (call, PointTiming, clocks before, clocks after)
        failed: dict[str, tuple[str, str]] = {}
        stopped: set[str] = set()     # a later round failed: the earlier rounds' samples stand
        for r in range(rounds):
            for mode in modes:
                if mode in failed or mode in stopped:
                    continue
                try:
                    if r == 0:
                        t0 = time.perf_counter()  # the first call compiles and autotunes: reported apart
                        if not _finite(problem.fwd() if mode == "fwd" else problem.fwdbwd()):
                            raise _NonFinite()
                        first = time.perf_counter() - t0
                        call = {"fwd": problem.fwd, "fwdbwd": problem.fwdbwd}.get(mode) or problem.bwd_callable()
                        before = clock_sample(self.device)
                    else:
                        call = timed[mode][0]
                    pt = measure_point(call, backend, budget_s=self.budget_s / rounds, timers=timers,
                                       min_reps=3 if interpreted else 5,
                                       warm_ms=timed[mode][1].warm_ms if r else None,
                                       clock=lambda: clock_sample(self.device))
                    if not pt.timers["device"].ok:
                        raise RuntimeError(pt.timers["device"].reason or "the device timer took no sample")
                    if r == 0:
                        pt.first_call_s = max(first, pt.first_call_s)
                        timed[mode] = (call, pt, before, None)
                    else:
                        timed[mode][1].merge(pt)
                except _NonFinite:
                    failed[mode] = ("fail", "NaN/Inf in the output")
                except Exception as exc:  # noqa: BLE001
                    if r == 0:
                        failed[mode] = classify(exc, entry)
                    else:
                        stopped.add(mode)
            if graphs:
                self._graph_timers(timed, backend, rounds, r)
        after = clock_sample(self.device)
        profiles = {mode: self._breakdown(call, backend, pt) for mode, (call, pt, _, _) in timed.items()} \
            if self.breakdown else {}
        for mode, (call, pt, before, _) in timed.items():
            if rounds > 1:
                for t in pt.timers.values():
                    if t.ok:
                        t.method += f"; {rounds} rounds, the timers interleaved"
            timed[mode] = (call, pt, before, after)
        for mode in modes:
            row = base_row(entry, case, self.device, mode, "time_ms")
            if mode in timed:
                _, pt, before, after = timed[mode]
                row.update(timing_fields(pt, run, before, after), interpreted=interpreted, status="ok", reason=None)
                if settled:
                    row.update(settled)
                row.update(problem.row_fields(mode, "time_ms"))
                if mode in profiles:
                    row["breakdown"] = profiles[mode]
                fam = family(entry.family)
                floor = floor_ms(fam.bytes_moved(case, mode), fam.flops(case, mode), self.ceilings)
                if floor is not None:
                    row["floor_ms"] = floor
                    row["pct_floor"] = 100.0 * floor / row["median"]
            else:
                status, reason = failed[mode]
                row.update(status=status, reason=reason,
                           runs=[{"run": run, "status": status, "reason": reason}])
            rows.append(row)
        self.emit(rows)
        del problem
        _cleanup(self.device)
        return rows

    def _breakdown(self, call, backend, pt) -> dict:
        """The kernels of one timed call (``measure.breakdown``), over enough calls for about
        50 ms of device time (2 to 50); a profiler that fails leaves the point's timings alone and
        its reason in the breakdown."""
        from lattnbench.measure.breakdown import kernel_breakdown

        per_ms = pt.timers["device"].median
        calls = max(2, min(50, round(50.0 / per_ms))) if per_ms > 0 else 2
        try:
            return kernel_breakdown(call, backend.sync, calls, cuda=self.device == "cuda")
        except Exception as exc:  # noqa: BLE001 - the timings stand without it
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}".splitlines()[0]}

    def _graph_timers(self, timed: dict[str, tuple], backend, rounds: int = 1, r: int = 0) -> None:
        """The graph timer of every timed mode in round ``r`` of ``rounds``, after all their device
        and latency timers of that round.

        A capture that fails (and the CUPTI fallback) then cannot touch the other numbers of the
        round; only CUDA-graph replays run again in later rounds. bwd alone is not captured: its
        graph comes from a forward recorded outside the capture, on another stream; with fwd and
        fwdbwd measured, its graph time is their difference, taken after the last round.
        """
        from lattnbench.measure.timing import TimerResult, time_graph

        budget_ms = self.budget_s * 1e3 / 2 / rounds
        derive = "bwd" in timed and {"fwd", "fwdbwd"} <= timed.keys()
        for mode, (call, pt, _, _) in timed.items():
            if mode == "bwd" and derive:
                continue
            have = pt.timers.get("graph")
            if have is None:
                pt.timers["graph"] = have = time_graph(call, backend, budget_ms, pt.timers["device"].median)
                if have.ok:
                    have.add_clock(clock_sample(self.device))
            elif have.ok and have.method.startswith(REPLAY):
                more = time_graph(call, backend, budget_ms, pt.timers["device"].median)
                if more.ok and more.method == have.method:
                    have.samples_ms.extend(more.samples_ms)
                    have.add_clock(clock_sample(self.device))
        if derive and r == rounds - 1:
            fwd, both = (timed[m][1].get("graph") for m in ("fwd", "fwdbwd"))
            if fwd is not None and both is not None:
                timed["bwd"][1].timers["graph"] = TimerResult(
                    "graph", [max(both.median - fwd.median, 0.0)],
                    "graph(fwdbwd) - graph(fwd) of the same point (bwd alone is not captured)")
            else:
                why = next((t.reason for t in (timed[m][1].timers.get("graph") for m in ("fwd", "fwdbwd"))
                            if t is not None and not t.ok and t.reason), "no graph time of fwd and fwdbwd")
                timed["bwd"][1].timers["graph"] = TimerResult("graph", status="unavailable", reason=why)

    def memory(self, entry: KernelEntry, case: Case, modes: Iterable[str]) -> list[dict]:
        modes = list(modes)
        if not modes:
            return []
        rows = self._gate(entry, case, modes, "peak_mb")
        if rows is not None:
            self.emit(rows)
            return rows
        rows = []
        for mode in modes:  # a fresh problem per mode: nothing of one mode's graph lingers
            row = base_row(entry, case, self.device, mode, "peak_mb")
            problem = None
            try:
                problem = make_problem(entry, case, self.device)
                peak, method = problem.peak_mb(mode)
                row.update(median=peak, p20=peak, p80=peak, samples=1, memory_method=method,
                           status="ok", reason=None, **problem.row_fields(mode, "peak_mb"))
            except Exception as exc:  # noqa: BLE001
                status, reason = classify(exc, entry)
                row.update(status=status, reason=reason)
            del problem
            _cleanup(self.device)
            rows.append(row)
            self.emit([row])
        return rows


class _NonFinite(Exception):
    pass


_BACKENDS: dict = {}


def timing_backend(problem, device: str):
    """The timers' backend for a problem: torch on CUDA, JAX on a GPU, or the host clock."""
    from lattnbench.measure import timing

    if device != "cuda":
        return timing.host_backend(problem.sync)
    if problem.entry.framework == "torch":
        if "torch" not in _BACKENDS:
            _BACKENDS["torch"] = timing.torch_cuda_backend(device)
        return _BACKENDS["torch"]
    if "jax" not in _BACKENDS:
        _BACKENDS["jax"] = timing.jax_gpu_backend(problem.dev)
    return _BACKENDS["jax"]


def clock_sample(device: str) -> dict | None:
    if device != "cuda":
        return None
    from lattnbench.measure.clocks import sample
    return sample()


def timing_fields(pt, run: int = 0, before: dict | None = None, after: dict | None = None) -> dict:
    """A speed row's measured fields: the device timer's numbers, every timer's block, one run."""
    from lattnbench.measure.clocks import throttled
    from lattnbench.measure.timing import quantile

    dev = pt.timers["device"]
    med = {name: (pt.get(name).median if pt.get(name) else None) for name in ("graph", "latency", "host")}
    hot = throttled(before, after)
    fields = {
        "timer": "device", "median": dev.median, "p20": quantile(dev.samples_ms, 0.2),
        "p80": quantile(dev.samples_ms, 0.8), "samples": len(dev.samples_ms),
        "samples_ms": [round(x, 5) for x in dev.samples_ms],
        "graph_ms": med["graph"], "latency_ms": med["latency"], "host_ms": med["host"],
        "host_bound": pt.host_bound(), "first_call_s": round(pt.first_call_s, 3),
        "warmup_calls": pt.warmup_calls, "throttled": hot,
    }
    run_entry = {"run": run, "status": "ok", "median": fields["median"], "p20": fields["p20"],
                 "p80": fields["p80"], **{f"{k}_ms": v for k, v in med.items()}, "throttled": hot,
                 "timers": {name: t.summary() for name, t in pt.timers.items()},
                 "clocks": {"before": before, "after": after} if (before or after) else None}
    fields["runs"] = [run_entry]
    fields["repeat"] = 1
    fields["run_spread"] = 0.0
    return fields


def summarize(rows: list[dict]) -> dict[str, int]:
    """Count rows by status, for the closing line and the exit code."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def any_failed(rows: list[dict]) -> bool:
    return any(r["status"] in FAILED for r in rows) or any(
        r.get("metric") == "err_ratio" and isinstance(r.get("median"), float) and math.isnan(r["median"])
        for r in rows)


def execute(task, registry, device: str, ceilings: dict) -> list[dict]:
    """Run one task here and return its rows (speed, memory or check-grad)."""
    entry = registry[task.kernel]
    if task.kind in ("check-grad", "check-rows"):
        from lattnbench.harness.verify import check, check_rows

        return (check if task.kind == "check-grad" else check_rows)(entry, task.case, device, task.seed,
                                                                    table=task.tolerance)
    rows: list[dict] = []
    sweeper = Sweeper(device, rows.extend, ceilings, budget_s=task.budget, settle_c=task.settle_c,
                      breakdown=task.breakdown)
    if task.kind == "speed":
        sweeper.speed(entry, task.case, list(task.modes), run=task.run)
    else:
        sweeper.memory(entry, task.case, list(task.modes))
    return rows


def failed_rows(task, entry: KernelEntry, device: str, status: str, reason: str) -> list[dict]:
    """The rows a task would have produced, each with ``status`` and ``reason`` (timeouts, crashes)."""
    if task.kind in ("check-grad", "check-rows"):
        from lattnbench.harness.verify import expected_tensors, rows_to_check, tensor_tolerance

        checks = [{}] if task.kind == "check-grad" else [{"check": f"row {b}"} for b in rows_to_check(task.case.batch)]
        return [{**base_row(entry, task.case, device, "fwdbwd", "err_ratio"), "tensor": t, **c,
                 "tol": tensor_tolerance(entry, task.case, t, task.tolerance), "tol_table": task.tolerance,
                 "status": status, "reason": reason}
                for c in checks for t in expected_tensors(entry, task.case)]
    rows = [{**base_row(entry, task.case, device, m, task.metric), "status": status, "reason": reason}
            for m in task.modes]
    if task.kind == "speed":
        for r in rows:
            r["runs"] = [{"run": task.run, "status": status, "reason": reason}]
    return rows
