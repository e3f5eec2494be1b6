"""The host path of lightning_attn_triton: nothing in a call reads device data (no sync, nothing
that would break CUDA-graph capture), bad input fails before any launch, and host values become
device tensors once.

On the CPU a device read cannot be seen as a sync, so its proxy is a TorchFunctionMode that
records every tensor method that would read values on the host (``tolist``, ``item``, ``bool``,
...), with ``checks.values_on_host`` answering as it does for CUDA tensors and the kernel launches
stubbed (the interpreter itself copies tensors to numpy; a GPU launch reads nothing).
"""
from __future__ import annotations

import types

import pytest
import torch
from torch.overrides import TorchFunctionMode

from lattnbench.kernels.common import checks
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.kernels.lightning.triton import ops as tl_ops
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu", "nonzero",
         "__array__", "__repr__", "__format__"}


class DeviceReads(TorchFunctionMode):
    """Records the tensor methods of READS called inside it, and .to() / .copy_() onto the CPU."""

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        to_cpu = name in ("to", "copy_") and any(
            (isinstance(a, str) and a.startswith("cpu")) or (isinstance(a, torch.device) and a.type == "cpu")
            for a in (*args[1:], *kwargs.values()))
        if name in READS or to_cpu:
            self.reads.append(name)
        return func(*args, **kwargs)


@pytest.fixture
def on_device(monkeypatch):
    """CPU tensors treated as CUDA ones (values not on the host), launches recorded, not run."""
    monkeypatch.setattr(checks, "values_on_host", lambda x: not isinstance(x, torch.Tensor))
    launches = []

    class Recorder:
        fn = None

        def __getitem__(self, grid):
            return lambda *args, **kw: launches.append((grid, kw.get("ROLE")))

    fake = types.SimpleNamespace(lightning_fwd=None, lightning_bwd=None,
                                 lightning_fwd_kernel=Recorder(), lightning_bwd_kernel=Recorder())
    monkeypatch.setattr(tl_ops._FWD_LAUNCH, "module", fake)
    monkeypatch.setattr(tl_ops._BWD_LAUNCH, "module", fake)
    return launches


def _leaves(seed, b, t, h, hkv, d, e, n):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(b, t, h, d, generator=g), torch.randn(b, t, hkv, d, generator=g),
          torch.randn(b, t, hkv, e, generator=g), torch.randn(n, h, d, e, generator=g)]
    return g, [x.requires_grad_(True) for x in xs]


def test_the_detector_sees_a_read():
    x = torch.tensor([0, 3, 7])
    with DeviceReads() as mode:
        x.tolist()
        bool(x[1] > 0)
    assert mode.reads == ["tolist", "__bool__"]


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
@pytest.mark.parametrize("gamma", ["tensor", None], ids=["gamma", "no-gamma"])
def test_fwd_and_bwd_read_no_device_data(varlen, gamma, on_device):
    b, t = (1, 48) if varlen else (2, 24)
    cu = torch.tensor([0, 17, 17, 48], dtype=torch.int64) if varlen else None
    n = 3 if varlen else b
    g, (q, k, v, s0) = _leaves(20, b, t, 4, 2, 16, 24, n)
    gam = -torch.rand(4, generator=g) if gamma else None
    do, ds = torch.randn(b, t, 4, 24, generator=g), torch.randn(n, 4, 16, 24, generator=g)
    lightning_attn_triton(q, k, v, gamma=gam, initial_state=s0, cu_seqlens=cu)  # first call: caches fill
    launches = on_device
    launches.clear()
    with DeviceReads() as mode:
        with torch.no_grad():
            lightning_attn_triton(q, k, v, gamma=gam, initial_state=s0, cu_seqlens=cu)
        o, st = lightning_attn_triton(q, k, v, gamma=gam, initial_state=s0, cu_seqlens=cu)
        torch.autograd.grad((o, st), (q, k, v, s0), (do, ds))
    assert mode.reads == []
    # the grid's rows are N·H, N from cu_seqlens' length alone
    assert [(grid[1], role) for grid, role in launches] == [(n * 4, None), (n * 4, None), (n * 4, 0),
                                                           (n * 4, 1), (n * 4, 2)]


@pytest.mark.parametrize("bad", ["float", "rank", "short", "other device"])
def test_device_cu_seqlens_is_checked_by_shape_before_any_launch(bad, on_device, monkeypatch):
    q = torch.randn(1, 16, 2, 16)
    cu = {"float": torch.tensor([0.0, 16.0]), "rank": torch.tensor([[0, 16]]), "short": torch.tensor([0]),
          "other device": torch.tensor([0, 16], device="meta")}[bad]
    with pytest.raises(ValueError, match="cu_seqlens"):
        lightning_attn_triton(q, q, q, cu_seqlens=cu)
    assert on_device == []


@pytest.mark.parametrize("orientation", [0, 1], ids=["tr0", "tr1"])
def test_device_offsets_beyond_t_are_clamped_in_the_kernel(orientation, monkeypatch):
    """Offsets past T in a device cu_seqlens (not checked on the host) read and write nothing
    outside the tensors: the sequences end at T, as with the clamped offsets."""
    monkeypatch.setitem(tl_ops._INTERP_META, "TR", orientation)
    monkeypatch.setattr(checks, "values_on_host", lambda x: not isinstance(x, torch.Tensor))
    g, (q, k, v, _) = _leaves(21, 1, 40, 2, 2, 16, 16, 3)
    gam = [-0.3, -0.05]
    with torch.no_grad():
        o, st = lightning_attn_triton(q, k, v, gamma=gam, cu_seqlens=torch.tensor([0, 25, 90, 200]))
        ro, rs = lightning_naive(q.double(), k.double(), v.double(), gamma=torch.tensor(gam, dtype=torch.float64),
                                 cu_seqlens=[0, 25, 40, 40])
    assert err_ratio(o, ro) <= TOLERANCE["fp32"] and err_ratio(st, rs) <= TOLERANCE["fp32"]


def test_host_values_become_one_device_tensor_each():
    a = checks.gamma_tensor([-0.5, -0.25], 2, torch.device("cpu"))
    b = checks.gamma_tensor([-0.5, -0.25], 2, torch.device("cpu"))
    c = checks.gamma_tensor([-0.5, -0.125], 2, torch.device("cpu"))
    assert a is b and a is not c and c.tolist() == [-0.5, -0.125]
    z = checks.gamma_tensor(None, 3, torch.device("cpu"))
    assert z is checks.gamma_tensor(None, 3, torch.device("cpu")) and z.tolist() == [0.0, 0.0, 0.0]
    cu = checks.cu_tensor([0, 5, 9], 9, torch.device("cpu"))
    assert cu is checks.cu_tensor((0, 5, 9), 9, torch.device("cpu")) and cu.tolist() == [0, 5, 9]
