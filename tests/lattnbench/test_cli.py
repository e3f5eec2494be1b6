"""The CLI end to end (in-process): exit codes, one-line errors, a wrong kernel caught."""
import json

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def plugins(monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.path.parent))


def test_help_lists_every_command():
    res = invoke("--help")
    assert res.exit_code == 0
    for cmd in ("speed", "memory", "check-grad", "list", "env", "report", "plot", "gate", "static", "doctor"):
        assert cmd in res.output


def test_command_help_paragraphs_flow_to_the_terminal_width():
    # a docstring's hard line breaks would wrap twice at a narrower terminal: each command's help
    # is its docstring with every paragraph on one line, and --help at 60 columns still shows it
    for info in app.registered_commands:
        paragraphs = info.help.split("\n\n")
        assert len(paragraphs) >= 1 and not any("\n" in p for p in paragraphs), info.callback.__name__
    res = CliRunner().invoke(app, ["speed", "--help"], env={"COLUMNS": "60"})
    assert res.exit_code == 0
    flat = " ".join(res.output.replace("│", " ").split())
    assert "(as triton.testing.do_bench); graph: device time without host work" in flat


@pytest.mark.parametrize("args, needle", [
    (["speed", "--n", "4096..512"], "below the start"),
    (["speed", "--n", "abc"], "bad --n range"),
    (["speed", "--n", "0"], "positive"),
    (["speed", "--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["speed", "--kernels", "lightning/trition"], "did you mean lightning/triton"),
    (["speed", "--heads", "6", "--kv-heads", "4"], "not a multiple"),
    (["speed", "--mode", "sideways"], "unknown mode"),
    (["memory", "--device", "tpu"], "unknown device"),
    (["memory", "--mode", "fwd,bwd"], "memory measures fwd and fwdbwd"),
    (["check-grad", "--varlen", "3,x"], "bad --varlen"),
    (["check-grad", "--initial-state", "maybe"], "bad --initial-state"),
    (["speed", "--kernel", "nocolon"], "package.module:function"),
])
def test_usage_errors_exit_2_with_one_line(args, needle, tmp_path):
    res = invoke(*args, "--out", str(tmp_path / "r.json"))
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_unwritable_output_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "32", "--out", str(blocker / "r.json"))
    assert res.exit_code == 2 and "cannot" in res.output


def test_list_json_has_the_documented_fields():
    res = invoke("list", "--json", "--device", "cpu")
    items = json.loads(res.output)
    assert res.exit_code == 0 and items
    for it in items:
        assert {"name", "family", "framework", "available", "reason", "default"} <= set(it)
        assert (it["reason"] is None) == it["available"]
        assert not it["default"] or (it["available"] and not it["reference"] and it["origin"] == "bundled")
    sdpa = next(i for i in items if i["name"] == "softmax/sdpa-flash")
    assert not sdpa["available"] and "cuda" in sdpa["reason"]


def test_env_json():
    block = json.loads(invoke("env", "--json").output)
    assert block["versions"]["torch"] and block["cpu_count"] >= 1 and "commit" in block


def test_wrong_kernel_fails_check_grad_with_exit_1(plugins, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", "fake_kernels:no_decay", "-k", "plugin/no-decay",
                 "--n", "40", "--out", str(out))
    assert res.exit_code == 1
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["status"] == "fail" for r in rows)
    assert {r["tensor"] for r in rows} >= {"o", "final_state", "dq", "dk", "dv", "dh0"}


def test_faithful_kernel_passes_check_grad(plugins, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", "fake_kernels:faithful", "-k", "plugin/faithful",
                 "--n", "40", "--varlen", "17,1,22", "--reverse", "--kv-heads", "2", "--dim-v", "24",
                 "--out", str(out))
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["status"] == "ok" and r["median"] <= r["tol"] for r in rows)
    assert all(r["varlen"] == [17, 1, 22] and r["reverse"] for r in rows)


def test_speed_json_writes_results_and_stdout(tmp_path):
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["speed", "-k", "lightning/naive-torch", "--n", "32,48", "--mode", "fwd,bwd",
                              "--budget", "0.01", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc == json.loads(out.read_text())
    assert len(doc["rows"]) == 4 and all(r["status"] == "ok" and r["median"] > 0 for r in doc["rows"])
    assert all(r["p20"] <= r["median"] <= r["p80"] for r in doc["rows"])
    assert (tmp_path / "s.csv").exists()


def test_unsupported_points_are_recorded_not_fatal(tmp_path):
    out = tmp_path / "m.json"
    res = invoke("memory", "-k", "lightning/naive-torch,softmax/sdpa-flash", "--n", "32", "--out", str(out))
    assert res.exit_code == 0
    rows = json.loads(out.read_text())["rows"]
    status = {(r["kernel"], r["status"]) for r in rows}
    assert ("softmax/sdpa-flash", "unavailable") in status
    assert ("lightning/naive-torch", "unsupported") in status  # CPU torch keeps no peak


def test_triton_kernel_runs_interpreted_from_a_plain_shell_in_bf16(tmp_path):
    """Without TRITON_INTERPRET in the environment, `--device cpu` still runs the Triton kernel
    (the harness switches the interpreter on before the kernel module is imported), and in bf16
    it computes as on the GPU (the harness installs ``interpreter_bf16``; the interpreter alone
    multiplies bf16 bit patterns as integers, errors far past the tolerance)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "cg.json"
    # one batch row and two heads: the interpreter's time grows with both, and the switch is at stake
    proc = subprocess.run([sys.executable, "-c", "from lattnbench.cli import main; main()", "check-grad",
                           "-k", "lightning/triton", "--device", "cpu", "--n", "40", "--initial-state", "on",
                           "--batch", "1", "--heads", "2", "--dtype", "bf16", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["tensor"] for r in rows} == {"o", "final_state", "dq", "dk", "dv", "dh0"}
    assert {r["dtype"] for r in rows} == {"bf16"}
    assert all(r["status"] == "ok" and r["median"] <= r["tol"] for r in rows)


def test_an_empty_kernel_list_is_a_usage_error(tmp_path):
    res = invoke("speed", "--kernels", "", "--out", tmp_path / "r.json")
    assert res.exit_code == 2 and "no kernel named" in res.output


def test_a_glob_leaves_peers_out_and_says_so(tmp_path):
    from lattnbench.runner.select import pick_kernels
    from lattnbench.registry import default_registry

    res = invoke("check-grad", "-k", "lightning/*chunk*", "--n", "16", "--heads", "2", "--dim", "8",
                 "--initial-state", "off", "--out", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert "leaves out the peers" in res.output and "lightning/fla-chunk" in res.output
    kernels = {r["kernel"] for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert kernels == {"lightning/jax-chunked"}
    # named, a peer is chosen (its run is test_peers' test_real_ejkernel_check_grad_is_recorded_as_found)
    named = pick_kernels(default_registry(), ["lightning/ejkernel", "lightning/*chunk*"], "cpu", timing=False)
    assert {e.name for e in named} == {"lightning/ejkernel", "lightning/jax-chunked"}


def test_a_plugin_given_with_kernel_runs_without_k(plugins, tmp_path):
    res = invoke("speed", "--kernel", "fake_kernels:faithful", "--n", "16", "--mode", "fwd", "--budget", "0.01",
                 "--out", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    kernels = {r["kernel"] for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert "plugin/faithful" in kernels and "lightning/jax-chunked" in kernels


def test_the_gpu_main_job_is_the_triton_kernel_beside_flashattention():
    from lattnbench.runner.select import pick_kernels
    from lattnbench.registry import default_registry

    names = {e.name for e in pick_kernels(default_registry(), None, "cuda", ("lightning", "softmax"))}
    assert {"lightning/triton", "softmax/sdpa-flash"} <= names <= {"lightning/triton", "lightning/jax-triton",
                                                                    "softmax/sdpa-flash"}
    cpu = {e.name for e in pick_kernels(default_registry(), None, "cpu", ("lightning", "softmax"))}
    assert cpu == {"lightning/jax-chunked", "lightning/jax-recurrent", "softmax/jax-xla"}
    checked = {e.name for e in pick_kernels(default_registry(), None, "cpu", timing=False)}
    assert "lightning/triton" in checked and "gla/jax-chunked" in checked  # check-grad: every bundled kernel


def test_runs_write_outside_the_checkout_by_default(monkeypatch, tmp_path):
    import os

    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    store = Path(os.environ["XDG_CACHE_HOME"]) / "lattnbench" / "results"
    before = set(store.glob("*/speed-*.json"))
    res = invoke("speed", "-k", "lightning/naive-torch", "--n", "16", "--mode", "fwd", "--budget", "0.01")
    assert res.exit_code == 0, res.output
    assert len(set(store.glob("*/speed-*.json")) - before) == 1 and not list(tmp_path.iterdir())


def test_suite_names_resolve_from_any_directory(monkeypatch, tmp_path):
    from lattnbench.suite import load_suite

    monkeypatch.chdir(tmp_path)
    assert load_suite("ci").name == "ci" and load_suite("seed-readme").name == "seed-readme"


def test_resume_without_out_and_nothing_to_resume_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTNBENCH_RESULTS_DIR", str(tmp_path))
    res = invoke("speed", "--resume")
    assert res.exit_code == 2 and "no interrupted `speed` run" in res.output


def test_progress_without_a_terminal_is_a_line_per_point_and_the_summary_counts_points(tmp_path):
    res = invoke("speed", "-k", "lightning/naive-torch,softmax/naive-torch", "--n", "16", "--mode", "fwd,fwdbwd",
                 "--budget", "0.01", "--repeat", "2", "--out", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    steps = [line for line in res.output.splitlines() if line.startswith("[")]
    assert [s.split("]")[0] for s in steps] == [f"[{i}/4" for i in range(1, 5)]  # 2 kernels x 2 runs
    assert "— 4 points, 4 rows" in res.output.replace("\n", " ")  # a row per mode, runs merged


def test_check_grad_of_stateless_kernels_with_an_initial_state_only_is_a_usage_error(tmp_path):
    """Softmax kernels keep no state: with --initial-state on alone nothing is left to check, and the
    run says so in one line (exit 2) instead of writing an empty results file."""
    out = tmp_path / "c.json"
    res = invoke("check-grad", "-k", "softmax/naive-torch", "--initial-state", "on", "--n", "64", "--device", "cpu",
                 "--out", out)
    assert res.exit_code == 2 and not out.exists(), res.output
    assert res.output.strip().splitlines()[-1] == (
        "error: nothing to run: softmax/naive-torch keeps no state, so an initial state leaves nothing to "
        "check; use --initial-state off or both")


def test_settle_on_a_cpu_says_it_waits_for_nothing(tmp_path):
    """--settle (and a suite's settle) reads a GPU's temperature through NVML; a CPU run says it does nothing there."""
    res = invoke("speed", "--settle", "30", "-k", "lightning/naive-torch", "--n", "32", "--heads", "2", "--dim", "16",
                 "--mode", "fwd", "--budget", "0.02", "--device", "cpu", "--out", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert "note: --settle waits for a GPU's temperature (NVML); on the cpu it waits for nothing" in res.output
    suite = tmp_path / "s.toml"
    suite.write_text('kernels = ["lightning/naive-torch"]\ndevice = "cpu"\n[axes]\nn = 32\nheads = 2\ndim = 16\n'
                     'dtype = "fp32"\n[speed]\nmodes = ["fwd"]\nbudget = 0.02\nsettle = 40\n')
    res = invoke("run", str(suite), "--out", str(tmp_path / "run"))
    assert res.exit_code == 0, res.output
    assert "note: settle waits for a GPU's temperature (NVML); on the cpu it waits for nothing" in res.output


def test_a_suite_with_no_point_to_run_is_a_usage_error_that_says_why(tmp_path):
    """A suite whose world size leaves none of its kernels a point writes no empty results file: one
    line (exit 2) names the suite, its world_size axis and the kernels that could run there."""
    suite = tmp_path / "s.toml"
    suite.write_text('kernels = ["lightning/naive-torch"]\ndevice = "cpu"\n[axes]\nn = 32\nheads = 2\ndim = 16\n'
                     'dtype = "fp32"\nworld_size = 2\n[speed]\nmodes = ["fwd"]\nbudget = 0.02\n')
    res = invoke("run", str(suite), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2 and not (tmp_path / "run").exists(), res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: suite 's': nothing to run: world_size = 2 splits the sequence over ranks, "
                           "and lightning/naive-torch is not sequence parallel (those that are: "), line
