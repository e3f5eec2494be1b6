"""Reasons recorded for failed points stay one line and keep the actual error."""
from lattnbench.measure.points import one_line


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
    from lattnbench.measure.points import Sweeper
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
