"""Timing and roofline arithmetic: warm-up separation, sample counts, quantiles, floors."""
import random
import time

import pytest

from lattnbench.roofline import bytes_moved, floor_ms, flops
from lattnbench.spec import Case
from lattnbench.timing import Timing, measure


def test_first_call_is_kept_out_of_the_samples():
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.05 if len(calls) == 1 else 0.002)  # a "compiling" first call
        return len(calls)

    t = measure(run, lambda _: None, budget_s=0.05, min_reps=5, max_reps=30)
    assert t.first_call_s >= 0.05
    assert max(t.samples_ms) < 40 and len(t.samples_ms) >= 5
    assert len(calls) == 1 + t.warmup_calls + len(t.samples_ms)


def test_batching_short_calls_divides_by_the_batch():
    synced = []
    t = measure(lambda: time.sleep(0.0002), synced.append, budget_s=0.02, min_reps=5, batch_short=True)
    assert t.method.startswith("host-clock, batches of")
    k = int(t.method.rsplit(" ", 1)[1])
    assert k > 1 and 0.15 < t.median < 2.0  # per call, not per batch


def test_quantiles_match_sorted_samples():
    xs = [random.uniform(0, 10) for _ in range(101)]
    t = Timing(xs, 1, 0.0, "x")
    s = sorted(xs)
    assert t.quantile(0.2) == pytest.approx(s[20]) and t.quantile(0.8) == pytest.approx(s[80])
    assert t.median == pytest.approx(s[50])


def test_roofline_of_the_seed_shape():
    case = Case(4, 32768, 32, 32, 128, 128, "bf16")
    one = 4 * 32768 * 32 * 128 * 2  # one [B,T,H,D] bf16 tensor: 1.07 GB
    assert bytes_moved(case, "fwd") == 4 * one
    assert bytes_moved(case, "fwdbwd") == 11 * one
    ceil = {"copy_gbps": 4230.0, "matmul_tflops": 701.0}
    assert floor_ms(case, "lightning", "fwd", ceil) == pytest.approx(4 * one / 4230e9 * 1e3)
    assert floor_ms(case, "softmax", "fwd", ceil) == pytest.approx(flops(case, "softmax", "fwd") / 701e12 * 1e3)
    assert floor_ms(case, "lightning", "fwd", {}) is None
