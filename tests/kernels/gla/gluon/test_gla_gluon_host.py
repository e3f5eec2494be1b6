"""gla/triton's Gluon prep launch on the CPU: the rule that picks it, that a CPU call keeps the
Triton launch, and its sm_90 compile (its kernel runs on the GPU: tests/gpu/test_gla_gluon_prep.py)."""
from __future__ import annotations

import types

import pytest
import torch

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import gla_triton
from lattnbench.kernels.common import gluon_compat as compat
from triton_testutil import gluon_aot_metrics


def test_the_rule_names_why_a_call_keeps_the_triton_launches(monkeypatch):
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(host, "PREP_ON", False)
    assert "GLA_GLUON_PREP=0" in host.prep_reason(q, 64)
    monkeypatch.setattr(host, "PREP_ON", True)
    assert "float32" in host.prep_reason(q.float(), 64)
    assert "D=96" in host.prep_reason(torch.zeros(1, 8, 2, 96, dtype=torch.bfloat16), 64)
    assert "chunk 32" in host.prep_reason(q, 32)
    if compat.IMPORT_ERROR is None:
        assert "not cpu" in host.prep_reason(q, 64)


@pytest.mark.parametrize("switch,launch", [("PREP_ON", "launch_prep"), ("INTRA_ON", "launch_intra")])
def test_a_cpu_call_with_a_switch_on_runs_the_triton_launches(monkeypatch, switch, launch):
    """The prep launch's switch and the in-chunk launch's: a CPU call and its backward keep Triton."""
    monkeypatch.setattr(host, switch, True)
    monkeypatch.setattr(host, launch, lambda *a: pytest.fail(f"{launch} on a CPU"))
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    q, k, v = (torch.randn(1, 40, 2, 16, generator=gen).requires_grad_() for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 40, 2, 16, generator=gen)).requires_grad_()
    o, s = gla_triton(q, k, v, g)
    grads = torch.autograd.grad((o, s), (q, k, v, g), (torch.randn_like(o), torch.randn_like(s)))
    assert all(torch.isfinite(x).all() for x in (o, s, *grads))


_HOST = "lattnbench.kernels.gla.gluon.host."
_PAIRS16 = {_HOST + "INTRA_PAIRS": 16, _HOST + "INTRA_ROW_LANES": 4}
# every sm_90 compile of this file's tests: name -> (host knobs for it alone, gluon_aot call)
_SM90 = {
    "prep": ({}, "compile_gla_prep(d=128, dtype='bf16', reverse=True)"),
    "ring": ({}, "compile_gla_prep(d=128, dtype='bf16', op16=True, prefetch=True)"),
    "sliced": ({}, "compile_gla_prep(d=128, dtype='bf16', op16=True, ks=32, row_lanes=4)"),
    "specialized": ({}, "compile_gla_prep(d=128, dtype='bf16', specialized=True, product_regs=96, prefetch=True)"),
    "intra64": ({}, "compile_gla_intra(d=64, e=64, dtype='fp16', varlen=True)"),
    "pairs_tf32": ({**_PAIRS16, _HOST + "INTRA_OP16": False},
                   "compile_gla_intra(d=128, e=128, dtype='bf16', reverse=True, gqa=True)"),
    "plain": ({**_PAIRS16, _HOST + "INTRA_OP16": True, _HOST + "INTRA_KDS": 64},
              "compile_gla_intra(d=128, e=128, dtype='bf16', exit_terms=False)"),
    "fused": ({**_PAIRS16, _HOST + "INTRA_OP16": True, _HOST + "INTRA_KDS": 64},
              "compile_gla_intra(d=128, e=128, dtype='bf16', exit_terms=True)"),
    "fused_tf32": ({_HOST + "INTRA_OP16": False, _HOST + "INTRA_PAIRS": 0, _HOST + "INTRA_KDS": 64},
                   "compile_gla_intra(d=128, e=128, dtype='bf16', reverse=True, gqa=True, g_dtype='bf16', "
                   "exit_terms=True)"),
}


@pytest.fixture(scope="module")
def sm90() -> dict[str, dict]:
    """The metrics of every ``_SM90`` compile, from one fresh process (``gluon_aot_metrics``; the tests
    that take them share an xdist group, so one worker makes them once)."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    return dict(zip(_SM90, gluon_aot_metrics(*_SM90.values())))


@pytest.mark.xdist_group("gla-gluon-sm90")
def test_the_prep_launch_compiles_for_sm90_with_its_level_products_unrolled(sm90):
    """The prep launch: six levels, each one tf32 wgmma chain over all 128 key channels (16 k-steps
    of 8), unrolled;
    a bounded number of barriers a chunk: two per level (its operands staged in shared memory) and
    those of the loads' and stores' layout changes (33 on Triton 3.6, 46 on 3.9), where the Triton
    launch passes a barrier for every gather of every level and key slice; shared memory within
    the H200's 227 KB."""
    prep, ring, sliced = sm90["prep"], sm90["ring"], sm90["sliced"]
    assert prep["wgmma"] == 6 * 128 // 8
    assert 12 <= prep["barriers"] <= 48
    assert 0 < prep["shared_bytes"] <= 227 * 1024
    # fp16 operands (the default, here beside the prefetch ring): k-steps of 16, and the channel-major
    # operands written as vectors: a third of the shared stores or less
    assert ring["wgmma"] == 6 * 128 // 16
    assert ring["shared_stores"] * 3 <= prep["shared_stores"], (ring["shared_stores"], prep["shared_stores"])
    # the prefetch ring (GLA_GLUON_PREP_PREFETCH): g, q and k by per-thread asynchronous copies
    # (none without it), two slots of each beside the level operands
    assert prep["async_copies"] == 0 < ring["async_copies"]
    assert 2 * 64 * 128 * (4 + 2 + 2) <= ring["shared_bytes"] <= 227 * 1024
    # key slices of 32 at 4 lanes a channel (GLA_GLUON_PREP_KS): 4 warps, one slice's six levels in
    # a loop over the slices, and shared memory for two programs an SM
    assert sliced["wgmma"] == 6 * 32 // 16
    assert sliced["registers"] * 128 * 2 <= 65536 and 0 < 2 * sliced["shared_bytes"] <= 227 * 1024


@pytest.mark.xdist_group("gla-gluon-sm90")
def test_the_warp_specialized_prep_launch_compiles_for_sm90_as_two_partitions_joined_by_mbarriers(sm90):
    """GLA_GLUON_PREP_WS with its prefetch ring (bf16): the products warpgroup at its 96 registers and
    the levels partition at what the rest of the register file leaves it (above the whole-D kernel's
    128-register half, so its tiles fit); one level's product in a loop (8 k-steps of 16 over
    D = 128), waited on by mbarrier in both partitions; g, q and k by per-thread asynchronous copies
    into two slots, qd in its chunk's gate slot, beside the two-slot operand ring, within the H200's
    227 KB; few spills (loop-invariant addresses: 216 B on Triton 3.6, more on 3.9). One compile for
    both forms: the ring's staging is the only difference, and the whole-D kernel compiles that."""
    ws = sm90["specialized"]
    assert 96 in ws["setmaxnreg"] and max(r for r in ws["setmaxnreg"] if r < 240) >= 200, ws["setmaxnreg"]
    assert ws["wgmma"] == 128 // 16
    assert ws["mbarrier_waits"] >= 4 and ws["async_copies"] > 0
    assert 2 * 2 * 128 * 64 * 2 + 2 * 64 * 128 * (4 + 2 + 2) + 64 * 128 * 2 <= ws["shared_bytes"] <= 227 * 1024
    assert ws["spilled_bytes"] <= 1024, ws["spilled_bytes"]


_JAX_GLUON_PROBE = r'''
import json, re, types
import triton.backends.nvidia.compiler as cb
from lattnbench.kernels.common import jax_gluon
from lattnbench.kernels.gla.gluon import prep, host
from lattnbench.kernels.gla.triton import kernels as triton_kernels

plain = triton_kernels.gla_prep_kernel  # a @triton.jit kernel: jax-triton's own compile takes it

made, routed = [], []
def original(*a, **kw):
    routed.append(a[2].__name__)
    return "jax-triton's own", {}
lib = types.SimpleNamespace(get_or_create_triton_kernel=original, _COMPILED_KERNEL_CACHE={},
                            triton_kernel_call_lib=types.SimpleNamespace(
                                TritonKernel=lambda *a: made.append(a) or ("kernel", a[0])))
jax_gluon.install(lib)
jax_gluon.install(lib)  # once: a second install keeps the first wrapper
backend = lambda device, cc: cb.CUDABackend(cb.GPUTarget("cuda", cc, 32))
kw = dict(num_warps=host.warps(128), num_stages=3, num_ctas=1, compute_capability=90, enable_fp_fusion=True, dump=False)
own = lib.get_or_create_triton_kernel(backend, "cuda", plain, ["*fp32", "i32"], [(1, "i32", 5)], metaparams={}, **kw)
# jax-triton's argument list of the prep launch: q, k, g, g, T, H, HKV, then the four outputs
dtypes = ["*bf16", "*bf16", "*fp32", "*fp32", "i32", "i32", "i32", "*bf16", "*bf16", "*fp32", "*bf16"]
scalars = [(4, "i32", 1000), (5, "i32", 4), (6, "i32", 4)]
# the launch's keywords as the bridge passes them: its warps beside the constexprs
meta = dict(KD=128, REVERSE=False, IS_VARLEN=False, **host.prep_meta(128, 64))
launch_kw = dict(kw, num_warps=meta.pop("num_warps"))
for _ in range(2):
    kernel, attrs = lib.get_or_create_triton_kernel(backend, "cuda", prep.gla_prep_gluon_kernel, dtypes, scalars,
                                                    metaparams=meta, **launch_kw)
# the warp-specialized prep kernel: its launch takes the workers' warps too
host.PREP_WS = True
ws_meta = dict(KD=128, REVERSE=False, IS_VARLEN=False, **host.prep_meta(128, 64))
lib.get_or_create_triton_kernel(backend, "cuda", host.prep_kernel(128), dtypes, scalars, metaparams=ws_meta,
                                **dict(kw, num_warps=ws_meta.pop("num_warps")))
name, warps, ctas, shared, ptx, ttgir, cc = made[0]
entry = re.search(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx, re.S)
print("RESULT", json.dumps(dict(own=own[0], routed=routed, made=len(made), kernel=list(kernel), name=name,
      warps=warps, shared=shared, cc=cc, entry=entry.group(1), params=entry.group(2).count(".param"),
      wgmma=ptx.count("wgmma.mma_async"), ttgir="ttg." in ttgir, attrs=len(attrs), ws_name=made[1][0],
      ws_warps=made[1][1])))
'''


def test_jax_triton_takes_gluon_kernels_through_the_gluon_stages():
    """``common.jax_gluon.install``: a plain Triton kernel still goes to jax-triton's own compile;
    the Gluon prep kernel, with jax-triton's argument list, compiles once (a second lowering hits the
    cache) for sm_90 through the Gluon stages into a kernel of the launch's warps, its fp16 level
    products (48 wgmma at D = 128) and one PTX parameter per argument plus the two scratch pointers
    jax-triton's own kernels take; the warp-specialized one into a kernel of all its partitions'
    warps. In a fresh process (see ``gluon_aot_metrics``)."""
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _JAX_GLUON_PROBE], capture_output=True, text=True, env=env,
                         timeout=300)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert run.returncode == 0 and line, run.stderr[-2000:]
    got = json.loads(line.removeprefix("RESULT "))
    assert got["own"] == "jax-triton's own" and got["routed"] == ["gla_prep_kernel"]
    assert got["made"] == 2 and got["kernel"] == ["kernel", "gla_prep_gluon_kernel"]
    # a warp-specialized kernel launches its levels partition's warps and the products warpgroup
    assert got["ws_name"] == "gla_prep_specialized_gluon_kernel" and got["ws_warps"] == host.warps(128) + 4
    assert got["name"] == got["entry"] == "gla_prep_gluon_kernel" and got["cc"] == 90
    assert got["warps"] == host.warps(128) and 0 < got["shared"] <= 227 * 1024
    assert got["wgmma"] == 6 * 128 // 16 and got["params"] == 11 + 2
    assert got["ttgir"] and got["attrs"] == 11


def test_the_jax_rule_names_why_the_bridge_keeps_the_triton_prep(monkeypatch):
    gpu90 = types.SimpleNamespace(platform="gpu", compute_capability="9.0")
    monkeypatch.setattr(host, "JAX_PREP_ON", False)
    assert "GLA_JAX_GLUON_PREP=0" in host.jax_prep_reason("bfloat16", 128, 64, gpu90)
    monkeypatch.setattr(host, "JAX_PREP_ON", True)
    assert "float32" in host.jax_prep_reason("float32", 128, 64, gpu90)
    assert "D=96" in host.jax_prep_reason("bfloat16", 96, 64, gpu90)
    assert "chunk 32" in host.jax_prep_reason("float16", 64, 32, gpu90)
    if compat.IMPORT_ERROR is None:
        assert "sm_90" in host.jax_prep_reason("bfloat16", 128, 64, types.SimpleNamespace(platform="cpu"))
        ampere = types.SimpleNamespace(platform="gpu", compute_capability="8.0")
        assert "sm_90" in host.jax_prep_reason("bfloat16", 128, 64, ampere)
        assert host.jax_prep_reason("bfloat16", 128, 64, gpu90) is None


def test_the_intra_rule_names_why_a_backward_keeps_the_triton_in_chunk_launch(monkeypatch):
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    v = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    monkeypatch.setattr(host, "INTRA_ON", False)
    assert "GLA_GLUON_INTRA" in host.intra_reason(q, v, 64)
    monkeypatch.setattr(host, "INTRA_ON", True)
    assert "E=96" in host.intra_reason(q, torch.zeros(1, 8, 2, 96, dtype=torch.bfloat16), 64)
    assert "float32" in host.intra_reason(q.float(), v.float(), 64)
    assert "chunk 32" in host.intra_reason(q, v, 32)
    if compat.IMPORT_ERROR is None:
        assert "not cpu" in host.intra_reason(q, v, 64)


@pytest.mark.xdist_group("gla-gluon-sm90")
def test_the_intra_launch_compiles_for_sm90_with_two_tf32_products_a_level(sm90):
    """The in-chunk backward: per key slice of 64 channels, six levels of two tf32 wgmma chains
    (k-steps of 8 over the chunk's 64 rows), the state product and W = do·vᵀ (k-steps of 16 over
    E), one copy of the slice loop; a bounded number of barriers; shared memory within the H200's
    227 KB. The plain entry at D = E = 64 (fp16, packed sequences), whose W and state products have
    half the k-steps; at D = E = 128 the fused entry, with its one more chain (v·Yᵀ) a key slice."""
    narrow, wide = sm90["intra64"], sm90["fused_tf32"]
    assert narrow["wgmma"] == 6 * 2 * 64 // 8 + 2 * 64 // 16
    assert wide["wgmma"] == 6 * 2 * 64 // 8 + 3 * 128 // 16
    for m in (wide, narrow):
        assert 12 <= m["barriers"] <= 80
        assert 0 < m["shared_bytes"] <= 227 * 1024


@pytest.mark.xdist_group("gla-gluon-sm90")
def test_the_intra_launch_with_in_block_pairs_compiles_for_sm90_with_two_levels_of_products(sm90):
    """Pairs in blocks of 16 (``host.INTRA_PAIRS``): only the two levels above the blocks of 16 rows
    stay wgmma products, two a level, beside the state product and W (D = E = 128), in both operand
    forms (the fp16 one is the fused test's plain compile); the pairs add no shared memory and no
    barrier a level."""
    tf32, fp16 = sm90["pairs_tf32"], sm90["plain"]
    assert tf32["wgmma"] == 2 * 2 * 64 // 8 + 2 * 128 // 16
    assert fp16["wgmma"] == 2 * 2 * 64 // 16 + 2 * 128 // 16
    for m in (tf32, fp16):
        assert 8 <= m["barriers"] <= 48
        assert 0 < m["shared_bytes"] <= 227 * 1024


def _intra_form(monkeypatch, pairs: int, row_lanes: int = 4) -> None:
    monkeypatch.setattr(host, "INTRA_PAIRS", pairs)
    monkeypatch.setattr(host, "INTRA_ROW_LANES", row_lanes)


def test_the_intra_pairs_knob_takes_a_threads_rows_and_refuses_any_other_block(monkeypatch):
    """GLA_GLUON_INTRA_PAIRS: 0 (every level a product) or the rows a thread holds, CHUNK /
    ROW_LANES; any other block is refused on the host, naming the knob, before a compile."""
    _intra_form(monkeypatch, 0)
    assert host.intra_meta(128, 128, False, False)["PAIRS"] == 0
    _intra_form(monkeypatch, 16)
    meta = host.intra_meta(128, 64, True, True)
    assert meta["PAIRS"] == 16 and meta["ROW_LANES"] == 4 and meta["KD"] == 128 and meta["VD"] == 64
    _intra_form(monkeypatch, 32, row_lanes=2)
    assert host.intra_constexprs()["PAIRS"] == 32
    for pairs, lanes in ((8, 4), (32, 4), (16, 2), (64, 4)):
        _intra_form(monkeypatch, pairs, lanes)
        with pytest.raises(ValueError, match=f"GLA_GLUON_INTRA_PAIRS={pairs}"):
            host.intra_meta(128, 128, False, False)
        with pytest.raises(ValueError, match=f"GLA_GLUON_INTRA_PAIRS={pairs}"):
            host.intra_scratch((2, 3))


def test_the_intra_scratch_holds_each_programs_in_block_pairs_of_w(monkeypatch):
    """A program has two slots, each a chunk's [CHUNK / PAIRS, PAIRS, PAIRS] fp32 in-block pairs of W;
    one element in all when no pairs run in registers."""
    _intra_form(monkeypatch, 0)
    assert host.intra_scratch((7, 12)) == 1
    _intra_form(monkeypatch, 16)
    assert host.intra_scratch((7, 12)) == 2 * 7 * 12 * 4 * 16 * 16
    assert host.intra_scratch((1, 1)) == 2 * 64 * 16


def test_the_intra_launch_keys_and_passes_the_pairs_knob(monkeypatch):
    """The launch key names the form, so a launcher cached with one form is not reused with the
    other, and the kernel gets PAIRS beside the launch's own keywords and grid."""
    calls = []
    monkeypatch.setattr(host, "_LAUNCH_INTRA", lambda key, args, spec, stream: calls.append((key, *spec())))
    for pairs in (0, 16):
        _intra_form(monkeypatch, pairs)
        host.launch_intra(("call",), (), (3, 8), 128, 64, True, False, None)
    (key0, grid0, meta0), (key16, grid16, meta16) = calls
    assert key0 != key16 and key0[-1] == key16[-1] == "call"
    assert (meta0["PAIRS"], meta16["PAIRS"]) == (0, 16)
    assert grid16({}) == (3, 8) and meta16["REVERSE"] is True and meta16["num_warps"] == host.intra_warps()


@pytest.mark.parametrize("pairs", [0, 16])
def test_a_backward_gives_the_gluon_in_chunk_launch_the_scratch_of_its_form(monkeypatch, pairs):
    """``ops.gla_bwd`` with the Gluon in-chunk launch (its rule passed on the CPU, the launch
    recorded instead of run): the scratch is ``intra_scratch`` of the launch's grid, fp32."""
    from lattnbench.kernels.gla.triton import ops

    _intra_form(monkeypatch, pairs)
    monkeypatch.setattr(host, "intra_reason", lambda *a: None)
    seen = []

    def launch(key, args, grid, *rest):  # records the scratch; dq, dk and dg's parts as zeros
        seen.append((args[-1], grid))
        for out in args[11:14]:
            out.zero_()
    monkeypatch.setattr(host, "launch_intra", launch)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 40, 2, 16, generator=gen).requires_grad_() for _ in range(3))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 40, 2, 16, generator=gen)).requires_grad_()
    o, s = gla_triton(q, k, v, g)
    torch.autograd.grad((o, s), (q, k, v, g), (torch.ones_like(o), torch.ones_like(s)))
    (wsc, grid), = seen
    assert grid == ops._cfg.prep_grid(40, 2) and wsc.dtype == torch.float32
    assert wsc.numel() == (2 * grid[0] * grid[1] * 64 * 16 if pairs else 1)


def _jax_backward_launches(monkeypatch, pairs: int, exit_terms: bool) -> list:
    """gla/jax-triton's launches of a forward and backward with the Gluon in-chunk launch (its rule
    passed, jax-triton stood in for by a signature check), in the form ``pairs`` and with the exit
    terms or not (GLA_GLUON_INTRA_EXIT)."""
    jax = pytest.importorskip("jax")
    if compat.IMPORT_ERROR is not None:
        pytest.skip(f"this Triton has no Gluon Hopper API: {compat.IMPORT_ERROR}")
    import jax.numpy as jnp
    import numpy as np

    from lattnbench.kernels.common import jax_gluon
    from lattnbench.kernels.gla.triton import jax_bridge
    from triton_testutil import SignatureCheckingJaxTriton

    class Fake(SignatureCheckingJaxTriton):
        """The stand-in, with jax-triton's defaults for what the Gluon launch leaves out."""
        triton_lib = None

        def triton_call(self, *args, num_stages=None, **kw):
            return super().triton_call(*args, num_stages=num_stages, **kw)

    fake = Fake()
    monkeypatch.setattr(jax_bridge, "jax_triton", lambda: fake)
    monkeypatch.setattr(jax_bridge, "_FN", None)
    monkeypatch.setattr(jax_gluon, "install", lambda lib: None)
    monkeypatch.setattr(host, "jax_intra_reason", lambda *a: None)
    monkeypatch.setattr(host, "INTRA_EXIT", exit_terms)
    _intra_form(monkeypatch, pairs)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 70, 2, 64), dtype=np.float32)) for _ in range(3))
    g = jnp.asarray(-rng.random((1, 70, 2, 64), dtype=np.float32))
    out, vjp = jax.vjp(lambda *xs: jax_bridge.gla_jax_triton(*xs), q, k, v, g)
    vjp(tuple(jnp.ones_like(x) for x in out))
    return fake.launches


def test_the_jax_bridge_gives_the_gluon_in_chunk_launch_the_scratch_of_its_form(monkeypatch):
    """gla/jax-triton with the Gluon in-chunk launch: the launch takes PAIRS and an fp32 scratch
    output of ``intra_scratch`` of its grid, and the exit launch follows it."""
    launches = _jax_backward_launches(monkeypatch, 16, False)
    intra, = [launch for launch in launches if launch["name"] == "gla_bwd_intra_gluon_kernel"]
    assert intra["meta"]["PAIRS"] == 16
    assert intra["outs"][-1] == (host.intra_scratch(intra["grid"]),) == (2 * intra["grid"][0] * 2 * 64 * 16,)
    assert [launch["name"] for launch in launches].count("gla_bwd_exit_kernel") == 1


def test_the_jax_bridge_takes_the_exit_terms_in_the_gluon_in_chunk_launch(monkeypatch):
    """gla/jax-triton with GLA_GLUON_INTRA_EXIT: the fused entry, with dhc and thr among its inputs
    (the signature check counts every argument) and dq, dk, dg and the scratch as its outputs, and no
    exit launch after it."""
    launches = _jax_backward_launches(monkeypatch, 0, True)
    names = [launch["name"] for launch in launches]
    assert "gla_bwd_exit_kernel" not in names and "gla_bwd_intra_gluon_kernel" not in names
    fused, = [launch for launch in launches if launch["name"] == "gla_bwd_intra_exit_gluon_kernel"]
    assert fused["meta"]["PAIRS"] == 0 and len(fused["args"]) == 13
    assert fused["outs"] == [(1, 70, 2, 64)] * 3 + [(host.intra_scratch(fused["grid"]),)]


def test_the_jax_intra_rule_follows_the_torch_switch_and_names_why(monkeypatch):
    gpu90 = types.SimpleNamespace(platform="gpu", compute_capability="9.0")
    monkeypatch.setattr(host, "INTRA_ON", False)
    assert "GLA_GLUON_INTRA" in host.jax_intra_reason("bfloat16", 128, 128, 64, gpu90)
    monkeypatch.setattr(host, "INTRA_ON", True)
    assert "E=96" in host.jax_intra_reason("bfloat16", 128, 96, 64, gpu90)
    assert "float32" in host.jax_intra_reason("float32", 128, 128, 64, gpu90)
    assert "chunk 32" in host.jax_intra_reason("float16", 64, 64, 32, gpu90)
    if compat.IMPORT_ERROR is None:
        assert "sm_90" in host.jax_intra_reason("bfloat16", 128, 128, 64, types.SimpleNamespace(platform="cpu"))
        assert host.jax_intra_reason("bfloat16", 128, 64, 64, gpu90) is None


def test_the_exit_knob_is_read_at_import_and_off_by_default():
    """GLA_GLUON_INTRA_EXIT: the in-chunk launch takes the exit terms only where it is 1. One fresh
    process imports the host module under each value in turn (a reload re-reads the environment)."""
    import os
    import subprocess
    import sys

    code = (
        "import importlib, os\n"
        "from lattnbench.kernels.gla.gluon import host\n"
        "for value in (None, '0', '1', 'yes'):\n"
        "    os.environ.pop('GLA_GLUON_INTRA_EXIT', None)\n"
        "    if value is not None:\n"
        "        os.environ['GLA_GLUON_INTRA_EXIT'] = value\n"
        "    importlib.reload(host)\n"
        "    print('EXIT', value, host.INTRA_EXIT, host.intra_exit())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GLA_GLUON_INTRA_EXIT"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = {ln.split()[1]: ln.split()[2:] for ln in run.stdout.splitlines() if ln.startswith("EXIT ")}
    assert seen == {"None": ["False", "False"], "0": ["False", "False"], "1": ["True", "True"],
                    "yes": ["False", "False"]}


def test_the_intra_launch_keys_the_exit_entry_apart_and_gives_it_the_same_keywords(monkeypatch):
    """``launch_intra(..., exit_terms=True)`` launches the fused entry, under a key of its own, with
    the form's keywords and grid unchanged; without it, the plain entry."""
    calls = []
    monkeypatch.setattr(host, "_LAUNCH_INTRA", lambda key, args, spec, stream: calls.append(("plain", key, *spec())))
    monkeypatch.setattr(host, "_LAUNCH_INTRA_EXIT",
                        lambda key, args, spec, stream: calls.append(("exit", key, *spec())))
    _intra_form(monkeypatch, 16)
    host.launch_intra(("call",), (), (3, 8), 128, 64, False, True, None)
    host.launch_intra(("call",), (), (3, 8), 128, 64, False, True, None, exit_terms=True)
    (plain, key0, grid0, meta0), (fused, key1, grid1, meta1) = calls
    assert (plain, fused) == ("plain", "exit")
    assert key0 != key1 and key0[:-2] == key1[:-2] and key0[-1] == key1[-1] == "call"
    assert (key0[-2], key1[-2]) == (False, True)
    assert meta0 == meta1 and meta1["PAIRS"] == 16 and meta1["IS_VARLEN"] is True
    assert grid0({}) == grid1({}) == (3, 8)


if compat.IMPORT_ERROR is None:
    from lattnbench.kernels.gla.gluon import intra as _intra_kernels

    #: the fused entry's runtime arguments, in its order
    _EXIT_ARGS = tuple(name for name, p in zip(_intra_kernels.gla_bwd_intra_exit_gluon_kernel.arg_names,
                                               _intra_kernels.gla_bwd_intra_exit_gluon_kernel.params)
                       if not p.is_constexpr)
else:  # the arguments ops passes, named as the kernel names them
    _EXIT_ARGS = ("q", "k", "v", "g", "do", "hc", "dhc", "thr", "cu", "T", "H", "HKV", "scale", "dq", "dk", "dg", "wsc")


def _triton_stand_in(ops, real_exit, seen):
    """A CPU stand-in for the Gluon in-chunk launch: the Triton launches on its arguments. The plain
    form is the Triton in-chunk launch on the same arguments; the fused form (``exit_terms``, its
    arguments named by the fused entry's signature) the Triton in-chunk launch into dk and an fp32
    part of dg of its own, then the real exit launch into dk and dg. So a backward through either
    gives the Triton path's gradients, bit for bit, only if ops hands each buffer to the right place."""
    from lattnbench.kernels.common.launch import dot_precision

    def launch(key, args, grid, d, e, reverse, varlen, stream, exit_terms=False):
        seen.append((args, exit_terms))
        flags = dict(KD=d, VD=e, REVERSE=bool(reverse), IS_VARLEN=varlen, DOT_PREC=dot_precision(args[0].dtype))
        if not exit_terms:
            ops._intra_unfused(("stand-in",) + key, args, grid, False, flags, d, e, reverse, varlen, stream)
            return
        a = dict(zip(_EXIT_ARGS, args))
        dgq = torch.full(a["q"].shape, float("nan"), dtype=torch.float32)
        wsc = torch.empty(ops._cfg.intra_scratch(grid, d, ops._chunk()), dtype=torch.float32)
        ops._intra_unfused(("stand-in",) + key, (*(a[n] for n in ("q", "k", "v", "g", "do", "hc", "cu", "T", "H", "HKV",
                                                                  "scale", "dq", "dk")), dgq, wsc),
                           grid, False, flags, d, e, reverse, varlen, stream)
        real_exit(("stand-in",) + key, (*(a[n] for n in ("k", "v", "g", "dhc", "thr", "cu", "dk")), dgq,
                                        *(a[n] for n in ("T", "H", "HKV", "scale", "dk", "dg"))),
                  lambda: (lambda meta: grid, dict(flags, **ops._cfg.exit_meta(d, e, ops._chunk()))), stream)
    return launch


@pytest.mark.parametrize("rule,knob,g_dtype,hkv", [(False, True, torch.float32, 2), (True, False, torch.bfloat16, 1),
                                                   (True, True, torch.float32, 2), (True, True, torch.bfloat16, 1)],
                         ids=["triton-intra-g32", "gluon-plain-g16-gqa", "gluon-fused-g32", "gluon-fused-g16-gqa"])
def test_a_backward_skips_the_exit_launch_exactly_when_the_gluon_launch_takes_its_terms(
        monkeypatch, rule, knob, g_dtype, hkv):
    """``ops.gla_bwd`` with the Gluon in-chunk rule passed or not and GLA_GLUON_INTRA_EXIT on or off
    (the Gluon launch stood in for by the Triton launches, ``_triton_stand_in``; outputs NaN-poisoned):
    the exit launch runs unless the Gluon launch runs with the exit terms, which then gets dhc and
    thr as the state-gradient pass wrote them and dg in g's dtype (its own buffer for a 16-bit g, dk
    per query head in fp32 under GQA). Every gradient equals the Triton path's bit for bit."""
    from lattnbench.kernels.gla.triton import ops

    monkeypatch.setattr(ops, "_empty", lambda *shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype,
                                                                                 device=device))
    real_exit = ops._BWD_EXIT
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 40, 2, 16, generator=gen)
    k, v = (torch.randn(1, 40, hkv, 16, generator=gen) for _ in range(2))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 40, 2, 16, generator=gen)).to(g_dtype)
    cot = (torch.randn(1, 40, 2, 16, generator=gen), torch.randn(1, 2, 16, 16, generator=gen))

    def grads():
        leaves = [x.clone().requires_grad_() for x in (q, k, v, g)]
        return torch.autograd.grad(gla_triton(*leaves), leaves, cot)

    want = grads()  # the Triton path: the CPU keeps it
    exits, seen = [], []
    monkeypatch.setattr(ops, "_BWD_EXIT", lambda *a: exits.append(1) or real_exit(*a))
    monkeypatch.setattr(host, "INTRA_EXIT", knob)
    if rule:
        monkeypatch.setattr(host, "intra_reason", lambda *a: None)
        monkeypatch.setattr(host, "launch_intra", _triton_stand_in(ops, real_exit, seen))
    got = grads()
    fused = rule and knob
    assert len(exits) == (0 if fused else 1)
    assert len(seen) == (1 if rule else 0)
    for mine, theirs in zip(got, want):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
    if fused:
        (args, exit_terms), = seen
        a = dict(zip(_EXIT_ARGS, args))
        assert exit_terms and len(args) == len(_EXIT_ARGS)
        slots = ops._cfg.chunk_slots(1, 40, 1, ops._chunk())
        assert a["dhc"].shape == (slots, 2, 16, 16) and a["thr"].shape == (slots, 2, 16)
        assert a["thr"].dtype == torch.float32 and torch.isfinite(a["dhc"]).all() and torch.isfinite(a["thr"]).all()
        assert a["dg"].dtype == g_dtype and a["dk"].dtype == (torch.float32 if hkv < 2 else q.dtype)
        assert a["dk"].shape == a["dg"].shape == q.shape
        assert a["wsc"].numel() == host.intra_scratch(ops._cfg.prep_grid(40, 2))


@pytest.mark.xdist_group("gla-gluon-sm90")
def test_the_fused_intra_launch_compiles_for_sm90_with_one_more_product_a_key_slice(sm90):
    """The fused entry against the plain one, same form (fp16 operands, pairs in blocks of 16, D = E =
    128): one more wgmma chain a key slice (v·Yᵀ, k-steps of 16 over E) in the one copy of the slice
    loop, and exactly one more [KDS, E] bf16 buffer (dhc's slice) of shared memory. The tf32 form with
    every level a product takes the exit terms too (GQA's fp32 dk, a bf16 g), within the H200's
    227 KB."""
    plain, fused = sm90["plain"], sm90["fused"]
    assert plain["wgmma"] == 2 * 2 * 64 // 16 + 2 * 128 // 16
    assert fused["wgmma"] == plain["wgmma"] + 128 // 16
    assert fused["shared_bytes"] == plain["shared_bytes"] + 64 * 128 * 2
    assert plain["barriers"] <= fused["barriers"] <= plain["barriers"] + 4
    assert 0 < sm90["fused_tf32"]["shared_bytes"] <= 227 * 1024  # its wgmma: the tf32 test's


def test_the_prep_slice_knob_picks_the_sliced_kernel_and_refuses_what_no_warpgroup_runs(monkeypatch):
    """GLA_GLUON_PREP_KS: 0 or a slice of all of D keeps the whole-D kernel; a narrower slice takes
    ``prep_sliced`` at KS·ROW_LANES / 32 warps. A slice of fewer warps than a warpgroup, one that is
    not a multiple of 16, or one beside the prefetch ring (the whole-D kernel's) is refused on the
    host, naming the knob."""
    from lattnbench.kernels.gla.gluon import prep, prep_sliced
    monkeypatch.setattr(host, "PREP_PREFETCH", False)
    monkeypatch.setattr(host, "ROW_LANES", 4)
    for ks in (0, 128):
        monkeypatch.setattr(host, "PREP_KS", ks)
        assert host.prep_kernel(128) is prep.gla_prep_gluon_kernel
        assert "KS" not in host.prep_meta(128, 64) and host.prep_meta(128, 64)["num_warps"] == 16
    monkeypatch.setattr(host, "PREP_KS", 32)
    assert host.prep_kernel(128) is prep_sliced.gla_prep_sliced_gluon_kernel
    meta = host.prep_meta(128, 64)
    assert meta["KS"] == 32 and meta["num_warps"] == 4 and "PREFETCH" not in meta
    for ks, lanes, prefetch in ((32, 2, False), (40, 4, False), (32, 4, True)):
        monkeypatch.setattr(host, "PREP_KS", ks)
        monkeypatch.setattr(host, "ROW_LANES", lanes)
        monkeypatch.setattr(host, "PREP_PREFETCH", prefetch)
        with pytest.raises(ValueError, match="GLA_GLUON_PREP_"):
            host.prep_meta(128, 64)


def test_the_prep_launch_keys_its_form_and_launches_the_sliced_kernel_by_its_own_launcher(monkeypatch):
    """A launcher cached for one form of the prep launch is not reused for another: the key names the
    prefetch ring, the slice and the lanes, and the sliced kernel has a launcher of its own."""
    calls = []
    monkeypatch.setattr(host, "_LAUNCH", lambda key, args, spec, stream: calls.append(("whole", key, spec()[1])))
    monkeypatch.setattr(host, "_LAUNCH_SLICED", lambda key, args, spec, stream: calls.append(("sliced", key, spec()[1])))
    for ks, lanes, prefetch in ((0, 2, False), (0, 2, True), (64, 2, False), (32, 4, False)):
        monkeypatch.setattr(host, "PREP_KS", ks)
        monkeypatch.setattr(host, "ROW_LANES", lanes)
        monkeypatch.setattr(host, "PREP_PREFETCH", prefetch)
        host.launch_prep(("call",), (), (2, 8), 128, False, False, 64, None)
    assert [c[0] for c in calls] == ["whole", "whole", "sliced", "sliced"]
    assert len({c[1] for c in calls}) == 4
    assert calls[1][2]["PREFETCH"] is True and calls[3][2]["KS"] == 32 and calls[3][2]["ROW_LANES"] == 4


def test_the_warp_specialized_prep_knob_picks_its_kernel_grid_and_launcher_and_refuses_other_forms(monkeypatch):
    """GLA_GLUON_PREP_WS=1 takes ``prep_specialized`` at D·ROW_LANES / 32 warps in the levels partition
    and PREP_WS_REGS registers in the products one, at most PREP_WS_PROGRAMS programs a row, with the
    prefetch switch passed on, through a launcher of its own and a key that names it; the prep
    switches it has no form for (tf32 operands, key slices) and a register
    count setmaxnreg cannot take are refused on the host, naming the knobs."""
    from lattnbench.kernels.gla.gluon import prep_specialized
    for name, value in (("PREP_WS", True), ("PREP_OP16", True), ("PREP_PREFETCH", False),
                        ("PREP_KS", 0), ("ROW_LANES", 2), ("PREP_WS_REGS", 96), ("PREP_WS_PROGRAMS", 16)):
        monkeypatch.setattr(host, name, value)
    assert host.prep_kernel(128) is prep_specialized.gla_prep_specialized_gluon_kernel
    assert host.prep_meta(128, 64) == dict(BT=64, ROW_LANES=2, PRODUCT_REGS=96, PREFETCH=False, num_warps=8)
    monkeypatch.setattr(host, "PREP_PREFETCH", True)
    assert host.prep_meta(128, 64)["PREFETCH"] is True
    monkeypatch.setattr(host, "PREP_PREFETCH", False)
    assert host.prep_grid((64, 128)) == (16, 128) and host.prep_grid((3, 8)) == (3, 8)
    calls = []
    for launcher in ("_LAUNCH", "_LAUNCH_SLICED", "_LAUNCH_SPECIALIZED"):
        monkeypatch.setattr(host, launcher, lambda key, args, spec, stream, name=launcher: calls.append(
            (name, key, spec()[0]({}))))
    host.launch_prep(("call",), (), (64, 8), 128, False, False, 64, None)
    monkeypatch.setattr(host, "PREP_WS", False)
    host.launch_prep(("call",), (), (64, 8), 128, False, False, 64, None)
    assert [(c[0], c[2]) for c in calls] == [("_LAUNCH_SPECIALIZED", (16, 8)), ("_LAUNCH", (64, 8))]
    assert calls[0][1] != calls[1][1]
    monkeypatch.setattr(host, "PREP_WS", True)
    for name, value in (("PREP_OP16", False), ("PREP_KS", 32),
                        ("PREP_WS_REGS", 100), ("PREP_WS_PROGRAMS", 0)):
        with monkeypatch.context() as m:
            m.setattr(host, name, value)
            with pytest.raises(ValueError, match="GLA_GLUON_PREP_"):
                host.prep_meta(128, 64)
