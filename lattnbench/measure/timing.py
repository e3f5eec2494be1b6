"""Timers: three ways to time one call. Every speed row names the timer behind its numbers.

``device`` (the tables' timer)
    Repetitions enqueued back to back with the L2 flushed between them and the host free to run
    ahead, as in a training step. torch on CUDA brackets each repetition with CUDA events and
    synchronises once at the end, as ``triton.testing.do_bench`` does. Where no device events
    exist (JAX, the CPU) a sample is a batch of back-to-back calls closed by one sync, divided
    by the batch; on a GPU each call of the batch is preceded by an L2 flush whose own time,
    measured the same way in a batch run just before, is subtracted.
``graph``
    Device time without host work. torch on CUDA replays a CUDA graph of the call, the L2 flushed
    before each replay outside the graph. Where capture fails, and for JAX on a GPU, it is the
    busy time of the call's GPU activity (the union of its kernel and copy intervals, as CUPTI
    records them through ``torch.profiler``): idle gaps that host work leaves are excluded.
``latency`` and ``host``
    One synchronised call end to end after the device went idle, and the host time spent inside
    the call before it returns (the time to enqueue it), from the same repetitions.

Warm-up runs until compilation and autotuning are done; the first call's time is kept in its own
field and never in the samples. On a GPU a speed point takes its samples in SPEED_ROUNDS rounds,
each running every timer of every mode: a GPU under its power cap changes clock within seconds,
and a timer that ran only after the others would read that drift as its own.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lattnbench.results import HOST_BOUND, TIMERS, quantile  # noqa: F401 - part of the timers' API

#: aim a host-clock batch at this many ms, with at most BATCH_MAX calls
BATCH_TARGET_MS = 10.0
BATCH_MAX = 100
#: rounds of a GPU speed point (the timers take turns; each round gets its share of the budget)
SPEED_ROUNDS = 3
#: how a CUDA-graph replay names its method (the only graph timer repeated in later rounds)
REPLAY = "CUDA-graph replay"
#: the L2 flush writes more than the largest L2 of the GPUs it runs on
FLUSH_BYTES = 256 * 2**20


@dataclass
class TimerResult:
    """One timer's samples (ms per call) and how they were taken, or why it could not run."""

    name: str
    samples_ms: list[float] = field(default_factory=list)
    method: str = ""
    status: str = "ok"           # ok | unavailable | error
    reason: str | None = None
    # NVML samples (``clocks.sample``) taken as this timer's samples ended, one a round: the timers
    # load the GPU differently (back to back, one call at a time, replays), and so its clocks
    clocks: list[dict] = field(default_factory=list)

    def add_clock(self, sample: dict | None) -> None:
        """Keep an NVML sample taken as this timer's samples ended (none when NVML gave none)."""
        if sample:
            self.clocks.append(sample)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    def summary(self) -> dict:
        """The JSON form kept in a row's ``timers`` block (every sample included)."""
        if not self.ok:
            return {"status": self.status, "reason": self.reason, "method": self.method}
        xs = self.samples_ms
        out = {"status": "ok", "median": self.median, "p20": quantile(xs, 0.2), "p80": quantile(xs, 0.8),
               "samples": len(xs), "samples_ms": [round(x, 5) for x in xs], "method": self.method}
        if self.clocks:
            out["clocks"] = self.clocks
        return out


@dataclass
class PointTiming:
    """All timers of one call, with the warm-up that preceded them."""

    first_call_s: float
    warmup_calls: int
    timers: dict[str, TimerResult]
    warm_ms: float = 0.0  # the last warm-up call (ms): the estimate the timers sized their samples by

    def get(self, name: str) -> TimerResult | None:
        t = self.timers.get(name)
        return t if t is not None and t.ok else None

    def merge(self, later: PointTiming) -> None:
        """Add a later round's samples, timer by timer (a timer first ok there is taken whole)."""
        for name, t in later.timers.items():
            mine = self.timers.get(name)
            if mine is None or not mine.ok:
                if t.ok or mine is None:
                    self.timers[name] = t
            elif t.ok:
                mine.samples_ms.extend(t.samples_ms)
                mine.clocks.extend(t.clocks)

    def host_bound(self) -> bool | None:
        """device or latency > HOST_BOUND x graph; None without a graph time."""
        graph = self.get("graph")
        if graph is None:
            return None
        slow = [t.median for t in (self.get("device"), self.get("latency")) if t is not None]
        return any(x > HOST_BOUND * graph.median for x in slow)


# ---- backends ----------------------------------------------------------------------------------

@dataclass
class Backend:
    """What the timers need of a framework on a device.

    ``sync(result)`` waits for a result; ``flush()`` enqueues an L2 flush (None: no flush);
    ``events`` marks torch on CUDA (device events and CUDA graphs exist); ``gpu`` any GPU run
    (CUPTI busy time exists).
    """

    name: str
    sync: Callable[[object], None]
    flush: Callable[[], object] | None = None
    events: bool = False
    gpu: bool = False


def host_backend(sync: Callable[[object], None], name: str = "cpu") -> Backend:
    return Backend(name, sync)


def torch_cuda_backend(device: str = "cuda") -> Backend:
    import torch

    buf = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device)
    return Backend("torch-cuda", lambda _r=None: torch.cuda.synchronize(), flush=buf.zero_, events=True, gpu=True)


def jax_gpu_backend(device) -> Backend:
    """JAX on a GPU: block_until_ready; the flush is a jitted in-place write of FLUSH_BYTES."""
    import jax
    import jax.numpy as jnp

    state = {"buf": jax.device_put(jnp.zeros(FLUSH_BYTES // 4, jnp.int32), device)}
    bump = jax.jit(lambda b: b + 1, donate_argnums=0)

    def flush():
        state["buf"] = bump(state["buf"])
        return state["buf"]

    def sync(result=None):
        jax.block_until_ready(result if result is not None else state["buf"])

    flush()
    sync()
    return Backend("jax-gpu", sync, flush=flush, gpu=True)


# ---- warm-up -----------------------------------------------------------------------------------

def _sync_call(call: Callable[[], object], sync: Callable[[object], None]) -> float:
    t0 = time.perf_counter()
    sync(call())
    return (time.perf_counter() - t0) * 1e3


def warm_up(call: Callable[[], object], sync: Callable[[object], None], max_warmup: int = 20) -> tuple[float, int, float]:
    """(first call s, warm-up calls, last warm call ms): calls until two in a row agree within 10 %.

    The first call compiles and autotunes; its time is reported apart, never in the samples.
    """
    t0 = time.perf_counter()
    sync(call())
    first = time.perf_counter() - t0
    prev, warm = _sync_call(call, sync), 1
    while warm < max_warmup:
        cur = _sync_call(call, sync)
        warm += 1
        if abs(cur - prev) <= 0.1 * max(prev, 1e-6):
            return first, warm, cur
        prev = cur
    return first, warm, prev


def _rep_count(budget_ms: float, est_ms: float, min_reps: int, max_reps: int) -> int:
    return int(max(min_reps, min(max_reps, budget_ms / max(est_ms, 1e-3))))


# ---- the timers --------------------------------------------------------------------------------

def time_device(call: Callable[[], object], be: Backend, budget_ms: float, est_ms: float,
                min_reps: int = 5, max_reps: int = 200) -> TimerResult:
    """Back-to-back repetitions, L2 flushed between them, the host free to run ahead."""
    if be.events:
        probe = _events_pass(call, be, 5)  # estimate from device time, as do_bench does
        reps = _rep_count(budget_ms, statistics.median(probe), min_reps, max_reps)
        return TimerResult("device", _events_pass(call, be, reps),
                           "CUDA events per repetition, enqueued back to back, L2 flushed between, one sync")
    # on a GPU a batch has at least two calls, so the host work of all but the first is hidden
    per = max(2 if be.gpu else 1, min(BATCH_MAX, int(BATCH_TARGET_MS / max(est_ms, 1e-3))))
    reps = _rep_count(budget_ms, est_ms * per, min_reps, max_reps)
    how = f"host clock, batches of {per} back-to-back calls, one sync each"
    if be.flush is None:
        return TimerResult("device", _batches(call, be, per, reps), how)
    # each batch pays for its own flush-only batch, run just before it: a flush cost taken from a
    # separate window would be off by however much the host's load moved in between
    flushes, samples = [], []
    for _ in range(reps):
        flushes.append(_batches(lambda: None, be, per, 1)[0])
        samples.append(max(_batches(call, be, per, 1)[0] - flushes[-1], 0.0))
    how += f", an L2 flush before each call (its own batch's time subtracted, median {statistics.median(flushes):.4f} ms)"
    return TimerResult("device", samples, how)


def _events_pass(call: Callable[[], object], be: Backend, reps: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if be.flush is not None:
            be.flush()
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _batches(call: Callable[[], object], be: Backend, per: int, reps: int) -> list[float]:
    """``reps`` samples, each ``per`` back-to-back calls (flush before each on a GPU) and one sync."""
    out: list[float] = []
    if be.gpu:
        be.sync(None)
    for _ in range(reps):
        t0 = time.perf_counter()
        result = None
        for _ in range(per):
            if be.flush is not None:
                be.flush()
            result = call()
        be.sync(result)
        out.append((time.perf_counter() - t0) * 1e3 / per)
    return out


def time_latency(call: Callable[[], object], be: Backend, reps: int) -> tuple[TimerResult, TimerResult]:
    """(latency, host): one synchronised call after the device went idle; the host's time in it."""
    lat, host = [], []
    for _ in range(reps):
        if be.flush is not None:
            be.flush()
        if be.gpu:
            be.sync(None)
        t0 = time.perf_counter()
        result = call()
        t1 = time.perf_counter()
        be.sync(result)
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e3)
        lat.append((t2 - t0) * 1e3)
    return (TimerResult("latency", lat, "one call after a sync, to its result (host clock)"),
            TimerResult("host", host, "host time inside one call, until it returns (enqueue)"))


def time_graph(call: Callable[[], object], be: Backend, budget_ms: float, est_ms: float,
               min_reps: int = 5, max_reps: int = 100) -> TimerResult:
    """Device time without host work: CUDA-graph replay (torch), else CUPTI busy time."""
    if not be.gpu:
        return TimerResult("graph", status="unavailable", reason="needs a GPU (CUDA graphs / CUPTI)")
    note = ""
    if be.events:
        try:
            return _graph_replay(call, be, budget_ms, min_reps, max_reps)
        except Exception as exc:  # noqa: BLE001 - a call that cannot be captured falls back to CUPTI
            note = f"; CUDA-graph capture failed ({_one_line(exc)})"
            _recover_cuda()
    try:
        reps = _rep_count(budget_ms, est_ms, min_reps, max_reps)
        samples = busy_time(call, be, reps)
    except Exception as exc:  # noqa: BLE001
        return TimerResult("graph", status="error", reason=f"{_one_line(exc)}{note}")
    return TimerResult("graph", samples, "CUPTI busy time of the call's GPU activity (torch.profiler), "
                       f"L2 flushed before each call{note}")


def _graph_replay(call, be: Backend, budget_ms: float, min_reps: int, max_reps: int) -> TimerResult:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture needs a warm call on a side stream (autograd included)
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kept = call()
    try:
        probe = _replays(graph, be, 3)
        reps = _rep_count(budget_ms, statistics.median(probe), min_reps, max_reps)
        samples = _replays(graph, be, reps)
    finally:
        del kept
        graph.reset()
        torch.cuda.synchronize()
    return TimerResult("graph", samples, f"{REPLAY}, L2 flushed before each replay (outside the graph)")


def _replays(graph, be: Backend, reps: int) -> list[float]:
    return _events_pass(graph.replay, be, reps)


def _recover_cuda() -> None:
    try:
        import torch

        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - the next timer will report what is wrong
        pass


#: the kernel name of the flush used inside busy-time windows (excluded from the busy time)
_FLUSH_KERNEL = "_lattnbench_l2_flush"


def busy_time(call: Callable[[], object], be: Backend, reps: int) -> list[float]:
    """Per call: the union of the GPU activity intervals (kernels, copies, memsets) CUPTI records.

    Each call runs alone (a sync on both sides) after an L2 flush issued through a kernel of its
    own name, which is left out of the union.
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    flush = _named_flush()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            torch.cuda.synchronize()
            be.sync(call())
            torch.cuda.synchronize()
    spans, flushes = [], []
    for ev in prof.profiler.kineto_results.events():
        if ev.device_type() != DeviceType.CUDA:
            continue
        start = ev.start_ns()
        if _FLUSH_KERNEL in ev.name():
            flushes.append(start)
        else:
            spans.append((start, start + ev.duration_ns()))
    if not spans:
        raise RuntimeError("CUPTI recorded no GPU activity for the call")
    return _busy_per_call(spans, sorted(flushes), reps)


def _busy_per_call(spans: list[tuple[int, int]], flush_starts: list[int], reps: int) -> list[float]:
    """Split the activity at each flush (one precedes every call) and merge each call's intervals."""
    bounds = flush_starts[:reps] if len(flush_starts) >= reps else []
    out = []
    if bounds:
        edges = [*bounds[1:], float("inf")]
        for lo, hi in zip(bounds, edges):
            mine = [s for s in spans if lo <= s[0] < hi]
            out.append(_union_ns(mine) / 1e6)
    else:  # the flushes were not seen: the mean over all calls
        out = [_union_ns(spans) / 1e6 / reps] * reps
    return out


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


_flush_fn: Callable[[], None] | None = None


def _named_flush() -> Callable[[], None]:
    """An L2 flush through a Triton kernel named _FLUSH_KERNEL (so busy time can leave it out)."""
    global _flush_fn
    if _flush_fn is None:
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _lattnbench_l2_flush(buf, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(buf + offs, tl.zeros([BLOCK], tl.int32), mask=offs < n)

        buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        n, block = buf.numel(), 4096
        _flush_fn = lambda: _lattnbench_l2_flush[(triton.cdiv(n, block),)](buf, n, BLOCK=block)  # noqa: E731
    return _flush_fn


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


# ---- one point ---------------------------------------------------------------------------------

def measure_point(call: Callable[[], object], be: Backend, *, budget_s: float = 0.5,
                  timers: Sequence[str] = ("device", "graph", "latency"), min_reps: int = 5,
                  max_reps: int = 200, warm_ms: float | None = None,
                  clock: Callable[[], dict | None] | None = None) -> PointTiming:
    """Warm up, then every asked timer; a timer that fails is recorded as such, the others stand.

    The device timer gets ``budget_s`` of samples; graph and latency half as much each. graph runs
    last: a capture that fails cannot disturb the others. ``warm_ms``: the call is warm already
    (a later round of a point) and this is its warm-up estimate; no warm-up runs. ``clock``: an
    NVML sampler (``clocks.sample``), read as each timer ends (``TimerResult.clocks``).
    """
    first, warm, est = (0.0, 0, warm_ms) if warm_ms is not None else warm_up(call, be.sync)
    budget_ms = budget_s * 1e3
    out: dict[str, TimerResult] = {}

    def ended(*results: TimerResult) -> None:
        s = clock() if clock is not None else None
        for t in results:
            t.add_clock(s)

    if "device" in timers:
        out["device"] = time_device(call, be, budget_ms, est, min_reps, max_reps)
        ended(out["device"])
    if "latency" in timers:
        reps = _rep_count(budget_ms / 2, est, min_reps, max(min_reps, max_reps // 4))
        out["latency"], out["host"] = time_latency(call, be, reps)
        ended(out["latency"], out["host"])
    if "graph" in timers:
        out["graph"] = time_graph(call, be, budget_ms / 2, est, min_reps, max(min_reps, max_reps // 2))
        ended(out["graph"])
    return PointTiming(first, warm, out, est)


def do_bench_ms(call: Callable[[], object]) -> float:
    """``triton.testing.do_bench``'s median of the same call (the device timer's yardstick)."""
    from triton.testing import do_bench

    return float(do_bench(call, warmup=25, rep=100, return_mode="median"))
