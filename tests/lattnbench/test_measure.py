"""Reasons recorded for failed points stay one line and keep the actual error."""
import numpy as np

from lattnbench.harness.points import one_line


class CompilationError(Exception):
    pass


def test_one_line_keeps_the_actual_error_of_a_compile_failure():
    exc = CompilationError("at 11:4:\n    _chunk_pass(q, k)\n    ^\nIncompatibleTypeErrorImpl('fp64 vs fp32')")
    line = one_line(exc)
    assert "\n" not in line
    assert line.startswith("CompilationError: at 11:4:") and "IncompatibleTypeErrorImpl" in line


def test_one_line_is_short_and_first_line_only_otherwise():
    line = one_line(RuntimeError("first\nsecond " + "x" * 1000))
    assert line == "RuntimeError: first"
    assert len(one_line(RuntimeError("y" * 1000))) == 300


def test_bwd_graph_time_is_fwdbwd_minus_fwd_and_graphs_run_after_every_device_timer(monkeypatch):
    from lattnbench.measure import timing
    from lattnbench.harness.points import Sweeper
    from lattnbench.measure.timing import PointTiming, TimerResult

    seen = []

    def fake_graph(call, be, budget_ms, est_ms):
        seen.append(call)
        return TimerResult("graph", [{"fwd": 1.0, "fwdbwd": 3.5}[call]], "fake")

    monkeypatch.setattr(timing, "time_graph", fake_graph)
    timed = {m: (m, PointTiming(0.0, 1, {"device": TimerResult("device", [9.0])}), None, None)
             for m in ("fwd", "bwd", "fwdbwd")}
    Sweeper("cuda", lambda rows: None, {})._graph_timers(timed, None)
    assert seen == ["fwd", "fwdbwd"]  # bwd alone is never captured
    bwd = timed["bwd"][1].timers["graph"]
    assert bwd.ok and bwd.median == 2.5 and "fwdbwd" in bwd.method


def test_a_gpu_point_interleaves_its_timers_in_rounds(monkeypatch):
    """Each round runs every mode's device and latency timers, then their graphs; samples add up."""
    from lattnbench.measure import timing
    from lattnbench.harness import points
    from lattnbench.harness.points import Sweeper
    from lattnbench.measure.timing import PointTiming, TimerResult
    from lattnbench.registry import default_registry
    from lattnbench.spec import Case

    log, clock_ticks, warmed = [], iter(range(1, 1000)), []
    nvml = iter(range(1000, 2000))
    monkeypatch.setattr(points, "clock_sample", lambda device: {"sm_mhz": next(nvml)})

    def fake_point(call, be, *, budget_s, timers, min_reps=5, max_reps=200, warm_ms=None, clock=None):
        log.append(("device", call.__name__))
        warmed.append(warm_ms)
        device = TimerResult("device", [float(next(clock_ticks))], "fake")
        device.clocks.append(clock())
        return PointTiming(0.01, 2, {"device": device, "latency": TimerResult("latency", [50.0], "fake")},
                           warm_ms=0.7)

    def fake_graph(call, be, budget_ms, est_ms):
        log.append(("graph", call.__name__))
        return TimerResult("graph", [float(next(clock_ticks))], f"{timing.REPLAY}, fake")

    monkeypatch.setattr(timing, "measure_point", fake_point)
    monkeypatch.setattr(timing, "time_graph", fake_graph)
    rows = []
    case = Case(batch=1, seqlen=32, heads=2, kv_heads=2, dim_qk=16, dim_v=16, dtype="fp32")
    Sweeper("cpu", rows.extend, {}, budget_s=0.03, rounds=3).speed(
        default_registry()["lightning/naive-torch"], case, ["fwd", "fwdbwd"])
    one_round = [("device", "fwd"), ("device", "fwdbwd"), ("graph", "fwd"), ("graph", "fwdbwd")]
    assert log == one_round * 3
    assert warmed == [None, None] + [0.7] * 4  # later rounds reuse round 0's warm-up estimate
    fwd = next(r for r in rows if r["mode"] == "fwd")
    assert fwd["status"] == "ok" and fwd["samples"] == 3
    timers = fwd["runs"][0]["timers"]
    assert fwd["samples_ms"] == [1.0, 5.0, 9.0] and timers["device"]["samples_ms"] == [1.0, 5.0, 9.0]
    assert timers["graph"]["samples_ms"] == [3.0, 7.0, 11.0] and fwd["graph_ms"] == 7.0
    assert "3 rounds" in timers["device"]["method"] and "3 rounds" in timers["graph"]["method"]
    # the NVML sample as each timer ended, a round each: read in the order the timers ran
    dev_mhz = [c["sm_mhz"] for c in timers["device"]["clocks"]]
    graph_mhz = [c["sm_mhz"] for c in timers["graph"]["clocks"]]
    assert len(dev_mhz) == len(graph_mhz) == 3
    assert all(d < g for d, g in zip(dev_mhz, graph_mhz)) and all(g < d for g, d in zip(graph_mhz, dev_mhz[1:]))


def test_each_timer_keeps_the_clocks_read_as_it_ended():
    """measure_point reads the sampler after each timer (latency and host share one reading); the
    readings survive merging rounds and reach the JSON; a sampler with nothing to say adds none."""
    from lattnbench.measure.timing import host_backend, measure_point

    readings = iter(range(1, 100))
    sampler = lambda: {"sm_mhz": next(readings)}  # noqa: E731
    be = host_backend(lambda _r: None)
    first = measure_point(lambda: sum(range(50)), be, budget_s=0.01, timers=("device", "latency"), clock=sampler)
    assert first.timers["device"].clocks == [{"sm_mhz": 1}]
    assert first.timers["latency"].clocks == first.timers["host"].clocks == [{"sm_mhz": 2}]
    later = measure_point(lambda: sum(range(50)), be, budget_s=0.01, timers=("device", "latency"), clock=sampler,
                          warm_ms=0.01)
    first.merge(later)
    assert [c["sm_mhz"] for c in first.timers["device"].summary()["clocks"]] == [1, 3]
    quiet = measure_point(lambda: None, be, budget_s=0.01, timers=("device",), clock=lambda: None)
    assert quiet.timers["device"].clocks == [] and "clocks" not in quiet.timers["device"].summary()


def test_a_failed_capture_is_not_retried_in_later_rounds(monkeypatch):
    from lattnbench.measure import timing
    from lattnbench.harness.points import Sweeper
    from lattnbench.measure.timing import PointTiming, TimerResult

    calls = []

    def fallback(call, be, budget_ms, est_ms):
        calls.append(call)
        return TimerResult("graph", [2.0], "CUPTI busy time; CUDA-graph capture failed (sync in the call)")

    monkeypatch.setattr(timing, "time_graph", fallback)
    timed = {"fwd": ("fwd", PointTiming(0.0, 1, {"device": TimerResult("device", [9.0])}), None, None)}
    sweeper = Sweeper("cuda", lambda rows: None, {})
    for r in range(3):
        sweeper._graph_timers(timed, None, 3, r)
    assert calls == ["fwd"] and timed["fwd"][1].timers["graph"].samples_ms == [2.0]


def test_why_infinite_names_the_shapes_or_the_non_finite_values():
    from lattnbench.measure.tolerance import err_ratio, why_infinite

    ref = np.random.default_rng(3).standard_normal((2, 3))
    assert err_ratio(ref[:1], ref) == float("inf")
    assert why_infinite(ref[:1], ref) == "shape (1, 3) where the reference has (2, 3)"
    bad = ref.copy()
    bad[0, 1], bad[1, 2] = np.nan, -np.inf
    assert why_infinite(bad, ref) == "not finite: 1 NaN and 1 Inf of 6 values"
