"""The gated delta rule family (``lattnbench/operators/gdn``) on the CPU: its inputs, its answers,
check-grad of the JAX kernels against the fp64 reference (every tensor, dg and dbeta included),
speed, memory, report and gate, and the fla peers through fakes that keep fla's interface."""
from __future__ import annotations

import dataclasses
import importlib.machinery
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lattnbench import registry
from lattnbench.cli import app
from lattnbench.harness.points import Sweeper
from lattnbench.harness.verify import check
from lattnbench.measure.tolerance import tolerance as dtype_tolerance
from lattnbench.operators import family
from lattnbench.operators.inputs import numpy_inputs
from lattnbench.registry import default_registry, entry
from lattnbench.spec import Case

HERE = Path(__file__).resolve().parent
GDN = family("gdn")
ALL = ["o", "final_state", "dq", "dk", "dv", "dh0", "dg", "dbeta"]
CASE = Case(2, 37, 4, 2, 16, 24, "fp32", "random", initial_state=True)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def _clear():
    for clear in (entry._importable.cache_clear, entry._load.cache_clear, registry.default_registry.cache_clear):
        clear()


@pytest.fixture
def fresh(monkeypatch):
    """Registry caches cleared before and after; the test-local plugin module importable."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    _clear()
    yield monkeypatch
    _clear()


# ---- the family's answers ----------------------------------------------------------------------

def test_inputs_gates_and_unit_keys():
    shapes = GDN.shapes(CASE)
    assert shapes["g"] == shapes["beta"] == (2, 37, 4) and shapes["k"] == (2, 37, 2, 16)
    assert GDN.stored_dtype("g", CASE.with_(g_dtype="bf16")) == "bf16"
    assert GDN.stored_dtype("beta", CASE.with_(dtype="bf16")) == "bf16"
    x = numpy_inputs(CASE.with_(gate_norm=0.1, input_scale=8.0), "gdn", seed=3)
    np.testing.assert_allclose(np.linalg.norm(x["k"], axis=-1), 1.0, rtol=1e-5)  # k: unit rows, unscaled
    assert 0 < x["beta"].min() and x["beta"].max() < 1
    assert x["g"].max() <= 0 and x["g"].min() < -1  # gate norm 0.1: strong gates
    assert np.abs(x["q"]).max() > 8  # q and v keep the input scale


def test_tensors_tolerances_and_costs():
    assert GDN.expected_tensors(CASE) == ALL
    assert GDN.expected_tensors(CASE.with_(initial_state=False)) == [t for t in ALL if t != "dh0"]
    half_g = CASE.with_(g_dtype="bf16")
    for t in ("dg", "dbeta"):
        assert GDN.tolerance(half_g, t) == dtype_tolerance("bf16") > GDN.tolerance(half_g, "dq")
    big = Case(4, 2048, 32, 32, 128, 128, "bf16", "random")
    c, d = 64, 128
    per_token = 2 * c * (3 * d + 2 * d) + 2 * c * c / 3 + 6 * d * d
    assert GDN.flops(big, "fwd") == pytest.approx(4 * 32 * 2048 * per_token)
    assert GDN.flops(big, "fwdbwd") == pytest.approx(3 * GDN.flops(big, "fwd"))
    n = 4 * 2048
    ins = n * 32 * 128 * 2 * 3 + n * 32 * (4 + 2)  # q, k, v bf16; g fp32, beta bf16
    assert GDN.bytes_moved(big, "fwd") == ins + n * 32 * 128 * 2
    est = GDN.estimate(big, "fwdbwd")
    assert est.total > GDN.estimate(big, "fwd").total > 0 and est.grads > 0


def test_registry_entries_and_reverse_refused():
    reg = default_registry()
    for name in ("gdn/naive-torch", "gdn/jax-chunked", "gdn/jax-recurrent"):
        assert reg[name].family == "gdn" and reg[name].available("cpu") is None
        assert "no reverse" in reg[name].supports(CASE.with_(reverse=True), "cpu")
    assert reg["gdn/naive-torch"].reference
    for name in ("gdn/fla-chunk", "gdn/fla-fused-recurrent"):
        assert reg[name].origin == "peer" and reg[name].requires == ("fla",)


# ---- the JAX kernels against the fp64 reference ----------------------------------------------

def test_check_grad_jax_kernels_every_tensor(fresh, tmp_path):
    """h0 (and none), GQA, odd T, dim_v != dim_qk, gate norms 16 and 0.1; then packed varlen."""
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--device", "cpu", "-k", "gdn/jax-chunked,gdn/jax-recurrent", "--n", "37",
                 "--heads", "4", "--kv-heads", "2", "--dim", "16", "--dim-v", "24", "--initial-state", "both",
                 "--gate-norm", "16,0.1", "--out", out)
    rows = rows_of(out)
    assert res.exit_code == 0, [(r["kernel"], r["tensor"], r["status"], r.get("reason")) for r in rows]
    assert {r["tensor"] for r in rows} == set(ALL) and {r["gate_norm"] for r in rows} == {16.0, 0.1}
    assert all(r["status"] == "ok" and r["median"] <= r["tol"] for r in rows)
    same = invoke("gate", out, "--baseline", out, "--reference", "none")
    assert same.exit_code == 0, same.output
    table = invoke("report", out, "--format", "md", "--metric", "check")
    assert table.exit_code == 0 and "dbeta" in table.output

    packed = tmp_path / "varlen.json"
    res = invoke("check-grad", "--device", "cpu", "-k", "gdn/jax-chunked,gdn/jax-recurrent", "--n", "70",
                 "--heads", "2", "--dim", "16", "--varlen", "29,41", "--initial-state", "on",
                 "--dtype", "bf16", "--g-dtype", "fp32", "--out", packed)
    rows = rows_of(packed)
    assert res.exit_code == 0, [(r["kernel"], r["tensor"], r["status"], r.get("reason")) for r in rows]
    assert {r["tensor"] for r in rows} == set(ALL) and all(r["status"] == "ok" for r in rows)


def test_check_grad_catches_a_kernel_without_the_erase_term(fresh, tmp_path):
    out = tmp_path / "bad.json"
    res = invoke("check-grad", "--kernel", "gdn_kernels:gdn_torch", "--kernel", "gdn_kernels:gdn_no_erase",
                 "-k", "plugin/gdn-torch,plugin/gdn-no-erase", "--device", "cpu", "--n", "24", "--heads", "2",
                 "--dim", "8", "--initial-state", "on", "--out", out)
    rows = rows_of(out)
    assert res.exit_code == 1
    assert all(r["status"] == "ok" for r in rows if r["kernel"] == "plugin/gdn-torch")
    wrong = {r["tensor"]: r["status"] for r in rows if r["kernel"] == "plugin/gdn-no-erase"}
    assert set(wrong) == set(ALL) and wrong["o"] == wrong["dbeta"] == "fail"


def test_speed_memory_report_and_gate(fresh, tmp_path):
    speed = tmp_path / "s.json"
    small = ("--device", "cpu", "--n", "64", "--heads", "2", "--dim", "16")
    res = invoke("speed", "-k", "gdn/jax-chunked,gdn/jax-recurrent", *small, "--mode", "fwd,fwdbwd",
                 "--budget", "0.01", "--out", speed)
    assert res.exit_code == 0, res.output
    rows = rows_of(speed)
    assert len(rows) == 4 and all(r["status"] == "ok" and r["median"] > 0 for r in rows)
    assert all(r["family"] == "gdn" and r["gate_norm"] and r["g_dtype"] for r in rows)
    mem = tmp_path / "m.json"
    res = invoke("memory", "-k", "gdn/jax-chunked", *small, "--out", mem)
    assert res.exit_code == 0, res.output
    assert all(r["status"] == "ok" and r["metric"] == "peak_mb" and r["median"] > 0 for r in rows_of(mem))
    report = invoke("report", speed, mem, "--format", "md")
    assert report.exit_code == 0 and "gdn/jax-chunked" in report.output and "gdn/jax-recurrent" in report.output
    gate = invoke("gate", speed, "--baseline", speed, "--reference", "gdn/jax-recurrent")
    assert gate.exit_code == 0, gate.output


def test_list_shows_the_family_with_fla_unavailable(fresh):
    fresh.setitem(sys.modules, "fla", None)  # as if not installed, whatever this machine has
    listed = {i["name"]: i for i in json.loads(invoke("list", "--json", "--device", "cpu").output)}
    assert listed["gdn/jax-chunked"]["available"] and listed["gdn/jax-recurrent"]["available"]
    for name in ("gdn/fla-chunk", "gdn/fla-fused-recurrent"):
        assert not listed[name]["available"] and "'fla' is not installed" in listed[name]["reason"]


# ---- fla peers through fakes with fla's interface ----------------------------------------------

#: the fakes' source, run in a namespace named as fla's module: what fla raises itself is told
#: apart by the module its innermost frame belongs to
FAKE_FLA = '''
import torch

from lattnbench.kernels.gdn.naive import gdn_naive


def _run(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens):
    assert q.shape == k.shape and g.shape == beta.shape == q.shape[:3] and not use_qk_l2norm_in_kernel
    cu = None if cu_seqlens is None else cu_seqlens.tolist()
    if cu is not None:
        assert cu_seqlens.dtype == torch.long
    o, ht = gdn_naive(q.float(), k.float(), v.float(), g.float(), beta.float(), scale, initial_state,
                      cu_seqlens=cu)
    return o.to(q.dtype), (ht if output_final_state else None)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, head_first=False):
    assert q.dtype != torch.float32, "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16."
    return _run(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, cu_seqlens)


class _NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o, ht):
        return o.clone(), ht.clone()

    @staticmethod
    def backward(ctx, do, dht):
        raise NotImplementedError("Backward pass is not implemented yet and we do not have plans to implement it")


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None,
                                     initial_state=None, output_final_state=False,
                                     use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    o, ht = _run(q, k, v, g, beta, scale, initial_state, True, use_qk_l2norm_in_kernel, cu_seqlens)
    return _NoBackward.apply(o, ht)
'''


def fake_fla(monkeypatch) -> None:
    """``fla.ops.gated_delta_rule`` (and its parents) in sys.modules, with specs (find_spec sees them)."""
    parent = None
    parts = "fla.ops.gated_delta_rule".split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        mod.__path__ = []
        monkeypatch.setitem(sys.modules, name, mod)
        if parent is not None:
            monkeypatch.setattr(parent, parts[i - 1], mod, raising=False)
        parent = mod
    exec(compile(FAKE_FLA, "<fake fla.ops.gated_delta_rule>", "exec"), parent.__dict__)


def on_cpu(name: str):
    """A GPU-only peer's entry, allowed on the CPU so that its fake can be checked here."""
    return dataclasses.replace(default_registry()[name], devices=("cpu", "cuda"))


def test_fla_chunk_passes_with_a_faithful_fake_and_fp32_is_flas_refusal(fresh):
    fake_fla(fresh)
    case = Case(1, 45, 2, 2, 16, 24, "bf16", "random", initial_state=True)
    for c in (case, case.with_(batch=1, seqlen=45, varlen=(20, 25))):
        rows = check(on_cpu("gdn/fla-chunk"), c, "cpu")
        assert {r["tensor"]: r["status"] for r in rows} == dict.fromkeys(ALL, "ok"), rows
    rows = check(on_cpu("gdn/fla-chunk"), case.with_(dtype="fp32"), "cpu")
    assert {r["status"] for r in rows} == {"unsupported"}
    assert all("fla: AssertionError: ChunkGatedDeltaRuleFunction does not support float32" in r["reason"]
               for r in rows)
    gqa = check(on_cpu("gdn/fla-chunk"), case.with_(heads=4, kv_heads=2), "cpu")
    assert all(r["status"] == "unsupported" and "no gqa" in r["reason"] for r in gqa)


def test_fla_fused_recurrent_times_fwd_and_records_its_missing_backward(fresh):
    fake_fla(fresh)
    case = Case(1, 40, 2, 2, 16, 16, "fp32", "random", initial_state=True)
    rows = {r["tensor"]: r for r in check(on_cpu("gdn/fla-fused-recurrent"), case, "cpu")}
    assert rows["o"]["status"] == rows["final_state"]["status"] == "ok"
    for t in ALL[2:]:
        assert rows[t]["status"] == "unsupported" and "NotImplementedError: Backward pass" in rows[t]["reason"]
    timed: list[dict] = []
    Sweeper("cpu", timed.extend, {}, budget_s=0.01).speed(on_cpu("gdn/fla-fused-recurrent"), case,
                                                        ["fwd", "fwdbwd", "bwd"])
    status = {r["mode"]: r for r in timed}
    assert status["fwd"]["status"] == "ok" and status["fwd"]["median"] > 0
    for mode in ("fwdbwd", "bwd"):
        assert status[mode]["status"] == "unsupported" and "fla: NotImplementedError" in status[mode]["reason"]


def test_only_what_fla_raises_itself_becomes_unsupported():
    from lattnbench.errors import Unsupported
    from lattnbench.registry.peers import _fla_reason

    def raised_in(module: str, exc: BaseException) -> BaseException:
        ns = {"__name__": module}
        exec("def boom(exc):\n    raise exc\n", ns)
        try:
            ns["boom"](exc)
        except BaseException as caught:  # noqa: BLE001
            return caught

    mine = _fla_reason(raised_in("fla.ops.common.chunk_o", RuntimeError("upgrade Triton to 3.7.1\nmore")))
    assert isinstance(mine, Unsupported) and str(mine) == "fla: RuntimeError: upgrade Triton to 3.7.1"
    below = raised_in("triton.compiler", RuntimeError("PassManager::run failed"))
    assert _fla_reason(below) is below
    oom = raised_in("fla.ops.utils", RuntimeError("CUDA out of memory"))
    assert _fla_reason(oom) is oom
