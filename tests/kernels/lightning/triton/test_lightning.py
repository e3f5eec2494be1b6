"""The Triton Lightning Attention kernels against the fp64 quadratic reference.

On a machine without a GPU the kernels run in the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), where bf16 computes as on the GPU (``interpreter_bf16``).
Outputs and gradients (q, k, v, initial_state) are checked with random ``do`` and random
``dS_T``; every buffer the kernels must fully write is NaN-poisoned first. The chunk-pass
orientation (the TR config key) is set per test: every kernel test runs with the three pointer
passes (TR 0, 1, 2); the tensor-descriptor pass (TR 3) has its own tests, on the shapes where
descriptors apply and on those that fall back to TR 1's pointer code; host-side tests run in the
interpreter's own orientation (TR 0).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lattnbench.kernels.decay import lightning_decay
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.common.arith import cdiv
from lattnbench.kernels.lightning.triton import configs as C
from lattnbench.kernels.lightning.triton import lightning_attn, lightning_attn_triton
from lattnbench.kernels.lightning.triton import ops as tl_ops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio
from triton_testutil import LaunchSpy

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


# chunk-pass orientations (the TR config key): 0 row-wise, 1 transposed, 2 transposed with the state
# update's decay on b; 3 (transposed with tensor-descriptor loads / stores where they apply: pow2
# head dims, not varlen, whole BV slices; TR 1's pointer code elsewhere) is tested on its own below
ORIENTATIONS = (0, 1, 2)
HOST = pytest.mark.parametrize("orientation", [0], indirect=True, ids=["tr0"])  # no orientation at stake


def across_orientations(cases, shift: int, names: str = "dtype"):
    """``cases`` each paired with one orientation, ORIENTATIONS rotated by ``shift``: the orientation
    changes the chunk passes' tiling, the dtype only their loads' and stores' casts, so three tests
    at shifts 0, 1 and 2 cover every (dtype, orientation) pair in a third of the runs."""
    values = [c if isinstance(c, tuple) else (c,) for c in cases]
    tr = [ORIENTATIONS[(i + shift) % len(ORIENTATIONS)] for i in range(len(values))]
    ids = ["-".join([*(NAMES.get(x, str(x)) for x in v), f"tr{t}"]) for v, t in zip(values, tr)]
    return pytest.mark.parametrize(f"{names},orientation", [(*v, t) for v, t in zip(values, tr)],
                                   indirect=["orientation"], ids=ids)


def _parametrizes(metafunc, name):
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc):
    """Every test runs in every orientation of ORIENTATIONS unless it names its own."""
    if "orientation" in metafunc.fixturenames and not _parametrizes(metafunc, "orientation"):
        metafunc.parametrize("orientation", ORIENTATIONS, indirect=True, ids=[f"tr{tr}" for tr in ORIENTATIONS])


@pytest.fixture(autouse=True)
def orientation(request, monkeypatch):
    """The chunk-pass orientation of the interpreter's fixed launch config (every pass, fwd and bwd)."""
    monkeypatch.setitem(tl_ops._INTERP_META, "TR", request.param)
    return request.param


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """NaN-fill every output buffer the kernels allocate, so an unwritten element shows."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(tl_ops, "_empty", nan_empty)


def _inputs(seed, b, t, h, hkv, d, e, dtype, n_states=None, h0=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=g).to(dtype)
    k = torch.randn(b, t, hkv, d, generator=g).to(dtype)
    v = torch.randn(b, t, hkv, e, generator=g).to(dtype)
    s0 = torch.randn(n_states or b, h, d, e, generator=g) if h0 else None
    return g, q, k, v, s0


_REFERENCES: dict[tuple, tuple] = {}


def _reference(q, k, v, s0, gamma, scale, reverse, cu_seqlens, do, ds):
    """fp64 o, S_T and gradients (q, k, v[, h0]) of the loss o·do (+ S_T·ds when ds is given).

    Kept by the exact bytes of the inputs: the three orientations of a test draw the same inputs,
    and the reference does not depend on the orientation."""
    tensors = [x for x in (q, k, v, s0, do, ds) if x is not None]
    key = (tuple((x.dtype, tuple(x.shape), x.detach().contiguous().view(torch.uint8).numpy().tobytes()) for x in tensors),
           s0 is None, ds is None, None if gamma is None else np.asarray(gamma, np.float64).tobytes(),
           scale, reverse, None if cu_seqlens is None else tuple(cu_seqlens))
    if key not in _REFERENCES:
        ref_leaves = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
        s0_ref = s0.detach().double().requires_grad_(True) if s0 is not None else None
        gam_ref = None if gamma is None else torch.as_tensor(np.asarray(gamma), dtype=torch.float64)
        ro, rs = lightning_naive(*ref_leaves, gamma=gam_ref, scale=scale, initial_state=s0_ref,
                                 reverse=reverse, cu_seqlens=cu_seqlens)
        ref_loss = (ro * do.double()).sum()
        if ds is not None:
            ref_loss = ref_loss + (rs * ds.double()).sum()
        ref_loss.backward()
        grads = [x.grad for x in ref_leaves] + ([s0_ref.grad] if s0_ref is not None else [])
        _REFERENCES[key] = (ro.detach(), rs.detach(), grads)
    return _REFERENCES[key]


def check(seed=0, b=2, t=100, h=3, hkv=None, d=48, e=48, dtype=torch.float32, gamma="mixed",
          scale=None, h0=True, reverse=False, cu_seqlens=None, transform=None, api=None, dst=True):
    """Run kernel and fp64 reference; assert o, S_T, dq, dk, dv, dh0 within the dtype's tolerance.
    dst=False: the loss leaves S_T out (its gradient reaches the backward as None)."""
    hkv = hkv or h
    n = b if cu_seqlens is None else len(cu_seqlens) - 1
    g, q, k, v, s0 = _inputs(seed, b, t, h, hkv, d, e, dtype, n, h0)
    if isinstance(gamma, str) and gamma == "mixed":
        gam = -torch.rand(h, generator=g) * 2.0
        gam[0] = 0.0
        if h > 2:
            gam[-1] = -6.0  # strong decay
        gamma = gam.numpy()
    leaves = [x.to(DEV).requires_grad_(True) for x in (q, k, v)]
    s0_dev = s0.to(DEV).requires_grad_(True) if s0 is not None else None
    qi, ki, vi = leaves
    if transform is not None:
        qi, ki, vi = transform(qi), transform(ki), transform(vi)
    if api is None:
        o, st = lightning_attn_triton(qi, ki, vi, gamma=gamma, scale=scale, initial_state=s0_dev,
                                      reverse=reverse, cu_seqlens=cu_seqlens)
    else:
        o, st = api(qi, ki, vi, s0_dev)
    assert o.dtype == dtype and o.shape == (b, t, h, e)
    assert st.dtype == torch.float32 and st.shape == (n, h, d, e)
    do = torch.randn(o.shape, generator=g).to(dtype)
    ds = torch.randn(st.shape, generator=g)
    loss = (o.float() * do.to(DEV).float()).sum()
    if dst:
        loss = loss + (st * ds.to(DEV)).sum()
    loss.backward()

    ro, rs, ref_grads = _reference(q, k, v, s0, gamma, scale, reverse, cu_seqlens, do, ds if dst else None)
    tol = TOLERANCE[NAMES[dtype]]
    pairs = {"o": (o, ro), "final_state": (st, rs)}
    for name, mine, ref in zip("qkv", leaves, ref_grads):
        assert mine.grad is not None and mine.grad.shape == ref.shape
        pairs["d" + name] = (mine.grad, ref)
    if s0 is not None:
        pairs["dh0"] = (s0_dev.grad, ref_grads[3])
    errs = {name: err_ratio(x, r) for name, (x, r) in pairs.items()}
    bad = {name: err for name, err in errs.items() if not err <= tol}
    assert not bad, f"errors above {tol}: {bad} (all: {errs})"
    return errs


@across_orientations([torch.float32, torch.float16, torch.bfloat16], shift=0)
def test_decay_initial_state_final_state(dtype):
    check(seed=1, t=52, dtype=dtype)  # three whole chunks of the interpreter's 16 and a partial one


@across_orientations([torch.float32, torch.float16, torch.bfloat16], shift=1)
def test_reverse(dtype):
    check(seed=2, b=1, t=77, h=3, d=48, e=32, dtype=dtype, reverse=True)


def test_d96_e_differs_scale_no_decay():
    check(seed=3, b=1, t=70, h=2, d=96, e=40, gamma=None, scale=0.37)


def test_d_smaller_than_e_no_initial_state():
    check(seed=4, b=1, t=45, h=2, d=32, e=96, h0=False)


@pytest.mark.parametrize("reverse", [False, True])
def test_gqa(reverse):
    check(seed=5, b=1, t=34, h=4, hkv=2, d=32, e=48, reverse=reverse)  # a whole chunk and one of 2 tokens


@across_orientations([torch.float32, torch.float16, torch.bfloat16], shift=2)
def test_t_equals_one(dtype):
    check(seed=6, b=2, t=1, h=2, d=48, e=48, dtype=dtype)


def test_strong_and_zero_decay():
    check(seed=7, b=1, t=90, h=3, d=32, e=32, gamma=np.array([0.0, -20.0, -80.0], dtype=np.float32))


@across_orientations([(torch.float32, False), (torch.float32, True), (torch.float16, False)], shift=0,
                     names="dtype,reverse")
def test_varlen(dtype, reverse):
    # 3 sequences of unequal length, one of length 1, per-sequence initial states
    cu = torch.tensor([0, 37, 38, 99], dtype=torch.int32)
    check(seed=8, b=1, t=99, h=2, d=48, e=32, dtype=dtype, reverse=reverse, cu_seqlens=cu)


def test_varlen_gqa_empty_sequence():
    # a sequence of length 0 keeps its state: S_T = S_0, dS_0 = dS_T
    check(seed=9, b=1, t=50, h=2, hkv=1, d=32, e=32, cu_seqlens=[0, 20, 20, 50])


@HOST
def test_non_contiguous_inputs():
    # inputs built as [B, H, T, D] and viewed as [B, T, H, D]: non-contiguous strides
    check(seed=10, b=2, t=40, h=2, d=32, e=48, transform=lambda x: x.transpose(1, 2).contiguous().transpose(1, 2)[:, :, :, :])
    check(seed=11, b=2, t=40, h=2, d=32, e=48, transform=lambda x: x[:, :, :, :].unsqueeze(-1).expand(*x.shape, 2)[..., 0])


@HOST
def test_lightning_attn_seed_api():
    def api(q, k, v, s0):
        return lightning_attn(q, k, v, layer_idx=1, num_layers=4, initial_state=s0)

    gamma = lightning_decay(3, 1, 4)
    errs = check(seed=12, b=1, t=60, h=3, d=32, e=32, gamma=gamma, api=api)
    assert errs["o"] < 1e-5


def test_no_final_state_and_output_fully_written():
    _, q, k, v, _ = _inputs(13, 1, 50, 2, 2, 32, 32, torch.float32, h0=False)
    o, st = lightning_attn_triton(q, k, v, gamma=[-0.5, -0.1], output_final_state=False)
    assert st is None
    ro, _ = lightning_naive(q.double(), k.double(), v.double(), gamma=torch.tensor([-0.5, -0.1], dtype=torch.float64))
    assert torch.isfinite(o).all()
    assert err_ratio(o, ro) <= TOLERANCE["fp32"]


def test_gradient_through_final_state_only():
    g, q, k, v, s0 = _inputs(14, 1, 38, 2, 2, 32, 48, torch.float32)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
    _, st = lightning_attn_triton(*leaves[:3], gamma=[-0.3, 0.0], initial_state=leaves[3])
    w = torch.randn(st.shape, generator=g)
    (st * w).sum().backward()
    ref = [x.double().requires_grad_(True) for x in (q, k, v, s0)]
    _, rs = lightning_naive(*ref[:3], gamma=torch.tensor([-0.3, 0.0], dtype=torch.float64), initial_state=ref[3])
    (rs * w.double()).sum().backward()
    assert ref[0].grad is None and leaves[0].grad.abs().max() == 0  # q does not reach S_T
    for mine, r in zip(leaves[1:], ref[1:]):
        assert err_ratio(mine.grad, r.grad) <= TOLERANCE["fp32"]


@pytest.mark.parametrize("reverse", [False, True])
def test_loss_on_output_only(reverse):
    # S_T unused: its gradient arrives as None (no dS_T term), dh0 from the outputs alone
    g, q, k, v, s0 = _inputs(15, 1, 38, 2, 2, 32, 48, torch.float32)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, s0)]
    gam = [-0.2, -1.0]
    o, _ = lightning_attn_triton(*leaves[:3], gamma=gam, initial_state=leaves[3], reverse=reverse)
    w = torch.randn(o.shape, generator=g)
    (o * w).sum().backward()
    ref = [x.double().requires_grad_(True) for x in (q, k, v, s0)]
    ro, _ = lightning_naive(*ref[:3], gamma=torch.tensor(gam, dtype=torch.float64), initial_state=ref[3],
                            reverse=reverse)
    (ro * w.double()).sum().backward()
    for mine, r in zip(leaves, ref):
        assert err_ratio(mine.grad, r.grad) <= TOLERANCE["fp32"]


@HOST
@pytest.mark.parametrize("case", ["rank", "dtype", "shape", "heads", "varlen_batch", "cu", "h0", "gamma"])
def test_bad_input_raises(case):
    q = torch.randn(1, 8, 4, 16)
    k = torch.randn(1, 8, 2, 16)
    v = torch.randn(1, 8, 2, 16)
    kw = {}
    if case == "rank":
        q = q[0]
    elif case == "dtype":
        k = k.half()
    elif case == "shape":
        k = torch.randn(1, 8, 2, 8)
    elif case == "heads":
        k, v = torch.randn(1, 8, 3, 16), torch.randn(1, 8, 3, 16)
    elif case == "varlen_batch":
        q, k, v = (torch.cat([x, x]) for x in (q, k, v))
        kw["cu_seqlens"] = [0, 8]
    elif case == "cu":
        kw["cu_seqlens"] = [0, 5, 7]
    elif case == "h0":
        kw["initial_state"] = torch.randn(1, 4, 16, 8)
    elif case == "gamma":
        kw["gamma"] = [0.0, -1.0]
    with pytest.raises(ValueError):
        lightning_attn_triton(q, k, v, **kw)


@HOST
def test_backward_launches_the_three_passes(monkeypatch):
    """One launch per pass: dq (ROLE 0), dk (1), dv and dh0 (2), each over its split dimension."""
    from lattnbench.kernels.lightning.triton import kernels as K

    if K.lightning_bwd is not None:
        pytest.skip("launch spy written for the interpreter's plain launches")
    plain, roles = K.lightning_bwd_kernel, []

    class RoleSpy(LaunchSpy):
        def __getitem__(self, grid):
            self.grids.append(grid)
            launch = plain[grid]
            return lambda *a, **kw: (roles.append(kw["ROLE"]), launch(*a, **kw))[1]

    spy = RoleSpy(plain)
    monkeypatch.setattr(K, "lightning_bwd_kernel", spy)
    g, q, k, v, _ = _inputs(30, 1, 40, 2, 2, 32, 48, torch.float32, h0=False)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    o, _ = lightning_attn_triton(*leaves, gamma=[-0.1, -0.5])
    o.backward(torch.randn(o.shape, generator=g))
    bv = tl_ops._INTERP_META["BV"]
    assert roles == [0, 1, 2]
    assert spy.grids == [(cdiv(32, bv), 2), (cdiv(32, bv), 2), (cdiv(48, bv), 2)]
    assert all(torch.isfinite(x.grad).all() for x in leaves)


@pytest.fixture
def descriptor_spy(monkeypatch):
    """Count tl.make_tensor_descriptor calls made by the interpreted kernels."""
    import triton.language as tl

    orig, calls = tl.make_tensor_descriptor, []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("block_shape"))
        return orig(*args, **kwargs)

    spy.__triton_builtin__ = True  # the interpreter passes its semantic argument to builtins only
    monkeypatch.setattr(tl, "make_tensor_descriptor", spy)
    return calls


@pytest.mark.parametrize("orientation", [3], indirect=True, ids=["tr3"])
@pytest.mark.parametrize("case,tma", [
    ("pow2", True), ("pow2_fp16", True), ("reverse_d_lt_e", True), ("gqa_t1_fp16", True),
    ("no_h0_t100", True), ("strong_and_zero_decay", True), ("reverse_no_dst", True),
    ("d48", False), ("e_not_whole_slices", False), ("varlen", False)])
def test_descriptor_path_where_it_applies(orientation, case, tma, descriptor_spy):
    """TR=3: every pass of an eligible shape moves its tiles by tensor descriptors (zero fill outside
    [0, T) as the row mask, reverse starting below row 0, a last partial chunk, h0 and dS_T or
    neither); other shapes take the pointer path. Both against the fp64 reference."""
    kw = {"pow2": dict(d=32, e=32), "pow2_fp16": dict(d=32, e=64, dtype=torch.float16),
          "reverse_d_lt_e": dict(d=16, e=64, reverse=True),
          "gqa_t1_fp16": dict(h=4, hkv=2, d=32, e=32, t=1, dtype=torch.float16),
          "no_h0_t100": dict(d=64, e=16, h0=False),
          "strong_and_zero_decay": dict(b=1, t=90, d=32, e=32, gamma=np.array([0.0, -20.0, -80.0], np.float32)),
          "reverse_no_dst": dict(b=1, t=70, h=2, d=32, e=32, reverse=True, dst=False),
          # the fallback compiles to TR 1's pointer code, which every test above runs: one sequence of a
          # whole chunk and a partial one shows that it is taken and right
          "d48": dict(b=1, t=40, d=48, e=32), "e_not_whole_slices": dict(b=1, t=40, d=32, e=40),
          "varlen": dict(b=1, cu_seqlens=[0, 30, 31, 100], d=32, e=32)}[case]
    check(**kw)
    assert bool(descriptor_spy) == tma, descriptor_spy
    if tma:
        assert all(len(bs) == 3 and bs[0] == 1 for bs in descriptor_spy)
