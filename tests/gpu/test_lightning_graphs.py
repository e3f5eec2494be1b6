"""lightning/triton in a training step on the GPU: a fwd+bwd captured in a CUDA graph and replayed
with new inputs (new cu_seqlens values too), the steady-state call free of device syncs, and
torch.compile (Inductor, and Inductor with CUDA graphs) equal to the eager call.

Equality is exact: the graph and the compiled code run the same compiled kernels at the same
tuned configs as the eager call in the same process.
"""
from __future__ import annotations

import functools

import pytest
import torch

from lattnbench.kernels.lightning.triton import kernels as K
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.kernels.common.launch import forget_tuning
from lattnbench.kernels.lightning.triton.scratch import scratch

pytestmark = pytest.mark.gpu

DEV = "cuda"
B, T, H, HKV, D, E = 2, 384, 4, 2, 64, 64
# past 4096 tokens the tensor-descriptor configs may run (configs.descriptors_pay); they move tiles
# by descriptors only where D fills its block and E is a multiple of BV = 128
LONG, WIDE = 4160, 128


def _draw(seed: int, varlen: bool, dtype=torch.bfloat16, t: int = T, d: int = D, e: int = E) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=DEV).manual_seed(seed)
    b = 1 if varlen else B
    n = 3 if varlen else B

    def rnd(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, device=DEV, dtype=torch.float32).to(dt)

    x = {"q": rnd(b, t, H, d), "k": rnd(b, t, HKV, d), "v": rnd(b, t, HKV, e),
         "h0": rnd(n, H, d, e, dt=torch.float32), "do": rnd(b, t, H, e), "ds": rnd(n, H, d, e, dt=torch.float32)}
    if varlen:  # three sequences, a different split per draw
        cuts = torch.randperm(t - 2, generator=torch.Generator().manual_seed(seed))[:2].sort().values + 1
        x["cu"] = torch.tensor([0, int(cuts[0]), int(cuts[1]), t], dtype=torch.int32, device=DEV)
    return x


@functools.cache
def _gamma() -> torch.Tensor:
    return -torch.linspace(0.05, 2.0, H, device=DEV)


def _step(q, k, v, h0, do, ds, cu=None):
    """One fwd+bwd: (o, S_T, dq, dk, dv, dh0)."""
    o, st = lightning_attn_triton(q, k, v, gamma=_gamma(), initial_state=h0, cu_seqlens=cu)
    grads = torch.autograd.grad((o, st), (q, k, v, h0), (do, ds))
    return (o, st, *grads)


def _leaves(x: dict) -> dict:
    return {n: (t.clone().requires_grad_(True) if n in ("q", "k", "v", "h0") else t.clone()) for n, t in x.items()}


def _replays_equal_eager(varlen: bool, t: int = T, dim: int | None = None) -> None:
    """Capture one fwd+bwd after a warm-up, replay it on two new draws (outputs NaN-poisoned
    first), and compare every tensor with an eager call on the same draw."""
    dims = {} if dim is None else {"d": dim, "e": dim}
    static = _leaves(_draw(0, varlen, t=t, **dims))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: autotuning and the launch caches, outside the capture
        for _ in range(3):
            _step(**static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _step(**static)
    for seed in (1, 2):
        new = _draw(seed, varlen, t=t, **dims)
        with torch.no_grad():
            for name, x in new.items():
                static[name].copy_(x)
            for y in outs:
                y.fill_(float("nan"))
        graph.replay()
        want = _step(**_leaves(new))
        torch.cuda.synchronize()
        for name, got, ref in zip(("o", "S_T", "dq", "dk", "dv", "dh0"), outs, want):
            assert torch.isfinite(got).all(), name
            assert torch.equal(got, ref), name


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_cuda_graph_replays_fwd_bwd_with_new_inputs(varlen):
    _replays_equal_eager(varlen)


@pytest.fixture
def descriptor_configs(monkeypatch):
    """Only the tensor-descriptor configs (TR 3) in both autotune lists: every launch takes
    Triton's global scratch."""
    tuners = [K.lightning_fwd, K.lightning_bwd]
    for tuner in tuners:
        monkeypatch.setattr(tuner, "configs", [c for c in tuner.configs if c.kwargs["TR"] == 3])
        tuner.cache.clear()
    forget_tuning()
    scratch.buffers.clear()
    yield
    for tuner in tuners:
        tuner.cache.clear()
    forget_tuning()


def test_descriptor_launches_keep_their_scratch_and_replay_from_a_graph(descriptor_configs):
    _replays_equal_eager(False, t=LONG, dim=WIDE)
    assert scratch.buffers  # the eager launches went through the kept scratch


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_steady_state_call_has_no_device_sync(varlen):
    x = _leaves(_draw(3, varlen))
    _step(**x)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            lightning_attn_triton(x["q"], x["k"], x["v"], gamma=_gamma(), initial_state=x["h0"], cu_seqlens=x.get("cu"))
        _step(**x)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _fwd(q, k, v, gamma, h0, cu=None):
    return lightning_attn_triton(q, k, v, gamma=gamma, initial_state=h0, cu_seqlens=cu)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_torch_compile_fwd_bwd_equals_eager(mode, varlen):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_fwd, fullgraph=True, mode=mode)
    for seed in (4, 5, 6, 7):
        x = _leaves(_draw(seed, varlen))
        o, st = compiled(x["q"], x["k"], x["v"], _gamma(), x["h0"], x.get("cu"))
        grads = torch.autograd.grad((o, st), (x["q"], x["k"], x["v"], x["h0"]), (x["do"], x["ds"]))
        got = [y.clone() for y in (o, st, *grads)]  # CUDA-graph outputs are overwritten by the next replay
        want = _step(**_leaves(_draw(seed, varlen)))
        for name, a, b in zip(("o", "S_T", "dq", "dk", "dv", "dh0"), got, want):
            assert torch.isfinite(a).all(), name
            assert torch.equal(a, b), name
    assert counters["stats"]["unique_graphs"] == 1
    if mode == "reduce-overhead":
        assert counters["inductor"]["cudagraph_skips"] == 0


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_whole_step_compiles_to_one_cuda_graph_equal_to_eager(varlen):
    """``lightning/triton-step``'s step (fwd, autograd.grad, bwd in one graph, inputs marked
    static): one graph, no CUDA-graph skip, and every output and gradient equal to the eager step's
    on replays with new values written into the same inputs."""
    from torch._dynamo.utils import counters

    from lattnbench.registry.bundled import compiled_step

    torch._dynamo.reset()
    counters.clear()
    names = ("q", "k", "v", "h0")

    def run(q, k, v, h0, do, ds, gamma, cu):  # γ an input: made inside, Inductor's linspace rounds otherwise
        o, st = _fwd(q, k, v, gamma, h0, cu)
        grads = torch.autograd.grad((o, st), (q, k, v, h0), (do, ds))
        return (o.detach(), st.detach()), grads

    step = compiled_step(run)
    x = _leaves(_draw(3, varlen))
    for seed in (4, 5, 6):
        fresh = _draw(seed, varlen)
        with torch.no_grad():
            for n in x:  # the same tensors every step, as the static inputs of a compiled model
                x[n].copy_(fresh[n])
        (o, st), grads = step(*(x[n] for n in names), x["do"], x["ds"], _gamma(), x.get("cu"))
        got = [y.clone() for y in (o, st, *grads)]
        want = _step(**_leaves(fresh))
        for name, a, b in zip(("o", "S_T", "dq", "dk", "dv", "dh0"), got, want):
            assert torch.isfinite(a).all(), name
            assert torch.equal(a, b), name
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["cudagraph_skips"] == 0
