"""What a new user meets first: Ctrl-C and --resume, write errors, help and markup, the progress bar."""
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lattnbench.cli import app
from lattnbench.results import load

HERE = Path(__file__).parent
BOOT = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'lattnbench'; from lattnbench.cli import main; main()"]
runner = CliRunner()


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False, env=env)


STALLING = ["speed", "--kernel", "hang_kernels:stall", "-k", "lightning/naive-torch,plugin/stall", "--n", "32",
            "--mode", "fwd", "--budget", "0.05", "--device", "cpu"]


def _hang_then_ctrl_c(tmp_path: Path, store: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Start a speed run whose second kernel never returns, wait for the first row, press Ctrl-C."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
           "LATTNBENCH_RESULTS_DIR": str(store)}
    args = [*STALLING, *extra]
    proc = subprocess.Popen([*BOOT, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    path = None
    try:
        while time.monotonic() < deadline:
            files = sorted(store.glob("*/speed-*.json"))
            if files and load(files[0])["rows"]:
                path = files[0]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert path is not None, "no finished point after 120 s"
        proc.send_signal(signal.SIGINT)
        out, errs = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, errs), path


def test_ctrl_c_names_the_file_and_the_exact_resume_command_and_writes_the_csv(tmp_path):
    store = tmp_path / "store"
    done, path = _hang_then_ctrl_c(tmp_path, store)
    assert done.returncode == 130, done.stderr
    assert f"saved in {path}" in done.stderr and "Traceback" not in done.stderr
    assert path.with_suffix(".csv").exists()
    again = next(ln for ln in done.stderr.splitlines() if ln.startswith("continue with: "))
    assert again.endswith(f"--out {path} --resume") and "--kernels lightning/naive-torch,plugin/stall" in again
    doc = json.loads(path.read_text())
    assert doc["state"] == "interrupted" and doc["invocation"]["command"] == "speed"


def test_resume_without_out_finds_the_newest_interrupted_run_of_the_same_options(tmp_path, monkeypatch):
    store = tmp_path / "store"
    _, path = _hang_then_ctrl_c(tmp_path, store)
    monkeypatch.setenv("LATTNBENCH_RESULTS_DIR", str(store))
    monkeypatch.syspath_prepend(str(HERE))
    # other options: no match, and the message names the run there is
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "64", "--mode", "fwd", "--device", "cpu",
                 "--resume")
    assert res.exit_code == 2 and str(path) in res.output and len(res.output.strip().splitlines()) == 1
    # the same options, the kernel no longer stalling: picks the file up and finishes it
    monkeypatch.setenv("STALL_OFF", "1")
    res = invoke(*STALLING, "--resume")
    assert res.exit_code == 0, res.output
    assert f"resuming {path}" in res.output
    doc = load(path)
    assert doc["state"] == "finished"
    assert sorted(r["kernel"] for r in doc["rows"]) == ["lightning/naive-torch", "plugin/stall"]


def test_resume_without_out_and_no_interrupted_run_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTNBENCH_RESULTS_DIR", str(tmp_path))
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "32", "--device", "cpu", "--resume")
    assert res.exit_code == 2 and "no interrupted `speed` run" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_find_resumable_picks_the_newest_matching_unfinished_file(tmp_path):
    from lattnbench.runner.invocation import NoRunToResume, find_resumable

    def put(name, state, args, age):
        p = tmp_path / name
        p.write_text(json.dumps({"state": state, "invocation": {"command": "speed", "args": args}}))
        os.utime(p, (time.time() - age, time.time() - age))
        return p

    put("speed-1.json", "interrupted", ["--n", "32"], 30)
    newer = put("speed-2.json", "running", ["--n", "32"], 20)
    put("speed-3.json", "finished", ["--n", "32"], 10)
    put("speed-4.json", "interrupted", ["--n", "64"], 5)
    assert find_resumable(tmp_path, "speed", ["--n", "32"]) == newer
    with pytest.raises(NoRunToResume, match="speed-4.json"):
        find_resumable(tmp_path, "speed", ["--n", "128"])


def test_plot_to_an_unwritable_path_is_one_line_exit_2():
    res = invoke("plot", "results/h200/seed-readme.json.gz", "--out", "/proc/x.png")
    assert res.exit_code == 2, res.output
    assert "cannot write /proc/x.png" in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--out", "--readme"])
def test_report_to_an_unwritable_path_is_one_line_exit_2(flag):
    res = invoke("report", "results/cpu/ci.json", flag, "/proc/x.md", "--name", "ci")
    assert res.exit_code == 2, res.output
    assert "/proc/x.md" in res.output and len(res.output.strip().splitlines()) == 1


def test_an_unwritable_csv_view_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "r.csv"
    blocker.mkdir()  # the CSV's name is taken by a folder
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "32", "--mode", "fwd", "--budget", "0.01",
                 "--device", "cpu", "--out", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    assert f"cannot write {blocker}" in res.output and "Traceback" not in res.output


def test_an_empty_suite_names_its_sections_literally(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    res = invoke("run", empty, "--out", tmp_path / "o")
    assert res.exit_code == 2
    assert "[speed], [memory] or [check-grad]" in res.output


@pytest.mark.parametrize("command", ["speed", "memory", "check-grad", "run", "gate", "report", "list", "env"])
def test_flags_show_no_value_in_help(command):
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0
    lines = [ln for ln in res.output.splitlines() if "--json" in ln or "--help" in ln]
    assert lines and not any("<bool>" in ln for ln in lines), lines


def test_progress_bar_keeps_count_elapsed_and_eta_at_80_columns():
    from lattnbench.commands.sweep import Progress
    from lattnbench.runner.plan import Task
    from lattnbench.spec import Case

    sink = io.StringIO()
    console = Console(file=sink, width=80, force_terminal=True, color_system=None)
    case = Case(seqlen=32768, batch=4, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16")
    task = Task("speed", "lightning/jax-triton-with-a-long-name", case, ("fwd",), 0.5, run=2)
    progress = Progress("speed", 126, console=console)
    progress.start(task)
    progress.done(task, [])
    shown = Console(file=io.StringIO(), width=80, color_system=None)
    shown.print(progress.bar.make_tasks_table(progress.bar.tasks))
    last = [ln for ln in shown.file.getvalue().splitlines() if ln.strip()][-1]
    assert "1/126" in last and "eta" in last and "0:00:0" in last, last
    assert len(last.rstrip()) <= 80


def test_fwd_slower_than_fwdbwd_is_named():
    from lattnbench.views.rows import inverted_modes

    base = {"kernel": "k", "family": "lightning", "device": "cpu", "batch": 1, "seqlen": 256, "heads": 4,
            "kv_heads": 4, "dim_qk": 64, "dim_v": 64, "dtype": "fp32", "metric": "time_ms", "status": "ok"}
    rows = [{**base, "mode": "fwd", "median": 3.0}, {**base, "mode": "fwdbwd", "median": 2.0},
            {**base, "seqlen": 512, "mode": "fwd", "median": 1.0},
            {**base, "seqlen": 512, "mode": "fwdbwd", "median": 2.0}]
    found = inverted_modes(rows)
    assert len(found) == 1 and "k" in found[0] and "T256" in found[0] and "3.00" in found[0]


def test_the_plain_gpu_run_caps_flash_attention_and_times_gluon():
    from lattnbench.runner.select import default_kernel
    from lattnbench.registry import default_registry

    reg = default_registry()
    defaults = {e.name for e in reg if e.reference is False and e.origin == "bundled"
                and "cuda" in e.timed_by_default and not e.sequence_parallel}
    assert {"lightning/gluon", "lightning/triton", "softmax/sdpa-flash"} <= defaults
    assert "lightning/jax-triton" not in defaults  # JAX's start-up alone took a third of the budget
    flash = next(e for e in reg if e.name == "softmax/sdpa-flash")
    assert flash.caps("cuda", 16384) and not flash.caps("cuda", 8192) and not flash.caps("cpu", 32768)
    assert callable(default_kernel)


def test_cpu_speed_tables_name_the_host_clock_not_do_bench(tmp_path):
    from lattnbench.views.report import render
    from lattnbench.views.rows import load_docs

    (doc,) = load_docs(["results/cpu/ci.json"])
    text = render([doc])
    assert "speed ·" in text and "do_bench" not in text and "L2" not in text and "host clock" in text
    (gpu,) = load_docs(["results/h200/default-speed.json.gz"])
    assert "as triton.testing.do_bench" in render([gpu])


ROOT = Path(__file__).resolve().parents[2]
#: every committed H200 results file, plain or gzip-compressed (``X.json.gz``)
RESULTS = sorted(p for pattern in ("*.json", "*.json.gz") for p in (ROOT / "results/h200").glob(pattern)
                 if p.name != "doctor.json")


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name.split(".")[0])
def test_report_at_80_columns_prints_no_longer_line(path):
    res = CliRunner().invoke(app, ["report", str(path)], env={"COLUMNS": "80"})
    assert res.exit_code in (0,), res.output[-1500:]
    long = [ln for ln in res.stdout.splitlines() if len(ln) > 80]
    assert not long, long[:3]
    assert "…" not in res.stdout


def test_report_filters_kernels_by_glob_and_n():
    res = CliRunner().invoke(app, ["report", "results/h200/seed-readme.json.gz", "--format", "md",
                                   "-k", "lightning/tri*,softmax/sdpa-flash", "--n", "1024..4096",
                                   "--metric", "speed", "--mode", "fwd"])
    assert res.exit_code == 0, res.output
    table = [ln for ln in res.stdout.splitlines() if ln.startswith("|")]
    assert "lightning/triton" in table[0] and "softmax/sdpa-flash" in table[0] and "cudnn" not in table[0]
    assert [ln.split("|")[1].strip() for ln in table[2:]] == ["1024", "2048", "4096"]
    bad = CliRunner().invoke(app, ["report", "results/h200/seed-readme.json.gz", "-k", "nope/*"])
    assert bad.exit_code == 2 and "matches no kernel" in bad.output


def test_plot_takes_the_same_filters(tmp_path):
    out = tmp_path / "p.svg"
    res = CliRunner().invoke(app, ["plot", "results/h200/seed-readme.json.gz", "--out", str(out), "-k", "lightning/triton",
                                   "--n", "512..2048", "--mode", "fwd"])
    assert res.exit_code == 0, res.output
    svg = out.read_text()
    assert "lightning/triton" in svg and "sdpa-flash" not in svg


def test_headline_tolerates_a_missing_kernel_and_names_it():
    from lattnbench.views.headline import headline
    from lattnbench.views.rows import load_docs

    (doc,) = load_docs(["results/h200/seed-readme.json.gz"])
    first = headline(doc).splitlines()[0]
    assert "gluon" in first and "triton" in first and "fla" in first
    # the same run without its Gluon rows: the column goes and the legend names the kernel
    doc = {**doc, "rows": [r for r in doc["rows"] if r["kernel"] != "lightning/gluon"]}
    text = headline(doc)
    assert "Not in this run: `lightning/gluon`" in text
    first = text.splitlines()[0]
    assert "triton" in first and "fla" in first and "gluon" not in first
    assert max(len(ln) for ln in text.splitlines()) <= 100


def test_terminal_report_marks_data_dependent_speed(tmp_path):
    from lattnbench.results import ResultsWriter

    path = tmp_path / "gla.json"
    w = ResultsWriter(path, "gla", {})
    base = {"kernel": "gla/triton", "family": "gla", "framework": "torch", "device": "cuda", "batch": 1,
            "seqlen": 1024, "heads": 4, "kv_heads": 4, "dim_qk": 64, "dim_v": 64, "dtype": "bf16",
            "mode": "fwd", "metric": "time_ms", "timer": "device", "status": "ok", "reason": None}
    w.add([{**base, "gate_norm": 16.0, "g_dtype": "fp32", "median": 1.0, "p20": 0.99, "p80": 1.01},
           {**base, "gate_norm": 0.1, "g_dtype": "fp32", "median": 2.0, "p20": 1.98, "p80": 2.02}])
    res = CliRunner().invoke(app, ["report", str(path)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "§2.0×" in res.stdout or "§2×" in res.stdout, res.stdout
    assert "data-dependent" in res.stdout


def test_the_gpu_default_budget_is_the_headline_suites():
    from lattnbench.commands.sweep import CPU_BUDGET, GPU_BUDGET
    from lattnbench.suite import load_suite

    speed = next(m for m in load_suite("seed-readme").measurements if m.kind == "speed")
    assert GPU_BUDGET == speed.budget and CPU_BUDGET == 0.5


def test_a_cpu_speed_run_says_what_its_device_timer_is(tmp_path):
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "32", "--mode", "fwd", "--budget", "0.01",
                 "--device", "cpu", "--out", tmp_path / "r.json", env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "device timer: the host clock over a batch" in res.stdout and "do_bench" not in res.stdout
