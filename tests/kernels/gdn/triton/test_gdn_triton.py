"""The Triton GDN forward against the fp64 token-by-token reference ``gdn_naive`` (the backward:
test_gdn_triton_backward.py).

On a machine without a GPU the kernels run in the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), where bf16 computes as on the GPU (``interpreter_bf16``); bf16 on the H200 too
(``lattnbench check-grad -k gdn/triton --dtype bf16``). o and S_T within the dtype's tolerance, on
the same dtype-rounded inputs (L2-normalised keys, g = logsigmoid(x)/norm, β = sigmoid(x)); every
buffer the kernels must fully write is NaN-poisoned first. The interpreter's chunk is 16 tokens, so T = 37 crosses
two chunk boundaries and ends in a partial chunk. Inputs are drawn afresh every run; a failure
names the seed, and GDN_TEST_SEED=<seed> replays it.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import torch

from lattnbench.kernels.gdn.naive import gdn_naive, l2_normalize
from lattnbench.kernels.gdn.triton import gdn_triton
from lattnbench.kernels.gdn.triton import kernels as gdn_kernels
from lattnbench.kernels.gdn.triton import ops as gdn_ops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio
from triton_testutil import record_launches

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
BASE_SEED = int(os.environ.get("GDN_TEST_SEED", np.random.SeedSequence().entropy % 2**32))


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """NaN-fill every buffer the kernels allocate, so an unwritten element shows."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(gdn_ops, "_empty", nan_empty)


@pytest.fixture
def seed(request):
    return (BASE_SEED + zlib.crc32(request.node.name.encode())) % 2**32


def inputs(seed, b=1, t=37, h=2, hkv=None, d=24, e=40, dtype=torch.float32, h0=True, cu_seqlens=None,
           norm=16.0):
    """(q, k, v, g, beta, initial state or None) on the host: k L2-normalised, then every input
    rounded to its dtype (g in fp32, as the benchmark draws it by default; h0 fp32)."""
    hkv = hkv or h
    n = b if cu_seqlens is None else len(cu_seqlens) - 1
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=gen).to(dtype)
    k = l2_normalize(torch.randn(b, t, hkv, d, generator=gen)).to(dtype)
    v = torch.randn(b, t, hkv, e, generator=gen).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, generator=gen)) / norm
    beta = torch.sigmoid(torch.randn(b, t, h, generator=gen)).to(dtype)
    s0 = torch.randn(n, h, d, e, generator=gen) if h0 else None
    return q, k, v, g, beta, s0


def check(seed, scale=None, cu_seqlens=None, **kw):
    """Kernel and fp64 reference on the same inputs; assert o and S_T within the dtype's tolerance.
    Returns the errors."""
    dtype = kw.get("dtype", torch.float32)
    q, k, v, g, beta, s0 = inputs(seed, cu_seqlens=cu_seqlens, **kw)
    dev = [x.to(DEV) for x in (q, k, v, g, beta)]
    o, st = gdn_triton(*dev, scale=scale, initial_state=None if s0 is None else s0.to(DEV), cu_seqlens=cu_seqlens)
    n = q.shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
    assert o.dtype == dtype and o.shape == q.shape[:3] + v.shape[3:]
    assert st.dtype == torch.float32 and st.shape == (n, q.shape[2], q.shape[3], v.shape[3])
    ro, rs = gdn_naive(*(x.double() for x in (q, k, v, g, beta)), scale=scale,
                       initial_state=None if s0 is None else s0.double(), cu_seqlens=cu_seqlens)
    return within_tolerance({"o": err_ratio(o, ro), "final_state": err_ratio(st, rs)}, dtype, seed)


def within_tolerance(errs: dict, dtype, seed: int) -> dict:
    """Assert every error within the dtype's tolerance, naming the seed; return the errors."""
    tol = TOLERANCE[NAMES[dtype]]
    assert all(err <= tol for err in errs.values()), f"seed {seed}: errors above {tol}: {errs}"
    return errs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("h0", [True, False])
def test_gqa_odd_t_non_pow2_dims(seed, dtype, h0):
    check(seed, h=4, hkv=2, d=24, e=40, dtype=dtype, h0=h0, scale=0.3)


def test_batch_d_smaller_than_e_fp16(seed):
    check(seed, b=2, h=1, d=16, e=40, dtype=torch.float16, norm=8.0)


def test_d_larger_than_e_many_chunks(seed):
    # seven chunks of 16 and a partial one; E narrower than the interpreter's slice
    check(seed, t=99, h=1, d=40, e=12)


@pytest.mark.parametrize("norm", [16.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_varlen_with_a_length_one_sequence(seed, dtype, norm):
    # sequences end inside a chunk, one is a single token; states restart per sequence
    check(seed, t=30, h=2, hkv=1, d=16, e=24, dtype=dtype, cu_seqlens=[0, 12, 13, 30], norm=norm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_strong_gates(seed, dtype):
    # fla's strongest recipe, log σ(x)/0.1: about −7 per token, a chunk's cumulative gate reaches
    # −100 at 16 tokens, past fp16's and near fp32's exponent range
    check(seed, t=37, h=2, hkv=1, d=24, e=40, dtype=dtype, norm=0.1)


def test_strong_gates_at_the_gpu_chunk(seed, monkeypatch):
    # the GPU's chunk of 64: the cumulative gate reaches −450, where exponents taken as fp32
    # differences of two cumulative sums put S_T near 2e-5, past the fp32 tolerance (the kernels
    # take them in fp64 for fp32 inputs)
    monkeypatch.setitem(gdn_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gdn_ops._INTERP_META, "BV", 32)
    check(seed, t=100, h=1, d=16, e=16, norm=0.1)


def test_no_final_state_and_empty_sequence(seed):
    q, k, v, g, beta, s0 = inputs(seed, t=20, d=16, e=16)
    o, st = gdn_triton(q, k, v, g, beta, initial_state=s0, output_final_state=False)
    ro, _ = gdn_naive(*(x.double() for x in (q, k, v, g, beta)), initial_state=s0.double())
    assert st is None and err_ratio(o, ro) <= TOLERANCE["fp32"]
    o, st = gdn_triton(q[:, :0], k[:, :0], v[:, :0], g[:, :0], beta[:, :0], initial_state=s0)
    assert o.shape == (1, 0, 2, 16) and torch.equal(st, s0)


def test_the_launches_and_their_grids(monkeypatch):
    # one prep launch striding the chunks (two programs a row under the interpreter), one sweep
    # over E-slices and (sequence, head) rows
    log = record_launches(monkeypatch, gdn_kernels, ("gdn_prep_kernel", "gdn_fwd_kernel"))
    check(0, b=2, t=37, h=2, hkv=1, d=24, e=40)
    assert [(name, grid) for name, grid, _ in log] == [("gdn_prep_kernel", (2, 4)), ("gdn_fwd_kernel", (3, 4))]


def _refuse_launches(monkeypatch):
    class NoLaunch:
        def __init__(self, kernel):
            self.fn = kernel.fn

        def __getitem__(self, grid):
            raise AssertionError("launched before the inputs were checked")

    for name in ("gdn_prep_kernel", "gdn_fwd_kernel"):
        monkeypatch.setattr(gdn_kernels, name, NoLaunch(getattr(gdn_kernels, name)))


@pytest.mark.parametrize("bad", ["g_shape", "beta_dtype", "kv_dtype", "heads", "h0_shape", "cu", "cu_batch",
                                 "scale", "g_device_type"])
def test_bad_input_raises_before_any_launch(monkeypatch, bad):
    _refuse_launches(monkeypatch)
    q, k, v, g, beta, s0 = inputs(0, b=1, t=20, h=2, d=16, e=16)
    kw = dict(initial_state=s0)
    if bad == "g_shape":
        g = g[..., None]
    elif bad == "beta_dtype":
        beta = beta.double()
    elif bad == "kv_dtype":
        k = k.half()
    elif bad == "heads":
        q = torch.cat([q, q[:, :, :1]], 2)
        g, beta = torch.cat([g, g[:, :, :1]], 2), torch.cat([beta, beta[:, :, :1]], 2)
    elif bad == "h0_shape":
        kw["initial_state"] = s0[:, :, :8]
    elif bad == "cu":
        kw["cu_seqlens"], kw["initial_state"] = [0, 12, 10, 20], None
    elif bad == "cu_batch":
        q, k, v, g, beta = (torch.cat([x, x]) for x in (q, k, v, g, beta))
        kw["cu_seqlens"], kw["initial_state"] = [0, 20], None
    elif bad == "scale":
        kw["scale"] = float("inf")
    elif bad == "g_device_type":
        g = g.tolist()
    with pytest.raises(ValueError):
        gdn_triton(q, k, v, g, beta, **kw)


def test_reverse_is_refused(monkeypatch):
    _refuse_launches(monkeypatch)
    q, k, v, g, beta, _ = inputs(0, t=8, d=16, e=16)
    with pytest.raises(NotImplementedError, match="no reverse"):
        gdn_triton(q, k, v, g, beta, reverse=True)


def test_the_registry_entry_refuses_reverse():
    from lattnbench.errors import Unsupported
    from lattnbench.registry import default_registry

    fn = default_registry()["gdn/triton"].load()
    q, k, v, g, beta, s0 = inputs(0, t=20, d=16, e=16)
    with pytest.raises(Unsupported, match="no reverse"):
        fn(q, k, v, g, beta, None, s0, True, None)
