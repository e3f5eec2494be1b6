"""lightning/gluon on the H200: the Gluon forward and its backward against the fp64 quadratic
reference, over odd T, D ≠ E, GQA, reverse, an initial state and strong decay, with the outputs
poisoned (NaN) before the kernels write them; plus the fallback rule on the device.

Each case first asserts that the call takes the Gluon forward (``gluon_path`` is None) and which
backward its gradients come from (``gluon_backward_path``), so a silent fallback to the Triton
kernel cannot pass for the Gluon kernel. Short calls take the Gluon backward (a dq pass, the
dk / dv kernel) only with ``LIGHTNING_GLUON_BACKWARD=1`` (bf16, no grouped heads): run the file
under it too.
"""
from __future__ import annotations

import threading

import pytest
import torch

from lattnbench.kernels.lightning.gluon import gluon_backward_path, gluon_path, lightning_attn_gluon
from lattnbench.kernels.lightning.gluon import configs as gcfg
from lattnbench.kernels.lightning.gluon import ops as gops
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.kernels.lightning.triton import ops as tops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

pytestmark = pytest.mark.gpu

DEV = "cuda"


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every buffer the kernels fully write starts as NaN: a row left unwritten fails."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(gops, "_empty", nan_empty)
    monkeypatch.setattr(tops, "_empty", nan_empty)
    if gops.device_reason(torch.device(DEV)) is not None:
        pytest.skip(gops.device_reason(torch.device(DEV)))


def _draw(seed, b, t, h, hkv, d, e, dtype, h0):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def rnd(*s, dt=dtype):
        return torch.randn(*s, generator=g, device=DEV, dtype=torch.float32).to(dt)
    x = dict(q=rnd(b, t, h, d), k=rnd(b, t, hkv, d), v=rnd(b, t, hkv, e), do=rnd(b, t, h, e),
             ds=rnd(b, h, d, e, dt=torch.float32))
    x["h0"] = rnd(b, h, d, e, dt=torch.float32) if h0 else None
    return x


CASES = [  # b, t, h, hkv, d, e, reverse, h0, strong decay
    (2, 64, 2, 2, 64, 64, False, False, False),
    (2, 1000, 4, 4, 128, 128, False, True, False),     # odd T: a partial last chunk
    (1, 333, 4, 2, 128, 64, False, True, False),       # GQA, D ≠ E
    (2, 517, 4, 1, 64, 128, True, True, False),        # reverse: the partial chunk processed first
    (1, 4096, 8, 8, 128, 128, False, False, True),     # strong decay: λ^64 underflows
    (1, 130, 2, 2, 128, 128, True, False, True),
    (2, 520, 4, 4, 64, 64, True, True, False),
    (1, 64, 2, 2, 128, 128, True, True, True),         # reverse, one full chunk
    (1, 40, 2, 2, 64, 64, True, False, False),         # reverse, one partial chunk
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("b,t,h,hkv,d,e,reverse,h0,strong", CASES,
                         ids=[f"T{c[1]}-{'reverse' if c[6] else 'forward'}" for c in CASES])
def test_gluon_forward_and_its_gradients_match_the_fp64_reference(b, t, h, hkv, d, e, reverse, h0, strong, dtype):
    x = _draw(t + d, b, t, h, hkv, d, e, dtype, h0)
    assert gluon_path(x["q"], x["v"]) is None
    on_gluon = (gcfg.BACKWARD_ON_GLUON and dtype == torch.bfloat16 and h == hkv
                and (gcfg.BACKWARD_MODE == "1" or b * t * h >= gcfg.GLUON_BACKWARD_MIN_ROWS))
    assert (gluon_backward_path(x["q"], x["k"]) is None) == on_gluon
    gamma = (-torch.linspace(2.0, 8.0, h) if strong else -torch.linspace(0.01, 0.5, h)).to(DEV)
    leaves = {n: x[n].clone().requires_grad_(True) for n in ("q", "k", "v", "h0") if x[n] is not None}
    o, st = lightning_attn_gluon(leaves["q"], leaves["k"], leaves["v"], gamma=gamma,
                                 initial_state=leaves.get("h0"), reverse=reverse)
    grads = torch.autograd.grad((o, st), list(leaves.values()), (x["do"], x["ds"]))
    ref_leaves = {n: t_.detach().double().requires_grad_(True) for n, t_ in leaves.items()}
    ro, rst = lightning_naive(ref_leaves["q"], ref_leaves["k"], ref_leaves["v"], gamma.double(),
                              None, ref_leaves.get("h0"), reverse)
    rgrads = torch.autograd.grad((ro, rst), list(ref_leaves.values()), (x["do"].double(), x["ds"].double()))
    tol = TOLERANCE["bf16" if dtype == torch.bfloat16 else "fp16"]
    errs = {"o": err_ratio(o, ro), "final_state": err_ratio(st, rst)}
    errs.update({f"d{n}": err_ratio(gr, rg) for n, gr, rg in zip(leaves, grads, rgrads)})
    assert all(err <= tol for err in errs.values()), errs


DKDV_CASES = [  # b, t, h, d, e, pass direction, dS_T given, R wanted
    (2, 1000, 4, 128, 128, True, True, True),
    (1, 333, 2, 64, 128, False, True, True),
    (2, 517, 2, 128, 64, True, False, True),
    (1, 40, 2, 64, 64, True, True, False),
    (1, 4096, 8, 128, 128, False, True, True),
]


@pytest.mark.parametrize("b,t,h,d,e,reverse,has_dst,want_r", DKDV_CASES,
                         ids=[f"T{c[1]}-D{c[3]}E{c[4]}-{'reverse' if c[5] else 'forward'}" for c in DKDV_CASES])
def test_the_dkdv_pass_matches_the_two_forward_passes(b, t, h, d, e, reverse, has_dst, want_r):
    """The one-kernel dk / dv pass against the same two outputs and R from two passes of the Gluon
    forward (each tested against fp64 above), on poisoned outputs: within the bf16 tolerance (the
    passes round the decayed operand to bf16 before the state product, the one kernel decays the
    product's fp32 rows), and R to fp32 summation order."""
    from lattnbench.kernels.lightning.gluon.backward import dkdv_by_forwards

    x = _draw(t + 3 * d, b, t, h, h, d, e, torch.bfloat16, False)
    gamma = -torch.linspace(0.01, 0.5, h, device=DEV)
    dst = x["ds"] if has_dst else None
    got = gops.gluon_dkdv(x["q"], x["k"], x["v"], x["do"], gamma, d**-0.5, dst, reverse, want_r)
    want = dkdv_by_forwards(gops.gluon_fwd)(x["q"], x["k"], x["v"], x["do"], gamma, d**-0.5, dst, reverse, want_r)
    assert torch.isfinite(got[0]).all() and torch.isfinite(got[1]).all()
    assert err_ratio(got[0], want[0]) <= TOLERANCE["bf16"] and err_ratio(got[1], want[1]) <= TOLERANCE["bf16"]
    if want_r:
        assert err_ratio(got[2], want[2]) <= 1e-5
    else:
        assert got[2] is None


@pytest.mark.parametrize("b,t,h,hkv,d,e,reverse,h0,strong", [c for c in CASES if c[2] == c[3]],
                         ids=[f"T{c[1]}-{'reverse' if c[6] else 'forward'}" for c in CASES if c[2] == c[3]])
def test_the_backward_through_the_dkdv_pass_matches_the_fp64_reference(monkeypatch, b, t, h, hkv, d, e, reverse,
                                                                       h0, strong):
    """The whole fwd+bwd with the Gluon backward's dk and dv from the one-kernel pass, in bf16,
    against fp64: every tensor, with h0, reverse, partial chunks and strong decay."""
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", True)
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "1")
    monkeypatch.setattr(gcfg, "FUSED_DKDV", True)
    calls = []
    real = gops.gluon_dkdv
    monkeypatch.setattr(gops, "gluon_dkdv", lambda *a: calls.append(1) or real(*a))
    test_gluon_forward_and_its_gradients_match_the_fp64_reference(b, t, h, hkv, d, e, reverse, h0, strong,
                                                                  torch.bfloat16)
    assert calls == [1]


def test_a_launch_from_a_thread_with_no_cuda_context_bound_runs(monkeypatch):
    """Autograd's device thread can reach a Gluon launch before any runtime call has bound a CUDA
    context there; the launch binds one rather than fail to fill its TMA descriptors. The thread's
    output buffer comes from the allocator's cache, so nothing else binds the context first."""
    x = _draw(11, 2, 1000, 4, 4, 128, 128, torch.bfloat16, False)
    g = -torch.rand(4, device=DEV) * 0.5
    args = (x["q"], x["k"], x["v"], g, 128 ** -0.5, None, False, False)
    want = gops.gluon_fwd(*args)[0]
    assert torch.isfinite(want).all()
    torch.empty_like(want)  # freed at once: a cached block the thread's output takes
    monkeypatch.setattr(gops, "_empty", torch.empty)
    got: dict = {}

    def work():
        try:
            got["o"] = gops.gluon_fwd(*args)[0]
        except Exception as e:  # noqa: BLE001 — reported below, on the test's thread
            got["err"] = e

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert "err" not in got, got.get("err")
    torch.cuda.synchronize()
    assert torch.equal(got["o"], want)


def test_no_grad_forward_matches_the_triton_forward_closely():
    """The same forward by both kernels, no autograd: both within the bf16 tolerance of each other
    (they round differently: Q·diag(λ^(p+1)) is rounded to bf16 before Q·S here)."""
    x = _draw(5, 4, 2048, 8, 8, 128, 128, torch.bfloat16, True)
    gamma = -torch.linspace(0.05, 1.0, 8, device=DEV)
    with torch.no_grad():
        o, st = lightning_attn_gluon(x["q"], x["k"], x["v"], gamma=gamma, initial_state=x["h0"])
        to, tst = lightning_attn_triton(x["q"], x["k"], x["v"], gamma=gamma, initial_state=x["h0"])
    assert err_ratio(o, to) <= TOLERANCE["bf16"] and err_ratio(st, tst) <= TOLERANCE["bf16"]


def test_calls_the_gluon_forward_does_not_take_run_the_triton_kernel():
    x = _draw(9, 1, 300, 4, 4, 64, 64, torch.bfloat16, False)
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device=DEV)
    assert "varlen" in gluon_path(x["q"], x["v"], cu)
    got = lightning_attn_gluon(x["q"], x["k"], x["v"], cu_seqlens=cu)
    want = lightning_attn_triton(x["q"], x["k"], x["v"], cu_seqlens=cu)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)


# Past 2^31 elements: at B5 T131072 H32 D=E=128 a [B, T, H, 128] tensor holds 2.7e9 elements, so the
# last sequence's offsets need int64 (B4 holds exactly 2^31, and fits int32). An int32 offset there
# wrapped negative in the backward's end-term launch: an illegal memory access in the long suite's
# check-rows. ~35 GB of GPU memory a case.
BIG = (5, 131072, 32, 128)


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """RMS(x − ref) / RMS(ref) on the device (err_ratio's fp64 host copy of a 5e8-element row is
    slow); inf when x has NaN / Inf."""
    x, ref = x.float(), ref.float()
    if x.shape != ref.shape or not bool(torch.isfinite(x).all()):
        return float("inf")
    denom = float(ref.square().mean().sqrt()) or 1.0
    return float((x - ref).square().mean().sqrt()) / denom


def _big_draw(seed):
    """A random draw on the device, bf16 by default (no fp32 copy of a 2.7e9-element tensor)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)

    def rnd(*s, dt=torch.bfloat16):
        return torch.randn(*s, generator=gen, device=DEV, dtype=dt)
    return rnd


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_end_terms_past_2_31_elements_match_the_last_sequence_alone(monkeypatch, reverse):
    """The end-term launch at B5: the last sequence's corrected row of dk and dv, and its dS_0, as
    when that sequence is launched alone; its other rows untouched. Half the heads decay past the
    floor, so the correction moves their row."""
    from lattnbench.kernels.lightning.gluon import end_terms
    from lattnbench.kernels.lightning.gluon.backward import LOG_DECAY_FLOOR

    monkeypatch.setattr(end_terms, "_empty", lambda *s, dtype, device: torch.full(s, float("nan"), dtype=dtype,
                                                                                  device=device))
    b, t, h, d = BIG
    rnd = _big_draw(31)
    k, v, dk, dv = (rnd(b, t, h, d) for _ in range(4))
    assert k.numel() > 2**31
    dht, s_end = (rnd(b, h, d, d, dt=torch.float32) for _ in range(2))
    gamma = torch.where(torch.arange(h, device=DEV) % 2 == 0, -0.05, LOG_DECAY_FLOOR - 10.0).float()
    last, scale = (0 if reverse else t - 1), d**-0.5
    got_dk, got_dv = dk.clone(), dv.clone()
    got_dh0 = end_terms.end_terms(dht, k, v, got_dk, got_dv, s_end, gamma, scale, LOG_DECAY_FLOOR, last)
    one = {n: x[-1:].clone() for n, x in dict(k=k, v=v, dk=dk, dv=dv, dht=dht, s_end=s_end).items()}
    want_dh0 = end_terms.end_terms(one["dht"], one["k"], one["v"], one["dk"], one["dv"], one["s_end"], gamma, scale,
                                   LOG_DECAY_FLOOR, last)
    torch.cuda.synchronize()
    assert _rel_err(got_dk[-1, last], one["dk"][0, last]) <= 1e-6
    assert _rel_err(got_dv[-1, last], one["dv"][0, last]) <= 1e-6
    assert _rel_err(got_dh0[-1], want_dh0[0]) <= 1e-6
    assert _rel_err(got_dk[-1, last, 1::2], dk[-1, last, 1::2]) > 0.01  # heads past the floor: corrected
    rest = slice(1, None) if reverse else slice(0, t - 1)
    assert torch.equal(got_dk[-1, rest], dk[-1, rest]) and torch.equal(got_dv[-1, rest], dv[-1, rest])


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_the_last_sequence_past_2_31_elements_matches_itself_alone(monkeypatch, reverse):
    """The long suite's check-rows at B5 T131072 H32 D128 bf16 with an initial state, on the Gluon
    forward and backward: every output and gradient of the last sequence, computed in the batch,
    against the same sequence alone."""
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", True)
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "1")
    b, t, h, d = BIG
    rnd = _big_draw(37)
    q, k, v, do = (rnd(b, t, h, d) for _ in range(4))
    h0, ds = (rnd(b, h, d, d, dt=torch.float32) for _ in range(2))
    gamma = -torch.linspace(0.01, 0.5, h, device=DEV)
    assert q.numel() > 2**31
    assert gluon_path(q, v) is None and gluon_backward_path(q, k) is None

    def run(xs):
        leaves = [x.requires_grad_(True) for x in xs[:4]]
        o, st = lightning_attn_gluon(*leaves[:3], gamma=gamma, initial_state=leaves[3], reverse=reverse)
        grads = torch.autograd.grad((o, st), leaves, xs[4:])
        for x in leaves:
            x.requires_grad_(False)
        return [o.detach(), st.detach(), *grads]

    names = ["o", "final_state", "dq", "dk", "dv", "dh0"]
    full = run([q, k, v, h0, do, ds])
    last = [x[-1:].clone() for x in full]  # a copy: a view would keep the whole batch's tensors
    del full
    alone = run([x[-1:].clone() for x in (q, k, v, h0, do, ds)])
    torch.cuda.synchronize()
    errs = {n: _rel_err(x, y) for n, x, y in zip(names, last, alone)}
    assert all(err <= TOLERANCE["bf16"] for err in errs.values()), errs


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_the_dq_pass_as_a_programmatic_dependent_launch_changes_no_bit(monkeypatch, reverse):
    """LIGHTNING_GLUON_PDL: the dq pass launched programmatically after dkdv (overlapping its last
    programs) and end_terms after it give the gradients of the plain launches bit for bit, at a
    length where the launches overlap, three times over (a missing wait shows as a varying dk / dv)."""
    monkeypatch.setattr(gcfg, "BACKWARD_ON_GLUON", True)
    monkeypatch.setattr(gcfg, "BACKWARD_MODE", "1")
    monkeypatch.setattr(gcfg, "FUSED_DKDV", True)
    gen = torch.Generator(device=DEV).manual_seed(11)
    b, t, h, d = 2, 8192, 8, 128
    q, k, v = (torch.randn(b, t, h, d, device=DEV, generator=gen, dtype=torch.bfloat16) for _ in range(3))
    s0 = torch.randn(b, h, d, d, device=DEV, generator=gen)
    gamma = -torch.linspace(0.01, 0.5, h, device=DEV)
    do = torch.randn(b, t, h, d, device=DEV, generator=gen, dtype=torch.bfloat16)
    ds = torch.randn(b, h, d, d, device=DEV, generator=gen)

    def grads():
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
        o, st = lightning_attn_gluon(*leaves[:3], gamma=gamma, initial_state=leaves[3], reverse=reverse)
        return torch.autograd.grad((o, st), leaves, (do, ds))

    assert gluon_path(q, v) is None and gluon_backward_path(q, k) is None
    monkeypatch.setattr(gcfg, "PDL", False)
    want = grads()
    monkeypatch.setattr(gcfg, "PDL", True)
    for _ in range(3):
        got = grads()
        for name, x, y in zip(("dq", "dk", "dv", "dh0"), got, want):
            assert torch.equal(x, y), name
