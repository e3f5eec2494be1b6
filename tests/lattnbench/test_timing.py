"""Timers on the CPU: warm-up kept apart, batches, latency vs host time, graph refusal, busy time."""
import random
import time

import pytest

from lattnbench.measure import timing
from lattnbench.measure.roofline import floor_ms
from lattnbench.operators import family
from lattnbench.spec import Case
from lattnbench.measure.timing import Backend, PointTiming, TimerResult, measure_point, quantile


def host(sync=lambda _r: None):
    return timing.host_backend(sync)


def test_first_call_is_kept_out_of_the_samples():
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.05 if len(calls) == 1 else 0.002)  # a "compiling" first call
        return len(calls)

    pt = measure_point(run, host(), budget_s=0.03, timers=("device",), max_reps=30)
    dev = pt.timers["device"]
    assert pt.first_call_s >= 0.05
    assert max(dev.samples_ms) < 40 and len(dev.samples_ms) >= 5
    assert len(calls) == 1 + pt.warmup_calls + len(dev.samples_ms) * int(dev.method.split()[4])


def test_a_warm_call_is_not_warmed_up_again():
    calls = []
    pt = measure_point(lambda: calls.append(1), host(), budget_s=0.01, timers=("device",), max_reps=10,
                       warm_ms=0.5)
    dev = pt.timers["device"]
    assert pt.warmup_calls == 0 and pt.first_call_s == 0.0 and pt.warm_ms == 0.5
    assert len(calls) == len(dev.samples_ms) * int(dev.method.split()[4])  # timed calls only


def test_device_timer_batches_short_calls_and_divides_by_the_batch():
    synced = []
    be = host(synced.append)
    pt = measure_point(lambda: time.sleep(0.0002), be, budget_s=0.02, timers=("device",))
    dev = pt.timers["device"]
    per = int(dev.method.split()[4])
    assert per > 1 and 0.15 < dev.median < 2.0  # per call, not per batch
    # one sync per batch, not per call
    assert len(synced) == pt.warmup_calls + 1 + len(dev.samples_ms)


def test_latency_includes_the_wait_and_host_time_does_not():
    """An asynchronous call: it returns at once, its result is ready 5 ms later."""
    ready = {}

    def call():
        ready["at"] = time.perf_counter() + 0.005
        return ready["at"]

    def sync(result):
        while result is not None and time.perf_counter() < result:
            pass

    lat, hst = timing.time_latency(call, host(sync), reps=5)
    assert lat.median >= 4.5 and hst.median < 1.0
    assert len(lat.samples_ms) == len(hst.samples_ms) == 5


class _VirtualClock:
    """A clock that only moves when the code under test sleeps: timings of fake kernels are then
    exact, whatever else loads the machine."""

    def __init__(self) -> None:
        self.t = 1000.0

    def perf_counter(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_device_timer_lets_the_host_run_ahead(monkeypatch):
    """Back-to-back calls of an asynchronous kernel overlap their host work; latency does not."""
    clock = _VirtualClock()
    monkeypatch.setattr(timing, "time", clock)
    state = {"busy_until": 0.0}

    def call():
        clock.sleep(0.001)  # host work per call
        start = max(clock.perf_counter(), state["busy_until"])
        state["busy_until"] = start + 0.006  # 6 ms of "device" work, queued
        return state["busy_until"]

    def sync(result):
        if result is not None and clock.perf_counter() < result:
            clock.sleep(result - clock.perf_counter())

    be = Backend("fake-gpu", sync, gpu=True)
    pt = measure_point(call, be, budget_s=0.1, timers=("device", "latency"))
    # device-bound: the host work of all but a batch's first call hides behind the queued work
    assert 6.0 <= pt.timers["device"].median <= 6.6
    assert pt.timers["latency"].median == pytest.approx(7.0, rel=1e-6)  # host work + device work


def test_graph_timer_needs_a_gpu_and_says_so():
    pt = measure_point(lambda: 1, host(), budget_s=0.01)
    g = pt.timers["graph"]
    assert g.status == "unavailable" and "GPU" in g.reason and not g.ok
    assert pt.host_bound() is None and pt.get("graph") is None
    assert g.summary() == {"status": "unavailable", "reason": g.reason, "method": ""}


def test_host_bound_flag():
    def t(name, ms):
        return TimerResult(name, [ms] * 5, "fake")

    pt = PointTiming(0.0, 1, {"device": t("device", 1.0), "graph": t("graph", 0.9), "latency": t("latency", 1.2)})
    assert pt.host_bound() is False
    pt.timers["latency"] = t("latency", 1.4)
    assert pt.host_bound() is True  # 1.4 > 1.5 x 0.9
    pt.timers["latency"] = t("latency", 1.0)
    pt.timers["device"] = t("device", 2.0)
    assert pt.host_bound() is True


def test_busy_time_splits_at_each_flush_and_merges_overlaps():
    # two calls: flush at 0 and 1000; call 1 kernels [10,50] and [40,90] (overlap), call 2 [1010,1030]
    spans = [(10, 50), (40, 90), (1010, 1030)]
    got = timing._busy_per_call(spans, [0, 1000], 2)
    assert got == [pytest.approx(80 / 1e6), pytest.approx(20 / 1e6)]
    assert timing._union_ns([(0, 10), (5, 20), (30, 40)]) == 30


def test_a_device_flush_is_subtracted_from_host_clock_batches():
    flushes = []

    def flush():
        flushes.append(1)
        time.sleep(0.008)

    be = Backend("fake-gpu", lambda _r: None, flush=flush, gpu=True)
    dev = timing.time_device(lambda: time.sleep(0.002), be, budget_ms=30, est_ms=10.0, min_reps=5)
    assert flushes and "subtracted" in dev.method
    assert 1.5 < dev.median < 5.0  # the call alone (2 ms), not call + 8 ms of flush


def test_quantiles_match_sorted_samples():
    xs = [random.uniform(0, 10) for _ in range(101)]
    s = sorted(xs)
    assert quantile(xs, 0.2) == pytest.approx(s[20]) and quantile(xs, 0.8) == pytest.approx(s[80])
    assert TimerResult("device", xs).median == pytest.approx(s[50])


def test_roofline_of_the_seed_shape():
    case = Case(4, 32768, 32, 32, 128, 128, "bf16")
    one = 4 * 32768 * 32 * 128 * 2  # one [B,T,H,D] bf16 tensor: 1.07 GB
    lightning, softmax = family("lightning"), family("softmax")
    assert lightning.bytes_moved(case, "fwd") == 4 * one
    assert lightning.bytes_moved(case, "fwdbwd") == 11 * one
    ceil = {"copy_gbps": 4230.0, "matmul_tflops": 701.0}

    def floor(fam, mode, ceilings):
        return floor_ms(fam.bytes_moved(case, mode), fam.flops(case, mode), ceilings)
    assert floor(lightning, "fwd", ceil) == pytest.approx(4 * one / 4230e9 * 1e3)
    assert floor(softmax, "fwd", ceil) == pytest.approx(softmax.flops(case, "fwd") / 701e12 * 1e3)
    assert floor(lightning, "fwd", {}) is None
