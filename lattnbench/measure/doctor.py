"""The doctor: can this machine be trusted to time kernels, and do its timers agree?

It reports the machine, the measured ceilings (copy GB/s, bf16 TFLOP/s), the GPU clocks and a
timer self-check: fixed reference kernels, sized to be device-bound and long enough to time
well, each timed by every timer of ``lattnbench.measure.timing`` and by ``triton.testing.do_bench``.
On these kernels the timers measure the same thing, so their medians must agree within
TOLERANCES; when they do not, a timer (or the machine: clocks, a neighbour) is broken and no
speed table from here can be trusted. On a CPU only the host-clock timers exist: they run, their
numbers are shown for information, and the verdict cannot fail.

Every measuring step is a field of ``Probe``, so tests hand in fake timers and clocks.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

SCHEMA = "lattnbench.measure.doctor/1"
#: the timers each reference is read by, in the order they are shown
READINGS = ("device", "do_bench", "graph", "latency", "host")


@dataclass(frozen=True)
class Tolerance:
    """``a`` against ``b``: |a/b - 1| <= bound, judged when both medians are >= min_ms.

    ``bound`` None: shown for information, never judged.
    """

    a: str
    b: str
    bound: float | None
    min_ms: float
    why: str


#: the one table of timer tolerances (GPU): see each ``why``
TOLERANCES: tuple[Tolerance, ...] = (
    Tolerance("device", "do_bench", 0.03, 0.5,
              "the device timer is do_bench's method (CUDA events, back to back, L2 flushed "
              "between): the methodology requires agreement within 3 % for calls of 0.5 ms or more"),
    Tolerance("graph", "device", 0.05, 0.5,
              "on a device-bound kernel, replay without host work must match back-to-back time; "
              "5 % leaves room for the launch gaps a graph removes and the flush placement"),
    Tolerance("latency", "graph", None, 0.0,
              "information: one synchronised call adds launch and sync overhead (tens of µs)"),
    Tolerance("host", "latency", None, 0.0,
              "information: the share of a call the host spends enqueueing it"),
)
#: on a CPU there is no device clock to check against: information only
CPU_TOLERANCES: tuple[Tolerance, ...] = (
    Tolerance("device", "latency", None, 0.0,
              "information: host-clock batches against one synchronised call of the same op"),
    Tolerance("host", "latency", None, 0.0,
              "information: on a CPU the call runs while it is 'enqueued', so host ~ latency"),
)
#: verdicts that fail the doctor: a disagreement, or a judged timer a GPU could not produce
FAILING = ("DISAGREE", "missing")
#: seconds of device-timer samples per reference (graph and latency get half each), over ROUNDS
BUDGET_S = 1.0
#: the timers take turns in this many rounds, so a clock that drifts while they run (a GPU
#: settling under its power cap) moves every timer alike instead of the one that ran last
ROUNDS = 5


@dataclass
class Reading:
    """One timer's median on one reference (ms), or why there is none; ``rounds``: its median in
    each interleaved round."""

    ms: float | None
    method: str = ""
    reason: str | None = None
    rounds: list[float] = field(default_factory=list)


@dataclass
class Timed:
    """A reference's readings, and whether NVML saw the clocks throttle meanwhile."""

    readings: dict[str, Reading]
    throttled: bool | None = None


@dataclass(frozen=True)
class Reference:
    """A fixed kernel: ``make()`` builds its inputs and returns the call to time."""

    name: str
    what: str
    make: Callable[[], Callable[[], object]]


@dataclass
class Probe:
    """What the doctor measures on one machine; every step is swappable (tests fake them)."""

    gpu: bool
    machine: Callable[[], dict]
    ceilings: Callable[[], dict | None]   # None: not measured on this machine
    clocks: Callable[[], dict]
    references: Sequence[Reference]
    time: Callable[[Reference], Timed]
    tolerances: Sequence[Tolerance]
    notes: Sequence[str] = ()


@dataclass
class Check:
    """One comparison of two timers on one reference."""

    reference: str
    a: str
    b: str
    a_ms: float | None
    b_ms: float | None
    diff: float | None          # a / b - 1
    bound: float | None
    verdict: str                # ok | DISAGREE | noisy | short | missing | info
    why: str = ""


@dataclass
class Diagnosis:
    gpu: bool
    machine: dict
    ceilings: dict | None
    ceilings_reason: str | None
    clocks: dict
    references: list[dict]
    checks: list[Check]
    tolerances: Sequence[Tolerance]
    notes: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)  # versions, commit and time of the run (lattnbench.env)

    @property
    def verdict(self) -> str:
        """disagree | unmeasured | noisy (a pair of timers judged on no reference, every one too noisy)
        | ok | info (nothing judged: a CPU, or every reference call too short)."""
        verdicts = {c.verdict for c in self.checks}
        if "DISAGREE" in verdicts:
            return "disagree"
        if "missing" in verdicts:
            return "unmeasured"
        judged: dict[tuple[str, str], bool] = {}
        for c in self.checks:
            if c.verdict in ("ok", "noisy"):
                judged[c.a, c.b] = judged.get((c.a, c.b), False) or c.verdict == "ok"
        if not judged:
            return "info"
        return "ok" if all(judged.values()) else "noisy"

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict in ("disagree", "unmeasured", "noisy") else 0

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "env": self.env, "gpu": self.gpu, "machine": self.machine, "ceilings": self.ceilings,
                "ceilings_reason": self.ceilings_reason, "clocks": self.clocks,
                "tolerances": [asdict(t) for t in self.tolerances], "references": self.references,
                "checks": [asdict(c) for c in self.checks], "notes": self.notes,
                "verdict": self.verdict, "exit_code": self.exit_code}


# ---- judging -----------------------------------------------------------------------------------

def judge(reference: str, readings: dict[str, Reading], tolerances: Sequence[Tolerance],
          gpu: bool) -> list[Check]:
    """Each tolerance's verdict on one reference's readings."""
    out = []
    for tol in tolerances:
        ra, rb = readings.get(tol.a), readings.get(tol.b)
        a = ra.ms if ra is not None else None
        b = rb.ms if rb is not None else None
        c = Check(reference, tol.a, tol.b, a, b, None, tol.bound, "info", tol.why if tol.bound is None else "")
        if a is None or b is None:
            gone = [(name, r) for name, r in ((tol.a, ra), (tol.b, rb)) if r is None or r.ms is None]
            c.why = "; ".join(f"{name}: {(r.reason if r else None) or 'not measured'}" for name, r in gone)
            c.verdict = "missing" if tol.bound is not None and gpu else "info"
        else:
            c.diff = a / b - 1 if b else None
            if tol.bound is None or c.diff is None:
                c.verdict = "info"
            elif min(a, b) < tol.min_ms:
                c.verdict, c.why = "short", f"shorter than {tol.min_ms:g} ms: not judged"
            elif abs(c.diff) <= tol.bound:
                c.verdict = "ok"
            elif _overlap(ra.rounds, rb.rounds):
                c.verdict = "noisy"
                c.why = (f"{tol.a} is {c.diff:+.1%} off {tol.b}, but their round medians overlap "
                         f"({_span(ra.rounds)} against {_span(rb.rounds)} ms): the clock moved more "
                         f"between rounds than ±{tol.bound:.0%}, so this reference cannot judge the timers")
            else:
                c.verdict = "DISAGREE"
                c.why = f"{tol.a} is {c.diff:+.1%} off {tol.b}, beyond ±{tol.bound:.0%}"
        out.append(c)
    return out


def _overlap(a: list[float], b: list[float]) -> bool:
    """Two timers' round medians overlap (both read in 2 rounds or more)."""
    return len(a) > 1 and len(b) > 1 and min(a) <= max(b) and min(b) <= max(a)


def _span(rounds: list[float]) -> str:
    return f"{min(rounds):.3f}–{max(rounds):.3f}"


def diagnose(probe: Probe) -> Diagnosis:
    """Run every step of ``probe``; a step that raises is reported, the others still run."""
    machine = probe.machine()
    ceilings, ceilings_reason = None, None
    try:
        ceilings = probe.ceilings()
    except Exception as exc:  # noqa: BLE001 - reported, the self-check still runs
        ceilings_reason = _one_line(exc)
    else:
        ceilings_reason = None if ceilings else "measured on a GPU only"
    clocks = probe.clocks()
    notes = list(probe.notes)
    refs, checks = [], []
    for ref in probe.references:
        try:
            timed = probe.time(ref)
        except Exception as exc:  # noqa: BLE001 - one reference failing is a finding, not a crash
            why = _one_line(exc)
            timed = Timed({name: Reading(None, reason=why) for name in READINGS})
        refs.append({"name": ref.name, "what": ref.what, "throttled": timed.throttled,
                     "timers": {name: asdict(r) for name, r in timed.readings.items()}})
        if timed.throttled:
            notes.append(f"{ref.name}: NVML saw the clocks throttle while timing; a disagreement may be theirs")
        checks.extend(judge(ref.name, timed.readings, probe.tolerances, probe.gpu))
    from lattnbench.env import collect

    return Diagnosis(probe.gpu, machine, ceilings, ceilings_reason, clocks, refs, checks,
                     probe.tolerances, notes, collect(with_gpu=False))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


# ---- the machines ------------------------------------------------------------------------------

def _cpu_machine() -> dict:
    from lattnbench.env import cpu_name

    return {"kind": "cpu", "name": cpu_name(), "cores": os.cpu_count()}


def _clocks() -> dict:
    from lattnbench.measure import clocks

    sample = clocks.sample()
    return {"sample": sample, "reason": None if sample else (clocks.unavailable_reason() or "no GPU")}


def _readings(pt, extra: dict[str, Reading]) -> dict[str, Reading]:
    out = {}
    for name in READINGS:
        if name in extra:
            out[name] = extra[name]
            continue
        t = pt.timers.get(name)
        if t is None:
            out[name] = Reading(None, reason="not run")
        elif t.ok:
            out[name] = Reading(round(t.median, 5), t.method)
        else:
            out[name] = Reading(None, t.method, t.reason or t.status)
    return out


#: a bf16 matmul and a copy large enough to be device-bound and past the 0.5 ms the timers are judged at
MATMUL_MNK = (8192, 4096, 8192)
COPY_BYTES = 3 * 2**29


def interleaved(rounds: int, *steps: Callable[[], dict[str, Reading]]) -> dict[str, Reading]:
    """Run ``steps`` in turn for ``rounds`` rounds, reversing their order every other round; each
    timer's reading is the median of its round medians (a timer failing in every round keeps its
    first reason)."""
    seen: dict[str, list[Reading]] = {}
    for i in range(rounds):
        for step in (steps if i % 2 == 0 else steps[::-1]):
            for name, reading in step().items():
                seen.setdefault(name, []).append(reading)
    out = {}
    for name, readings in seen.items():
        ok = [r.ms for r in readings if r.ms is not None]
        if not ok:
            out[name] = readings[0]
            continue
        out[name] = Reading(round(statistics.median(ok), 5),
                            f"{readings[0].method}; median of {len(ok)} interleaved rounds", rounds=ok)
    return out


def gpu_references() -> list[Reference]:
    def matmul():
        import torch

        m, n, k = MATMUL_MNK
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=c)

    def copy():
        import torch

        # An elementwise kernel, not copy_: a same-dtype copy_ is a DMA memcpy, which CUDA-graph
        # capture turns into a memcpy node that runs at another speed than outside a graph, so the
        # graph timer would measure another operation.
        x = torch.randn(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)
        return lambda: torch.neg(x, out=y)

    m, n, k = MATMUL_MNK
    return [Reference("matmul", f"torch bf16 matmul {m}×{k} @ {k}×{n} (compute-bound)", matmul),
            Reference("copy", f"torch.neg of {COPY_BYTES / 2**30:g} GiB fp32 into another buffer: a copy by an "
                      "SM kernel (bandwidth-bound)", copy)]


def gpu_time(ref: Reference) -> Timed:
    """Every timer and do_bench on one reference, with NVML samples around them."""
    from lattnbench.measure import clocks
    from lattnbench.measure.timing import do_bench_ms, measure_point, torch_cuda_backend

    call = ref.make()
    be = torch_cuda_backend()

    warm: list[float] = []  # the first round's warm-up estimate: later rounds need no warm-up

    def ours() -> dict[str, Reading]:
        pt = measure_point(call, be, budget_s=BUDGET_S / ROUNDS, timers=("device", "graph", "latency"),
                           warm_ms=warm[0] if warm else None)
        if not warm:
            warm.append(pt.warm_ms)
        return {name: r for name, r in _readings(pt, {}).items() if name != "do_bench"}

    def bench() -> dict[str, Reading]:
        try:
            ms = Reading(round(do_bench_ms(call), 5), "triton.testing.do_bench median (warmup 25 ms, rep 100 ms)")
        except Exception as exc:  # noqa: BLE001 - no triton: the check says so
            ms = Reading(None, "triton.testing.do_bench", _one_line(exc))
        return {"do_bench": ms}

    before = clocks.sample()
    readings = interleaved(ROUNDS, ours, bench)
    after = clocks.sample()
    return Timed({name: readings[name] for name in READINGS}, clocks.throttled(before, after))


def gpu_probe() -> Probe:
    from lattnbench.env import gpu_info
    from lattnbench.measure.roofline import measure_ceilings

    def machine() -> dict:
        info = gpu_info()
        return {"kind": "gpu", "name": info.get("gpu"), **info, "cpu": _cpu_machine()["name"]}

    return Probe(True, machine, lambda: measure_ceilings("cuda"), _clocks, gpu_references(), gpu_time,
                 TOLERANCES)


def cpu_references() -> list[Reference]:
    def matmul():
        import numpy as np

        a = np.random.default_rng(0).standard_normal((384, 384), dtype=np.float32)
        c = np.empty_like(a)  # into one buffer: an allocation per call would be timed too
        return lambda: np.matmul(a, a, out=c)

    def copy():
        import numpy as np

        x = np.ones(16 * 2**20, dtype=np.uint8)
        y = np.empty_like(x)
        return lambda: np.copyto(y, x)

    return [Reference("matmul", "numpy fp32 matmul 384×384 @ 384×384", matmul),
            Reference("copy", "numpy copy of 16 MiB", copy)]


def cpu_time(ref: Reference) -> Timed:
    """The host-clock timers (device batches, latency, host); do_bench and graph need a GPU."""
    from lattnbench.measure.timing import host_backend, measure_point

    pt = measure_point(ref.make(), host_backend(lambda _r: None), budget_s=0.3,
                       timers=("device", "graph", "latency"))
    gone = Reading(None, "triton.testing.do_bench", "needs a GPU (do_bench times CUDA events)")
    return Timed(_readings(pt, {"do_bench": gone}))


def cpu_probe() -> Probe:
    return Probe(False, _cpu_machine, lambda: None, _clocks, cpu_references(), cpu_time, CPU_TOLERANCES,
                 notes=["no GPU: do_bench and the graph timer need one; the host-clock timers ran "
                        "for information, so this verdict cannot fail"])


def detect_probe() -> Probe:
    """The GPU probe when torch sees a CUDA GPU, else the CPU one."""
    try:
        import torch
    except ImportError:
        return cpu_probe()
    return gpu_probe() if torch.cuda.is_available() else cpu_probe()
