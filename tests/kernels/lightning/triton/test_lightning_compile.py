"""torch.compile(fullgraph=True) of a function calling lightning_attn_triton: no graph break, the
kernels as one custom op per direction, and the same outputs and gradients as the eager call.

On the CPU the kernels run in the interpreter inside the ops and the compile backend is
aot_eager (Dynamo, AOTAutograd with the fake implementations and the registered autograd; no
Inductor codegen, which takes ~15 s here). Inductor runs in tests/gpu/test_lightning_graphs.py.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

BACKEND = "aot_eager"


def _graph_ops(seen: set):
    """A compile backend that records the ops of the graph it gets, then runs aot_eager."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def record(gm, _inputs):
        seen.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=record, bw_compiler=record)


@pytest.mark.parametrize("case", ["dense-h0", "varlen-gqa-no-final-state"])
def test_compiled_matches_eager_without_graph_breaks(case):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(31)
    varlen = case.startswith("varlen")
    b, t, h, hkv = (1, 45, 4, 2) if varlen else (2, 30, 2, 2)
    cu = torch.tensor([0, 20, 21, 45]) if varlen else None
    n = 3 if varlen else b
    q = torch.randn(b, t, h, 16, generator=g)
    k = torch.randn(b, t, hkv, 16, generator=g)
    v = torch.randn(b, t, hkv, 24, generator=g)
    s0 = None if varlen else torch.randn(n, h, 16, 24, generator=g)
    gamma = -torch.rand(h, generator=g) * 2
    final = not varlen

    def step(q, k, v, s0, cu):
        o, st = lightning_attn_triton(q, k, v, gamma=gamma, initial_state=s0, cu_seqlens=cu,
                                      output_final_state=final)
        return torch.tanh(o), st

    def run(fn):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)] + (
            [] if s0 is None else [s0.clone().requires_grad_(True)])
        o, st = fn(*leaves[:3], leaves[3] if s0 is not None else None, cu)
        cots = [torch.randn(o.shape, generator=torch.Generator().manual_seed(5))]
        outs = [o]
        if st is not None:
            outs.append(st)
            cots.append(torch.randn(st.shape, generator=torch.Generator().manual_seed(6)))
        grads = torch.autograd.grad(outs, leaves, cots)
        return [x.detach() for x in outs], list(grads), leaves, cots

    seen: set = set()
    compiled = torch.compile(step, fullgraph=True, backend=_graph_ops(seen))
    c_outs, c_grads, _, _ = run(compiled)
    e_outs, e_grads, _, cots = run(step)
    assert "lattnbench.lightning_fwd.default" in seen and "lattnbench.lightning_bwd.default" in seen
    assert len(c_outs) == len(e_outs) == (1 if varlen else 2)
    for mine, eager in zip(c_outs + c_grads, e_outs + e_grads):
        assert torch.isfinite(mine).all() and torch.equal(mine, eager)

    # and the eager call itself against the fp64 reference, so the equality above means something
    ref = [x.double().requires_grad_(True) for x in (q, k, v)] + ([] if s0 is None else [s0.double().requires_grad_(True)])
    ro, rs = lightning_naive(*ref[:3], gamma=gamma.double(), initial_state=ref[3] if s0 is not None else None,
                             cu_seqlens=None if cu is None else cu.tolist())
    ref_outs = [torch.tanh(ro)] + ([] if varlen else [rs])
    ref_grads = torch.autograd.grad(ref_outs, ref, [c.double() for c in cots])
    for mine, r in zip(e_outs + e_grads, ref_outs + list(ref_grads)):
        assert err_ratio(mine, r.detach()) <= TOLERANCE["fp32"]


def test_compiled_bad_input_fails_at_trace_time_with_its_message():
    """The checks run while Dynamo traces: without fullgraph the ValueError itself; with it Dynamo
    wraps the raise ("Observed exception"), and the message is still the check's."""
    q = torch.randn(1, 8, 4, 16)
    k = torch.randn(1, 8, 3, 16)
    for fullgraph, error in ((False, ValueError), (True, Exception)):
        torch._dynamo.reset()
        step = torch.compile(lambda q, k: lightning_attn_triton(q, k, k), fullgraph=fullgraph, backend=BACKEND)
        with pytest.raises(error) as caught:
            step(q, k)
        text = str(caught.value) + str(caught.value.__cause__) + str(caught.value.__context__)
        assert "query heads (4) must be a multiple of kv heads (3)" in text, text


def test_a_whole_step_entry_runs_fwd_and_bwd_as_one_graph_with_the_eager_results():
    """``lightning/triton-step``'s mechanism on the CPU (aot_eager, no CUDA graphs): the
    adapter's fwd+bwd goes through the entry's step, Dynamo traces the forward and autograd.grad
    into one graph holding both custom ops, every output and gradient equals the eager ones, and a
    backward alone is refused with its reason."""
    import dataclasses

    from lattnbench.errors import Unsupported
    from lattnbench.harness.points import make_problem
    from lattnbench.registry import default_registry
    from lattnbench.registry.bundled import compiled_step
    from lattnbench.spec import Case

    torch._dynamo.reset()
    graphs: list[set] = []

    def counting(gm, inputs):
        graphs.append(set())
        return _graph_ops(graphs[-1])(gm, inputs)

    eager_entry = default_registry()["lightning/triton"]
    entry = dataclasses.replace(eager_entry, devices=("cpu", "cuda"),
                                step=lambda run: compiled_step(run, mode=None, backend=counting))
    seed = int(torch.randint(0, 2**31, ()))
    case = Case(batch=2, seqlen=37, heads=4, kv_heads=2, dim_qk=16, dim_v=24, dtype="fp32", initial_state=True)
    stepped, eager = make_problem(entry, case, "cpu", seed), make_problem(eager_entry, case, "cpu", seed)
    got, want = stepped.results(), eager.results()
    again = stepped.results()  # the second call replays the compiled step
    assert len(graphs) == 1 and {"lattnbench.lightning_fwd.default", "lattnbench.lightning_bwd.default"} <= graphs[0]
    assert set(got) == set(want) >= {"o", "final_state", "dq", "dk", "dv", "dh0"}
    for name in want:
        assert torch.isfinite(got[name]).all() and torch.equal(got[name], want[name]), name
        assert torch.equal(again[name], want[name]), name
    with pytest.raises(Unsupported, match="no backward alone"):
        stepped.bwd_callable()
