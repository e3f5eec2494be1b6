"""The runner: run order, isolation, --repeat, resume and what workers inherit."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.runner.plan import Task
from lattnbench.results import ResultsWriter, load
from lattnbench.runner.loop import ISOLATED_ENV, Job, RunConfig, Runner, WorkerJob, expand_runs, make_jobs
from lattnbench.spec import Case
from lattnbench.runner.tuning import reset_autotuning

HERE = Path(__file__).parent
runner = CliRunner()
C1, C2 = Case(1, 16, 2, 2, 8, 8, "fp32"), Case(1, 32, 2, 2, 8, 8, "fp32")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def tasks(kinds=("speed",), kernels=("a", "b", "c"), cases=(C1, C2)):
    return [Task(kind, k, c, ("fwd",)) if kind != "check-grad" else Task(kind, k, c)
            for kind in kinds for c in cases for k in kernels]


def test_repeat_rotates_the_kernel_order_and_repeats_only_speed():
    runs = expand_runs(tasks(("check-grad", "speed", "memory")), 3)
    orders = [list(dict.fromkeys(t.kernel for t in run if t.kind == "speed")) for run in runs]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [t.run for t in runs[2]] == [2] * len(runs[2])
    assert {t.kind for t in runs[1]} == {"speed"}
    kinds = [t.kind for t in runs[0]]
    assert set(kinds[kinds.index("check-grad"):]) == {"check-grad"}  # checks after every timing task


def test_kernel_isolation_gives_each_kernel_and_run_a_worker_and_checks_their_own():
    runs = expand_runs(tasks(("check-grad", "speed")), 2)
    jobs = make_jobs(runs, "kernel", 0)
    timing = [j for j in jobs if j.tasks[0].times]
    checks = [j for j in jobs if not j.tasks[0].times]
    assert all(j.worker for j in jobs)
    assert [(j.tasks[0].kernel, j.tasks[0].run) for j in timing] == [
        ("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1)]
    assert all(len({t.kernel for t in j.tasks}) == 1 and j.forget_tuning for j in timing)
    assert jobs.index(checks[0]) > jobs.index(timing[-1])  # no timing after any gradient check
    assert all(not j.forget_tuning and {t.kind for t in j.tasks} == {"check-grad"} for j in checks)


def test_parallel_checks_split_each_kernel_by_dtype():
    c16 = Case(1, 16, 2, 2, 8, 8, "fp16")
    runs = expand_runs(tasks(("check-grad",), cases=(C1, c16, C2)), 1)
    serial = make_jobs(runs, "kernel", 0)
    parallel = make_jobs(runs, "kernel", 0, parallel_checks=True)
    assert [(j.tasks[0].kernel, len(j.tasks)) for j in serial] == [("a", 3), ("b", 3), ("c", 3)]
    groups = sorted((j.tasks[0].kernel, {t.kernel for t in j.tasks} == {j.tasks[0].kernel},
                     "/".join(sorted({t.case.dtype for t in j.tasks})), len(j.tasks)) for j in parallel)
    assert groups == [("a", True, "fp16", 1), ("a", True, "fp32", 2), ("b", True, "fp16", 1), ("b", True, "fp32", 2),
                      ("c", True, "fp16", 1), ("c", True, "fp32", 2)]


def test_point_isolation_and_none():
    runs = expand_runs(tasks(("speed",)), 1)
    assert [len(j.tasks) for j in make_jobs(runs, "point", 0)] == [1] * 6
    (only,) = make_jobs(runs, "none", 0)
    assert not only.worker and len(only.tasks) == 6
    (only,) = make_jobs(runs, "none", 30.0)
    assert only.worker  # a point timeout needs a process to kill


def test_isolated_workers_turn_off_fla_autotune_results_on_disk(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", "t", {})
    for isolate, expected in (("kernel", "0"), ("none", None)):
        r = Runner([], writer, None, RunConfig("cpu", isolate=isolate))
        env = WorkerJob(r, Job([], worker=True))._env()
        assert env.get("FLA_CACHE_RESULTS") == (expected if isolate != "none" else env.get("FLA_CACHE_RESULTS"))
        assert env["LATTNBENCH_PARENT_PID"].isdigit()
    assert ISOLATED_ENV == {"FLA_CACHE_RESULTS": "0"}


def test_reset_autotuning_clears_triton_autotuners_and_launch_caches(plugins):
    import stateful_kernels

    from lattnbench.kernels.common import launch

    stateful_kernels.TUNER.cache[8] = 16
    launcher = launch.Launcher(stateful_kernels, "TUNER", "_never_launched", {})
    launcher.cache[("key",)] = "compiled"
    assert reset_autotuning() >= 2
    assert stateful_kernels.TUNER.cache == {} and launcher.cache == {}


def _speeds(path: Path) -> dict[tuple[str, int], float]:
    return {(r["kernel"], r["seqlen"]): r["median"] for r in load(path)["rows"] if r["status"] == "ok"}


SLOW_MS = 75  # stateful_kernels.SLOW_S is 100 ms; a healthy call takes a few ms
ISO = ["--kernel", "stateful_kernels:neighbour", "--kernel", "stateful_kernels:tuned", "--mode", "fwd",
       "--budget", "0.01", "--device", "cpu"]


def test_without_isolation_a_neighbour_and_an_earlier_shape_leak_into_the_numbers(plugins, tmp_path):
    out = tmp_path / "none.json"
    res = invoke("speed", *ISO, "-k", "plugin/neighbour,plugin/tuned", "--n", "16,32", "--isolate", "none",
                 "--out", out)
    assert res.exit_code == 0, res.output
    t = _speeds(out)
    assert t[("plugin/tuned", 16)] > SLOW_MS and t[("plugin/tuned", 32)] > SLOW_MS


def test_kernel_isolation_measures_every_point_as_a_fresh_process_would(plugins, tmp_path):
    out = tmp_path / "kernel.json"
    res = invoke("speed", *ISO, "-k", "plugin/neighbour,plugin/tuned", "--n", "16,32", "--isolate", "kernel",
                 "--out", out)
    assert res.exit_code == 0, res.output
    t = _speeds(out)
    assert t[("plugin/tuned", 16)] < SLOW_MS and t[("plugin/tuned", 32)] < SLOW_MS
    assert load(out)["isolation"] == "kernel"


def test_repeat_merges_runs_into_one_row_per_point(plugins, tmp_path):
    out = tmp_path / "rep.json"
    args = ["speed", "--kernel", "fake_kernels:faithful", "-k", "lightning/naive-torch,plugin/faithful",
            "--n", "16", "--mode", "fwd,fwdbwd", "--budget", "0.01", "--device", "cpu", "--repeat", "3",
            "--out", out]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    doc = load(out)
    assert doc["run_order"] == [["lightning/naive-torch", "plugin/faithful"],
                                ["plugin/faithful", "lightning/naive-torch"],
                                ["lightning/naive-torch", "plugin/faithful"]]
    assert len(doc["rows"]) == 4
    for r in doc["rows"]:
        meds = sorted(x["median"] for x in r["runs"])
        assert [x["run"] for x in r["runs"]] == [0, 1, 2] and r["repeat"] == 3
        assert r["median"] == pytest.approx(meds[1])  # the median of the run medians
        assert r["run_spread"] == pytest.approx((meds[2] - meds[0]) / meds[1])
        assert r["samples"] == sum(len(x["timers"]["device"]["samples_ms"]) for x in r["runs"])
    res = invoke(*args, "--resume")  # nothing left to do
    assert res.exit_code == 0 and len(load(out)["rows"]) == 4
    assert all(r["repeat"] == 3 for r in load(out)["rows"])


def test_resume_runs_only_the_missing_runs(plugins, tmp_path):
    out = tmp_path / "res.json"
    base = ["speed", "-k", "lightning/naive-torch", "--n", "16", "--mode", "fwd", "--budget", "0.01",
            "--device", "cpu", "--out", out]
    assert invoke(*base).exit_code == 0
    assert invoke(*base, "--repeat", "2", "--resume").exit_code == 0
    (row,) = load(out)["rows"]
    assert [x["run"] for x in row["runs"]] == [0, 1] and row["repeat"] == 2


def tiny_suite(tmp_path, name: str, kernels: tuple[str, ...] = ("lightning/naive-torch",), checks: bool = False,
               extra: str = ""):
    """A CPU suite file at n 16, H2 D8: one fwd speed sweep (0.01 s a point), a check-grad section
    when ``checks``, and ``extra`` TOML before the axes."""
    suite = tmp_path / "s.toml"
    listed = ", ".join(f'"{k}"' for k in kernels)
    suite.write_text(f'name = "{name}"\ndevice = "cpu"\nkernels = [{listed}]\n{extra}'
                     '[axes]\nn = 16\nheads = 2\ndim = 8\n' + ("[check-grad]\n" if checks else "")
                     + '[speed]\nmodes = ["fwd"]\nbudget = 0.01\n')
    return suite


def test_check_grad_runs_after_timing_without_isolation(tmp_path):
    suite = tiny_suite(tmp_path, "order", checks=True)
    res = invoke("run", suite, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    metrics = [r["metric"] for r in load(tmp_path / "o" / "order.json")["rows"]]
    assert metrics[0] == "time_ms" and set(metrics[1:]) == {"err_ratio"}


@pytest.mark.parametrize("only, metrics, code", [("check-grad", {"err_ratio"}, 0), ("speed", {"time_ms"}, 0),
                                                   ("memory", None, 2), ("spead", None, 2)])
def test_only_runs_the_named_kinds_of_a_suite(tmp_path, only, metrics, code):
    suite = tiny_suite(tmp_path, "only", checks=True)
    res = invoke("run", suite, "--out", tmp_path / "o", "--only", only)
    assert res.exit_code == code, res.output
    if metrics:
        assert {r["metric"] for r in load(tmp_path / "o" / "only.json")["rows"]} == metrics
    else:
        assert "--only" in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("pattern, kernels, code", [("softmax/*", {"softmax/naive-torch"}, 0),
                                                     ("lightning/naive-torch,softmax/naive-torch",
                                                      {"lightning/naive-torch", "softmax/naive-torch"}, 0),
                                                     ("gla/*", None, 2)])
def test_kernels_runs_only_the_matching_kernels_of_a_suite(tmp_path, pattern, kernels, code):
    suite = tiny_suite(tmp_path, "some", ("lightning/naive-torch", "softmax/naive-torch"))
    res = invoke("run", suite, "--out", tmp_path / "o", "--kernels", pattern)
    assert res.exit_code == code, res.output
    if kernels:
        assert {r["kernel"] for r in load(tmp_path / "o" / "some.json")["rows"]} == kernels
    else:
        assert "--kernels 'gla/*' matches no kernel" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_plugin_given_to_run_joins_the_suites_measurements_of_its_family(plugins, tmp_path):
    suite = tiny_suite(tmp_path, "plug", ("lightning/naive-torch", "softmax/naive-torch"))
    res = invoke("run", suite, "--out", tmp_path / "o", "--kernel", "fake_kernels:faithful")
    assert res.exit_code == 0, res.output
    rows = load(tmp_path / "o" / "plug.json")["rows"]
    assert sorted(r["kernel"] for r in rows) == ["lightning/naive-torch", "plugin/faithful", "softmax/naive-torch"]


def test_a_suites_env_knobs_are_set_for_the_run_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_LATTNBENCH_TEST_KNOB", "before")  # restored when the test ends
    suite = tiny_suite(tmp_path, "knob", extra='[env]\nJAX_LATTNBENCH_TEST_KNOB = "set-by-suite"\n')
    res = invoke("run", suite, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert load(tmp_path / "o" / "knob.json")["env"]["knobs"]["JAX_LATTNBENCH_TEST_KNOB"] == "set-by-suite"
    suite.write_text(suite.read_text().replace("JAX_LATTNBENCH_TEST_KNOB", "HOME"))
    res = invoke("run", suite, "--out", tmp_path / "o2")
    assert res.exit_code == 2 and "HOME" in res.output and "knob" in res.output


def test_bad_isolation_is_a_usage_error(tmp_path):
    res = invoke("speed", "--isolate", "process", "--out", tmp_path / "x.json")
    assert res.exit_code == 2 and "--isolate" in res.output


def test_tuned_configs_are_kept_per_point_and_restored_only_where_still_listed(plugins, tmp_path):
    import stateful_kernels
    import triton

    from lattnbench.runner import tuning

    tuner = stateful_kernels.TUNER
    tuner.cache.clear()
    tuner.cache[(8, "torch.float32")] = tuner.configs[0]
    saved = tuning.snapshot()
    name = "stateful_kernels._never_launched"
    assert [(idx, text) for _, idx, text in saved[name]] == [(0, str(tuner.configs[0]))]
    path = tuning.point_file("plugin/tuned", C1.fields(), {"gpu": None})
    assert path != tuning.point_file("plugin/tuned", C2.fields(), {"gpu": None})
    tuning.save_point(path, saved)
    tuning.reset_autotuning()
    assert tuner.cache == {}
    assert tuning.restore(tuning.load_point(path)) == 1
    assert tuner.cache == {(8, "torch.float32"): tuner.configs[0]}
    tuner.cache.clear()
    old = tuner.configs
    tuner.configs = [triton.Config({"X": 1}, num_warps=8)]  # the kernel's config list changed
    try:
        assert tuning.restore(tuning.load_point(path)) == 0 and tuner.cache == {}
    finally:
        tuner.configs = old
