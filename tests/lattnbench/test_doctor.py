"""``lattnbench doctor``: verdicts and exit codes from fake timers, the JSON shape, a real CPU run."""
from __future__ import annotations

import io
import json
import statistics

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lattnbench.measure import doctor
from lattnbench.cli import app
from lattnbench.measure.doctor import CPU_TOLERANCES, TOLERANCES, Probe, Reading, Reference, Timed, diagnose, judge

runner = CliRunner()


def fake_probe(times: dict[str, dict[str, float | None]], gpu: bool = True, throttled: bool | None = None,
               fail: str | None = None) -> Probe:
    """A probe whose references read ``times[ref][timer]`` ms (None: the timer could not run)."""
    def time(ref: Reference) -> Timed:
        if ref.name == fail:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return Timed({k: Reading(v, "fake", None if v is not None else "fake: not here")
                      for k, v in times[ref.name].items()}, throttled)

    refs = [Reference(name, f"fake {name}", lambda: (lambda: None)) for name in times]
    machine = {"kind": "gpu", "name": "NVIDIA H200"} if gpu else {"kind": "cpu", "name": "fake cpu", "cores": 2}
    return Probe(gpu, lambda: machine, lambda: {"copy_gbps": 4132.0, "matmul_tflops": 676.0} if gpu else None,
                 lambda: {"sample": {"sm_mhz": 1980, "sm_max_mhz": 1980, "mem_mhz": 3201, "power_w": 420.0,
                                     "temp_c": 51, "reasons": [], "throttled": False} if gpu else None,
                          "reason": None if gpu else "no GPU"},
                 refs, time, TOLERANCES if gpu else CPU_TOLERANCES)


def agreeing(**over) -> dict[str, dict[str, float | None]]:
    t = {"matmul": {"device": 0.812, "do_bench": 0.815, "graph": 0.805, "latency": 0.85, "host": 0.012},
         "copy": {"device": 0.781, "do_bench": 0.779, "graph": 0.772, "latency": 0.80, "host": 0.008}}
    for key, value in over.items():
        ref, timer = key.split("__")
        t[ref][timer] = value
    return t


def verdicts(d) -> dict[tuple[str, str, str], str]:
    return {(c.reference, c.a, c.b): c.verdict for c in d.checks}


def test_the_tolerance_table_holds_the_methodology_bounds():
    by = {(t.a, t.b): t for t in TOLERANCES}
    assert by[("device", "do_bench")].bound == 0.03 and by[("device", "do_bench")].min_ms == 0.5
    assert by[("graph", "device")].bound == 0.05
    assert all(t.bound is None for t in CPU_TOLERANCES)  # a CPU has nothing to judge against


def test_agreeing_timers_pass():
    d = diagnose(fake_probe(agreeing()))
    assert d.verdict == "ok" and d.exit_code == 0
    v = verdicts(d)
    assert v[("matmul", "device", "do_bench")] == "ok" and v[("copy", "graph", "device")] == "ok"
    assert v[("matmul", "latency", "graph")] == "info"


@pytest.mark.parametrize("key,value,verdict", [
    ("copy__device", 0.779 * 1.029, "ok"),        # +2.9 %: within 3 %
    ("copy__device", 0.779 * 1.04, "DISAGREE"),   # +4 %: beyond
    ("matmul__device", 0.815 * 0.96, "DISAGREE"),  # -4 %
])
def test_device_against_do_bench(key, value, verdict):
    times = agreeing(**{key: value})
    ref = key.split("__")[0]
    times[ref]["graph"] = value  # keep graph beside device: only do_bench disagrees
    d = diagnose(fake_probe(times))
    assert verdicts(d)[(ref, "device", "do_bench")] == verdict
    assert d.exit_code == (1 if verdict == "DISAGREE" else 0)
    if verdict == "DISAGREE":
        check = next(c for c in d.checks if c.verdict == "DISAGREE")
        assert check.diff == pytest.approx(value / times[ref]["do_bench"] - 1)
        assert "beyond ±3%" in check.why


@pytest.mark.parametrize("graph,verdict", [(0.812 * 0.955, "ok"), (0.812 * 0.93, "DISAGREE"), (0.812 * 1.06, "DISAGREE")])
def test_graph_against_device(graph, verdict):
    d = diagnose(fake_probe(agreeing(matmul__graph=graph)))
    assert verdicts(d)[("matmul", "graph", "device")] == verdict
    assert d.verdict == ("disagree" if verdict == "DISAGREE" else "ok")


def test_calls_shorter_than_half_a_millisecond_are_not_judged():
    t = agreeing()
    t["copy"] = {"device": 0.31, "do_bench": 0.27, "graph": 0.30, "latency": 0.33, "host": 0.01}
    d = diagnose(fake_probe(t))
    assert verdicts(d)[("copy", "device", "do_bench")] == "short"
    assert d.exit_code == 0


def test_a_timer_the_check_needs_missing_on_a_gpu_fails():
    d = diagnose(fake_probe(agreeing(matmul__do_bench=None)))
    assert verdicts(d)[("matmul", "device", "do_bench")] == "missing"
    assert d.verdict == "unmeasured" and d.exit_code == 1
    crashed = diagnose(fake_probe(agreeing(), fail="copy"))
    assert crashed.exit_code == 1
    assert all(r["timers"]["device"]["reason"].startswith("RuntimeError: CUDA error")
               for r in crashed.references if r["name"] == "copy")


def test_throttling_is_noted():
    d = diagnose(fake_probe(agreeing(), throttled=True))
    assert any("throttle" in n for n in d.notes) and d.exit_code == 0


def test_a_cpu_never_fails():
    t = {"matmul": {"device": 6.0, "do_bench": None, "graph": None, "latency": 1.0, "host": 1.0}}
    d = diagnose(fake_probe(t, gpu=False))
    assert d.verdict == "info" and d.exit_code == 0
    assert {c.verdict for c in d.checks} == {"info"}
    assert d.ceilings is None and d.ceilings_reason == "measured on a GPU only"


def test_judge_reads_missing_values_as_info_without_bound():
    checks = judge("x", {"device": Reading(1.0), "latency": Reading(None, reason="nope")}, CPU_TOLERANCES, gpu=False)
    assert checks[0].verdict == "info" and "latency: nope" in checks[0].why


def cli(monkeypatch, probe: Probe, *args: str):
    monkeypatch.setattr(doctor, "detect_probe", lambda: probe)
    return CliRunner(env={"COLUMNS": "80"}).invoke(app, ["doctor", *args])


def test_cli_exit_codes_follow_the_verdict(monkeypatch):
    ok = cli(monkeypatch, fake_probe(agreeing()))
    assert ok.exit_code == 0, ok.output
    assert "verdict: ok" in ok.stdout and "NVIDIA H200" in ok.stdout and "4132 GB/s" in ok.stdout
    bad = cli(monkeypatch, fake_probe(agreeing(matmul__device=0.9, matmul__graph=0.9)))
    assert bad.exit_code == 1
    assert "DISAGREE" in bad.stdout and "device is +10.4% off do_bench" in bad.stdout
    assert "…" not in ok.stdout + bad.stdout
    assert all(len(line.rstrip()) <= 80 for line in (ok.stdout + bad.stdout).splitlines())


def test_cli_json_is_one_object_with_the_documented_fields(monkeypatch):
    res = cli(monkeypatch, fake_probe(agreeing(copy__graph=0.70)), "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["schema"] == "lattnbench.measure.doctor/1" and doc["gpu"] is True
    assert {"env", "machine", "ceilings", "clocks", "tolerances", "references", "checks", "notes", "verdict",
            "exit_code"} <= set(doc)
    assert doc["env"]["versions"]["lattnbench"] and doc["env"]["time"]
    assert doc["verdict"] == "disagree" and doc["exit_code"] == 1
    assert [r["name"] for r in doc["references"]] == ["matmul", "copy"]
    assert doc["references"][0]["timers"]["do_bench"]["ms"] == 0.815
    bad = [c for c in doc["checks"] if c["verdict"] == "DISAGREE"]
    assert [(c["reference"], c["a"], c["b"]) for c in bad] == [("copy", "graph", "device")]
    assert bad[0]["diff"] == pytest.approx(0.70 / 0.781 - 1) and bad[0]["bound"] == 0.05


def test_real_cpu_run():
    res = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["gpu"] is False and doc["machine"]["kind"] == "cpu" and doc["verdict"] == "info"
    assert doc["ceilings"] is None and doc["clocks"]["sample"] is None and doc["clocks"]["reason"]
    for ref in doc["references"]:
        t = ref["timers"]
        assert t["device"]["ms"] > 0 and t["latency"]["ms"] > 0 and t["host"]["ms"] > 0
        assert "host clock" in t["device"]["method"]
        assert t["do_bench"]["ms"] is None and "GPU" in t["do_bench"]["reason"]
        assert t["graph"]["ms"] is None and "GPU" in t["graph"]["reason"]
    text = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["doctor"])
    assert text.exit_code == 0 and "verdict: info" in text.stdout and "do_bench" in text.stdout
    assert "…" not in text.stdout


def test_doctor_output_renders_without_a_terminal(monkeypatch):
    from lattnbench.commands import doctor as command

    d = diagnose(fake_probe(agreeing()))
    console = Console(width=80, file=io.StringIO(), color_system=None)
    for table in (command._facts(d), command._timers(d), command._checks(d)):
        console.print(table)
    text = console.file.getvalue()
    assert "0.812" in text and "0.815" in text
    assert "device / do_bench" in text and "-0.4%" in text


def test_interleaved_rounds_cancel_a_drifting_clock():
    """Two timers reading the same call while the clock slows by 1 % per reading: run one after the
    other they differ by the drift, in interleaved rounds their medians meet."""
    clock = iter(1.0 + 0.01 * i for i in range(1000))

    def timer(name):
        return lambda: {name: doctor.Reading(round(next(clock), 5), name)}

    a, b = timer("device"), timer("do_bench")
    first = statistics.median(a()["device"].ms for _ in range(5))
    then = statistics.median(b()["do_bench"].ms for _ in range(5))
    assert then / first - 1 > 0.04  # what the one-after-the-other order reads
    out = doctor.interleaved(5, a, b)
    assert len(out["device"].rounds) == 5 and len(out["do_bench"].rounds) == 5
    assert out["device"].ms == pytest.approx(out["do_bench"].ms, rel=0.011)
    assert "5 interleaved rounds" in out["device"].method


def test_interleaved_keeps_the_reason_of_a_timer_that_always_fails():
    def failing():
        return {"graph": doctor.Reading(None, "graph", "capture failed: sync in the call")}

    values = iter([0.5, 0.7, 0.6])
    out = doctor.interleaved(3, failing, lambda: {"device": doctor.Reading(next(values), "d")})
    assert out["graph"].ms is None and out["graph"].reason == "capture failed: sync in the call"
    assert out["device"].ms == 0.6 and sorted(out["device"].rounds) == [0.5, 0.6, 0.7]


def _rounds_probe(device_rounds, bench_rounds):
    med = statistics.median

    def time(ref):
        r = {"device": Reading(med(device_rounds), "fake", rounds=list(device_rounds)),
             "do_bench": Reading(med(bench_rounds), "fake", rounds=list(bench_rounds)),
             "graph": Reading(med(device_rounds), "fake", rounds=list(device_rounds)),
             "latency": Reading(0.9, "fake"), "host": Reading(0.01, "fake")}
        return Timed(r)

    probe = fake_probe(agreeing())
    probe.references = probe.references[:1]
    probe.time = time
    return probe


def test_a_disagreement_inside_the_round_spread_is_noisy_not_a_failure():
    """A power-capped matmul: do_bench's rounds spread 12 %, across the device timer's."""
    d = diagnose(_rounds_probe([0.751, 0.764, 0.758, 0.771, 0.771], [0.741, 0.777, 0.830, 0.794, 0.798]))
    check = next(c for c in d.checks if (c.a, c.b) == ("device", "do_bench"))
    assert check.verdict == "noisy" and "overlap" in check.why
    assert d.verdict == "noisy" and d.exit_code == 1  # nothing was judged ok: no verdict on the timers


def test_separated_rounds_beyond_the_bound_disagree():
    d = diagnose(_rounds_probe([0.80, 0.81, 0.80], [0.74, 0.75, 0.745]))
    assert verdicts(d)[("matmul", "device", "do_bench")] == "DISAGREE" and d.exit_code == 1


def test_a_noisy_reference_beside_an_agreeing_one_passes():
    noisy = _rounds_probe([0.751, 0.764, 0.771], [0.741, 0.830, 0.794])
    steady = fake_probe(agreeing())
    refs = [noisy.references[0], steady.references[1]]

    def time(ref):
        return noisy.time(ref) if ref.name == "matmul" else steady.time(ref)

    d = diagnose(Probe(True, steady.machine, steady.ceilings, steady.clocks, refs, time, TOLERANCES))
    assert verdicts(d)[("matmul", "device", "do_bench")] == "noisy"
    assert verdicts(d)[("copy", "device", "do_bench")] == "ok" and d.verdict == "ok" and d.exit_code == 0
