"""Reliability: no crash, no lost measurement, a clear error for every bad input.

Subprocess tests run the real console script (a SIGKILL mid-sweep, a hung kernel under
``--point-timeout``, Ctrl-C); the rest runs in-process. Misbehaving kernels come from the
plugin module ``hang_kernels`` beside this file.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.measure import memory_estimate
from lattnbench.cli import app
from lattnbench.harness.memory_fit import estimate, estimate_bytes, too_big
from lattnbench.measure.memory_estimate import meminfo_available
from lattnbench.registry import default_registry
from lattnbench.results import load, row_key
from lattnbench.spec import Case

HERE = Path(__file__).parent
# SIGINT gets Python's own handler, as in a terminal: a shell that starts pytest in the background
# (`pytest &` from a script) hands every child SIGINT ignored, and a CLI that ignores Ctrl-C would
# leave the Ctrl-C tests waiting for an exit that never comes
BOOT = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'lattnbench'; from lattnbench.cli import main; main()"]
runner = CliRunner()
_started: list[subprocess.Popen] = []


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def env_with_plugins() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def start(*args, **kw) -> subprocess.Popen:
    proc = subprocess.Popen([*BOOT, *map(str, args)], env=env_with_plugins(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)
    _started.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_cli_left_running():
    """A test that fails half-way leaves no CLI running (its workers die with it: PDEATHSIG)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def ctrl_c(proc: subprocess.Popen, limit_s: float = 60) -> str:
    """Send SIGINT as Ctrl-C does and wait for the exit; returns stderr. Fails with what the CLI said
    if it is still running after limit_s."""
    ignored = int(next(ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                       if ln.startswith("SigIgn:")).split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), "the CLI process ignores SIGINT"
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"still running {limit_s:g} s after SIGINT; stderr:\n{stderr[-2000:]}")
    return stderr


def rows_in(path: Path) -> list[dict]:
    try:
        return load(path)["rows"]
    except Exception:  # noqa: BLE001 - not written yet
        return []


def workers_of(parent: int) -> list[int]:
    """Live worker processes started by ``parent`` (they carry its pid in their environment)."""
    from lattnbench.runner.worker import PARENT_ENV

    mark = f"{PARENT_ENV}={parent}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return found


def wait_for_rows(path: Path, proc: subprocess.Popen, count: int, limit_s: float = 60) -> list[dict]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        rows = rows_in(path)
        if len(rows) >= count:
            return rows
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {count} rows in {path} after {limit_s} s")


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


# ---- killed mid-sweep, read back, resumed ------------------------------------------------------

SWEEP = ["speed", "-k", "lightning/naive-torch,softmax/naive-torch", "--n", "32..512", "--mode", "fwd",
         "--budget", "0.1", "--device", "cpu"]
TOTAL = 2 * 5  # two kernels × n 32..512


def test_sigkill_mid_sweep_keeps_every_finished_point_and_resume_completes(tmp_path):
    out = tmp_path / "run.json"
    proc = start(*SWEEP, "--out", out)
    wait_for_rows(out, proc, 2)
    proc.kill()  # SIGKILL: no handler runs, no chance to save anything more
    proc.wait()
    partial = load(out)["rows"]
    assert 2 <= len(partial) < TOTAL and all(r["status"] == "ok" for r in partial)

    res = invoke("report", out)  # the readers take the partial file as it is
    assert res.exit_code == 0 and "naive-torch" in res.output and "Traceback" not in res.output
    res = invoke("plot", out, "--out", tmp_path / "p.png")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = invoke("gate", out, "--baseline", out)
    assert res.exit_code == 0, res.output

    res = invoke(*SWEEP, "--out", out, "--resume")
    assert res.exit_code == 0, res.output
    rows = load(out)["rows"]
    assert len(rows) == TOTAL and len({row_key(r) for r in rows}) == TOTAL
    assert rows[: len(partial)] == partial  # the finished points are kept, not redone

    partial_path = tmp_path / "partial.json"  # a partial run against the full one: points lost
    partial_doc = load(out)
    partial_doc["rows"] = partial
    partial_path.write_text(json.dumps(partial_doc))
    res = invoke("gate", partial_path, "--baseline", out)
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_ctrl_c_stops_cleanly_after_saving(tmp_path):
    """Ctrl-C while a point is in flight: the finished points are saved, exit 130, no traceback.

    The second kernel never returns, so the signal always lands inside a point whatever the load.
    """
    out = tmp_path / "run.json"
    proc = start("speed", "--kernel", "hang_kernels:hang", "-k", "lightning/naive-torch,plugin/hang",
                 "--n", "32", "--mode", "fwd", "--budget", "0.05", "--device", "cpu", "--out", out)
    wait_for_rows(out, proc, 1, limit_s=120)
    stderr = ctrl_c(proc)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    rows = load(out)["rows"]
    assert [(r["kernel"], r["status"]) for r in rows] == [("lightning/naive-torch", "ok")]


@pytest.mark.parametrize("isolate", ["none", "kernel"])
def test_ctrl_c_reaches_the_worker_and_keeps_its_rows(tmp_path, isolate):
    """With workers (a point timeout, or isolation) Ctrl-C stops the worker too; nothing is lost."""
    out = tmp_path / "run.json"
    proc = start("speed", "--kernel", "hang_kernels:hang", "-k", "lightning/naive-torch,plugin/hang",
                 "--n", "32", "--mode", "fwd", "--budget", "0.05", "--device", "cpu", "--out", out,
                 "--isolate", isolate, "--point-timeout", "600")
    wait_for_rows(out, proc, 1, limit_s=120)
    stderr = ctrl_c(proc)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert [(r["kernel"], r["status"]) for r in load(out)["rows"]] == [("lightning/naive-torch", "ok")]


def test_ctrl_c_stops_every_parallel_check_worker_and_keeps_the_finished_rows(tmp_path):
    """--jobs 2: one worker hangs while the other finishes; Ctrl-C stops both, the rows stay."""
    out = tmp_path / "par.json"
    proc = start("check-grad", "--kernel", "hang_kernels:hang", "--kernel", "fake_kernels:faithful",
                 "-k", "plugin/hang,plugin/faithful", "--n", "16", "--heads", "2", "--dim", "8",
                 "--initial-state", "off", "--device", "cpu", "--isolate", "kernel", "--jobs", "2",
                 "--out", out)
    wait_for_rows(out, proc, 5, limit_s=120)  # the faithful kernel's five tensors
    assert workers_of(proc.pid), "the hung kernel's worker should still be running"
    stderr = ctrl_c(proc)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    rows = load(out)["rows"]
    assert {(r["kernel"], r["status"]) for r in rows} == {("plugin/faithful", "ok")} and len(rows) == 5
    assert not workers_of(proc.pid), "workers left running after Ctrl-C"


# ---- per-point timeout and crashes (workers) ----------------------------------------------------

@pytest.mark.parametrize("isolate", ["none", "kernel"])
def test_a_hung_kernel_times_out_and_the_sweep_finishes_the_others(tmp_path, isolate):
    out = tmp_path / "t.json"
    proc = start("speed", "--kernel", "hang_kernels:hang", "--kernel", "fake_kernels:faithful",
                 "-k", "lightning/naive-torch,plugin/hang,plugin/faithful",
                 "--n", "32", "--mode", "fwd", "--budget", "0.05", "--device", "cpu",
                 "--point-timeout", "5", "--isolate", isolate, "--out", out)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    status = {r["kernel"]: (r["status"], r["reason"]) for r in load(out)["rows"]}
    assert status["plugin/hang"] == ("timeout", "no result after 5 s (per-point timeout)")
    assert status["lightning/naive-torch"][0] == "ok" and status["plugin/faithful"][0] == "ok"
    assert len(load(out)["rows"]) == 3
    assert "carrying on in a new worker" in stderr and "timeout" in stdout


def test_a_crashing_kernel_is_an_error_row_and_the_others_run(tmp_path):
    """A worker killed outright, and one that exits after an exception's traceback (whose row then
    names the exception line, not the hint printed after it); the kernel after them still runs."""
    out = tmp_path / "c.json"
    proc = start("check-grad", "--kernel", "hang_kernels:crash", "--kernel", "hang_kernels:abort",
                 "--kernel", "fake_kernels:faithful", "-k", "plugin/crash,plugin/abort,plugin/faithful",
                 "--n", "16", "--initial-state", "off", "--device", "cpu", "--isolate", "kernel", "--out", out)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr
    rows = load(out)["rows"]
    crashed = [r for r in rows if r["kernel"] == "plugin/crash"]
    assert crashed and {r["status"] for r in crashed} == {"error"}
    assert {r["reason"] for r in crashed} == {"the process died (killed by SIGKILL) while running this point"}
    assert [r["tensor"] for r in crashed] == ["o", "final_state", "dq", "dk", "dv"]
    aborted = [r for r in rows if r["kernel"] == "plugin/abort"]
    assert aborted and {r["reason"] for r in aborted} == {
        "the process died (exit status 1: torch.AcceleratorError: CUDA error: an illegal memory access was "
        "encountered) while running this point"}
    assert {r["status"] for r in rows if r["kernel"] == "plugin/faithful"} == {"ok"}


def test_a_killed_parent_takes_its_worker_along(tmp_path):
    out = tmp_path / "r.json"
    proc = start("speed", "--kernel", "hang_kernels:hang", "-k", "plugin/hang", "--n", "32", "--mode", "fwd",
                 "--device", "cpu", "--isolate", "kernel", "--out", out)
    worker = None
    deadline = time.monotonic() + 120
    while worker is None and time.monotonic() < deadline:
        worker = next((p for p in _children(proc.pid) if "lattnbench.runner.worker" in _cmdline(p)), None)
        time.sleep(0.05)
    assert worker is not None, "no worker process started"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its parent")


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf"])
def test_bad_point_timeout_is_a_usage_error(value, tmp_path):
    res = invoke("speed", "--point-timeout", value, "--out", tmp_path / "r.json")
    assert res.exit_code == 2 and "--point-timeout" in res.output
    assert len(res.output.strip().splitlines()) == 1


# ---- in-process isolation: NaN, exceptions, OOM --------------------------------------------------

def test_nan_error_and_oom_points_are_rows_and_the_sweep_goes_on(plugins, tmp_path):
    out = tmp_path / "s.json"
    res = invoke("speed", "--kernel", "hang_kernels:nan", "--kernel", "hang_kernels:boom",
                 "--kernel", "hang_kernels:oom", "--kernel", "fake_kernels:faithful",
                 "-k", "plugin/nan,plugin/boom,plugin/oom,plugin/faithful", "--n", "16,32", "--mode", "fwd",
                 "--budget", "0.01", "--device", "cpu", "--out", out)
    assert res.exit_code == 1, res.output
    rows = load(out)["rows"]
    assert len(rows) == 8
    by = {(r["kernel"], r["seqlen"]): r for r in rows}
    for n in (16, 32):
        assert by["plugin/nan", n]["status"] == "fail" and "NaN" in by["plugin/nan", n]["reason"]
        boom = by["plugin/boom", n]
        assert boom["status"] == "error" and "\n" not in boom["reason"]
        assert boom["reason"] == "RuntimeError: kernel launch failed: invalid argument"
        assert by["plugin/oom", n]["status"] == "oom" and "out of memory" in by["plugin/oom", n]["reason"]
        assert by["plugin/faithful", n]["status"] == "ok"


def test_check_grad_says_why_an_error_is_infinite(plugins, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", "hang_kernels:nan", "-k", "plugin/nan", "--n", "16",
                 "--initial-state", "off", "--device", "cpu", "--out", out)
    assert res.exit_code == 1, res.output
    o = next(r for r in load(out)["rows"] if r["tensor"] == "o")
    size = o["batch"] * o["seqlen"] * o["heads"] * o["dim_v"]
    assert o["status"] == "fail" and o["reason"] == f"not finite: {size} NaN and 0 Inf of {size} values"


def test_oom_alone_is_not_a_failure_exit(plugins, tmp_path):
    res = invoke("speed", "--kernel", "hang_kernels:oom", "-k", "plugin/oom", "--n", "16", "--mode", "fwd",
                 "--device", "cpu", "--out", tmp_path / "s.json")
    assert res.exit_code == 0, res.output


def test_check_grad_error_rows_are_one_line(plugins, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", "hang_kernels:boom", "--kernel", "fake_kernels:faithful",
                 "-k", "plugin/boom,plugin/faithful", "--n", "16", "--initial-state", "off",
                 "--device", "cpu", "--out", out)
    assert res.exit_code == 1
    rows = load(out)["rows"]
    assert {r["status"] for r in rows if r["kernel"] == "plugin/boom"} == {"error"}
    assert {r["status"] for r in rows if r["kernel"] == "plugin/faithful"} == {"ok"}
    res = invoke("check-grad", "--kernel", "hang_kernels:boom", "--kernel", "fake_kernels:faithful",
                 "-k", "plugin/boom,plugin/faithful", "--n", "16", "--initial-state", "off",
                 "--device", "cpu", "--out", out, "--resume")
    assert res.exit_code == 1 and load(out)["rows"] == rows  # --resume: nothing redone


# ---- memory sense --------------------------------------------------------------------------------

def test_estimate_matches_the_analytic_numbers_of_the_seed_shape():
    case = Case(4, 32768, 32, 32, 128, 128, "bf16")  # the seed README's largest point
    tensor = 4 * 32768 * 32 * 128 * 2  # one [B, T, H, D] bf16 tensor: 1 GiB
    state = 4 * 32 * 128 * 128 * 4     # [N, H, D, E] fp32: 8 MiB
    scores = 4 * 32 * 32768**2 * 2     # B·H·T² bf16: 256 GiB
    fwd = estimate("lightning", case, "fwd", quadratic=True)
    assert fwd.inputs == 4 * tensor + state  # q, k, v, do + dS
    assert fwd.outputs == tensor + state and fwd.grads == 0
    assert fwd.work == 2 * scores
    bwd = estimate("lightning", case, "fwdbwd", quadratic=True)
    assert bwd.grads == 3 * tensor and bwd.work == 3 * scores
    naive = default_registry()["lightning/naive-torch"]
    assert estimate_bytes(naive, case, "fwdbwd") == bwd.total > 768 * 2**30
    chunked = default_registry()["lightning/jax-chunked"]
    linear = estimate("lightning", case, "fwdbwd")
    assert linear.work == 4 * 4 * 32 * (512 * 128 * 128 + 32768 * 64)  # chunk states + C×C blocks
    assert estimate_bytes(chunked, case, "fwdbwd") == linear.total < 16 * 2**30
    soft = estimate("softmax", case, "fwd", quadratic=True)  # softmax upcasts half scores to fp32
    assert soft.work == 2 * 2 * scores and soft.outputs == tensor
    gqa = estimate("lightning", Case(1, 1024, 8, 2, 64, 32, "fp32", initial_state=True), "fwdbwd")
    assert gqa.inputs == 4 * 1024 * (8 * 64 + 2 * 64 + 2 * 32 + 8 * 32) + 2 * 4 * 8 * 64 * 32


def test_too_big_names_need_and_free():
    entry = default_registry()["lightning/naive-torch"]
    case = Case(4, 32768, 32, 32, 128, 128, "bf16")
    reason = too_big(entry, case, "fwd", "cpu", free=8 * 10**9)
    assert reason == "needs ~555 GB, device has 8 GB free"
    assert too_big(entry, Case(1, 64, 2, 2, 8, 8, "fp32"), "fwd", "cpu", free=8 * 10**9) is None


def test_meminfo(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n")
    assert meminfo_available(str(f)) == 8000000 * 1024
    assert meminfo_available(str(tmp_path / "none")) is None
    f.write_text("MemTotal: 1 kB\n")
    assert meminfo_available(str(f)) is None


def test_a_case_that_cannot_fit_is_recorded_oom_without_running(monkeypatch, tmp_path):
    import lattnbench.harness.points as measure

    entry = default_registry()["lightning/naive-torch"]
    case = Case(1, 256, 2, 2, 16, 16, "fp32")
    need_fwd, need_bwd = (estimate_bytes(entry, case, m) for m in ("fwd", "fwdbwd"))
    monkeypatch.setattr(memory_estimate, "meminfo_available", lambda: need_fwd - 1)
    monkeypatch.setattr(measure, "make_problem", lambda *a, **k: pytest.fail("ran a point that cannot fit"))
    out = tmp_path / "s.json"
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "256", "--heads", "2", "--dim", "16",
                 "--mode", "fwd,fwdbwd", "--device", "cpu", "--out", out)
    assert res.exit_code == 0, res.output  # oom is a finding, not a crash or a failure
    rows = load(out)["rows"]
    assert [r["status"] for r in rows] == ["oom", "oom"]
    assert rows[0]["reason"].startswith("needs ~") and "GB free" in rows[0]["reason"]

    # only the backward is too big: it is recorded oom, the forward still runs
    monkeypatch.undo()
    monkeypatch.setattr(memory_estimate, "meminfo_available", lambda: (need_fwd + need_bwd) // 2)
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "256", "--heads", "2", "--dim", "16",
                 "--mode", "fwd,fwdbwd", "--budget", "0.01", "--device", "cpu", "--out", out)
    assert res.exit_code == 0, res.output
    assert {r["mode"]: r["status"] for r in load(out)["rows"]} == {"fwd": "ok", "fwdbwd": "oom"}


# ---- bad input: one line, exit 2 ---------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["speed", "--n=-5"], "bad --n range"),
    (["speed", "--n", "1..100000:+1"], "more than"),
    (["speed", "--batch", "0"], "positive"),
    (["speed", "--heads", "four"], "bad --heads range"),
    (["memory", "--dim", "64..16"], "below the start"),
    (["check-grad", "--dtype", "fp32,int8"], "unknown dtype 'int8'"),
    (["check-grad", "--kernels", "softmax/flash"], "did you mean"),
    (["memory", "--heads", "8", "--kv-heads", "3"], "not a multiple"),
])
def test_more_usage_errors_exit_2_with_one_line(args, needle, tmp_path):
    res = invoke(*args, "--out", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    assert needle in res.output and len(res.output.strip().splitlines()) == 1


def test_an_empty_range_option_is_refused():
    from lattnbench.commands import axes
    from lattnbench.spec import SpecError

    with pytest.raises(SpecError, match="empty"):
        axes.cases(axes.CPU_DEFAULTS, "", None, None, None, None, None, None, "alibi")


@pytest.mark.parametrize("text, needle", [
    ('kernels = ["lightning/naive-torch"]\nbogus = 1\n[axes]\nn = 16\n[speed]\n', "'bogus'"),
    ('[axes]\nn = 16\n[speed]\nmodes = ["fwd"]\nbudjet = 1\n', "'budjet'"),
    ('[axes]\nn = 16\nbatch = "many"\n[speed]\n', "axes.batch"),
    ('[axes]\nn = 16\ndtype = 32\n[memory]\n', "axes.dtype"),
    ('[axes]\nn = 16\n[speed]\nbudget = "fast"\n', "speed.budget"),
    ('[axes]\nn = 16\nreverse = "yes"\n[check-grad]\n', "axes.reverse"),
    ('speed = 3\n', "'speed'"),
    ("[axes\nn = 16\n", "not valid TOML"),
])
def test_bad_suite_exits_2_naming_the_key(text, needle, tmp_path):
    suite = tmp_path / "bad.toml"
    suite.write_text(text)
    res = invoke("run", suite, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert needle in res.output and len(res.output.strip().splitlines()) == 1


def test_run_with_an_unwritable_output_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    suite = tmp_path / "s.toml"
    suite.write_text('kernels = ["lightning/naive-torch"]\n[axes]\nn = 16\n[speed]\n')
    res = invoke("run", suite, "--device", "cpu", "--out", blocker / "sub")
    assert res.exit_code == 2 and "cannot" in res.output and len(res.output.strip().splitlines()) == 1
    res = invoke("check-grad", "--n", "16", "--device", "cpu", "--out", blocker / "r.json")
    assert res.exit_code == 2 and "cannot" in res.output


@pytest.mark.parametrize("content", [
    '{"schema": "lattnbench.results/1", "rows": [{"kernel": "x", "fam',   # cut mid-write
    "\x00\x01garbage",
    '{"name": "some other tool", "results": []}',
    '{"schema": "lattnbench.results/1", "rows": [3]}',
])
@pytest.mark.parametrize("command", ["report", "plot", "gate"])
def test_readers_reject_corrupt_or_foreign_files_with_one_line(command, content, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    args = [command, bad] + (["--baseline", bad] if command == "gate" else [])
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert str(bad.name) in res.output and len(res.output.strip().splitlines()) == 1
