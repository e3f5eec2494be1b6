"""The tensor-map cache of Gluon launches (``common.tensormap_cache``) against a launcher of the form
it knows (Triton 3.6's: a wrapper closing over the raw launch, the descriptor positions and their
metadata), built here with a raw launch that records what it is given."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from lattnbench.kernels.common import launch as launch_mod
from lattnbench.kernels.common import tensormap_cache as tc

BASE = 13


def _driver_module(name: str) -> types.ModuleType:
    """A stand-in for Triton's driver module: ``make_tensordesc_arg`` counts its encodes and
    returns what depends on exactly the fields a tensor map encodes."""
    mod = types.ModuleType(name)
    mod._BASE_ARGS_FORMAT_LEN = BASE
    mod.encodes = []

    def make_tensordesc_arg(arg, meta):
        mod.encodes.append((arg.base.data_ptr(), tuple(arg.shape)))
        tensor_map = ("map", arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), arg.padding,
                      meta["block_size"], meta["swizzle"])
        return [tensor_map, *arg.shape, *arg.strides]

    mod.make_tensordesc_arg = make_tensordesc_arg

    def wrap_handle_tensordesc(launcher, tensordesc_indices, tensordesc_meta):
        # the shape of Triton 3.6's wrapper: the kernel's arguments follow the base ones, each
        # descriptor replaced by its expansion
        def inner(*args):
            final_args = list(args[:BASE])
            idx = 0
            for i, arg in enumerate(args[BASE:]):
                if i in tensordesc_indices:
                    final_args.extend(mod.make_tensordesc_arg(arg, tensordesc_meta[idx]))
                    idx += 1
                else:
                    final_args.append(arg)
            return launcher(*final_args)
        return inner

    mod.wrap_handle_tensordesc = wrap_handle_tensordesc
    return mod


class _Compiled:
    """A compiled kernel whose launcher has the known form; ``compiled[grid]`` is Triton's own path."""

    def __init__(self, driver, where, metas, scratch=0):
        self.calls = []
        raw = lambda *a: self.calls.append(a)  # noqa: E731

        class CudaLauncher:
            def __init__(self):
                self.launch = driver.wrap_handle_tensordesc(raw, set(where), metas)
                self.global_scratch_size, self.profile_scratch_size = scratch, 0
                self.launch_cooperative_grid, self.launch_pdl = False, False

            def __call__(self, gx, gy, gz, stream, function, *args):
                self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)

        CudaLauncher.__module__ = driver.__name__
        self.run, self.function, self.packed_metadata = CudaLauncher(), 7, ("packed",)
        self.plain_runs = 0

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.plain_runs += 1
            self.run(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, None, None, None, *args)
        return runner


class _Desc:
    def __init__(self, base, box):
        self.base, self.shape, self.strides, self.padding = base, list(base.shape), list(base.stride()), "zero"
        self.box = box


@pytest.fixture
def driver(monkeypatch):
    mod = _driver_module(f"fake_triton_driver_{id(object())}")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def _meta(block):
    return {"block_size": block, "swizzle": 128, "elem_size": 2, "elem_type": 5, "fp4_padded": False}


def _args():
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    q = torch.randn(2, 64, 4, 16, generator=gen).view(2, 64, 64)
    o = torch.empty(2, 64, 64)
    return q, o, (_Desc(q, [1, 64, 16]), 3, _Desc(o, [1, 64, 32]), 0.125)


def test_a_cached_launch_passes_what_tritons_wrapper_passes_and_encodes_once(driver):
    compiled = _Compiled(driver, where=[0, 2], metas=[_meta([1, 64, 16]), _meta([1, 64, 32])])
    run = tc.cached_runner(compiled, (4, 8, 1))
    assert run is not None
    _, _, args = _args()
    compiled[(4, 8, 1)](*args, stream=99)
    assert len(driver.encodes) == 2
    for _ in range(3):
        run(*args, stream=99)
    # the raw launch got the same arguments every time, base ones included
    assert len(compiled.calls) == 4 and all(c == compiled.calls[0] for c in compiled.calls[1:])
    assert compiled.calls[0][:BASE] == (4, 8, 1, 99, 7, False, False, None, None, ("packed",), None, None, None)
    # the first cached launch encoded both maps, the later ones none
    assert len(driver.encodes) == 4
    assert compiled.plain_runs == 1


def test_another_address_or_layout_is_encoded_again(driver):
    compiled = _Compiled(driver, where=[0, 2], metas=[_meta([1, 64, 16]), _meta([1, 64, 32])])
    run = tc.cached_runner(compiled, (1, 1, 1))
    q, o, args = _args()
    run(*args, stream=1)
    q2 = q.clone()
    run(_Desc(q2, [1, 64, 16]), 3, args[2], 0.125, stream=1)
    assert driver.encodes[-1] == (q2.data_ptr(), tuple(q2.shape))
    # the same address, another shape: a view of the first rows
    part = q[:, :32]
    run(_Desc(part, [1, 64, 16]), 3, args[2], 0.125, stream=1)
    assert len(driver.encodes) == 4
    got = compiled.calls[-1][BASE]
    assert got[1] == q.data_ptr() and got[2] == (2, 32, 64)


def test_a_launch_hook_or_no_stream_takes_tritons_runner(driver, monkeypatch):
    compiled = _Compiled(driver, where=[0, 2], metas=[_meta([1, 64, 16]), _meta([1, 64, 32])])
    run = tc.cached_runner(compiled, (1, 1, 1))
    _, _, args = _args()
    run(*args)
    assert compiled.plain_runs == 1
    from triton import knobs
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):  # Triton's hook chain: empty is no hook, one added is
        monkeypatch.setattr(chain, "calls", [])
        run(*args, stream=5)
        assert compiled.plain_runs == 1
        monkeypatch.setattr(chain, "calls", [lambda *a: None])
    else:
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    run(*args, stream=5)
    assert compiled.plain_runs == 2


@pytest.mark.parametrize("case", ["no descriptors", "scratch", "metadata missing", "another wrapper"])
def test_launchers_of_another_form_keep_tritons_runner(driver, case):
    where, metas, scratch = [0], [_meta([1, 64, 16])], 0
    if case == "no descriptors":
        where, metas = [], []
    elif case == "scratch":
        scratch = 256
    elif case == "metadata missing":
        metas = [None]
    compiled = _Compiled(driver, where=where, metas=metas, scratch=scratch)
    if case == "another wrapper":
        compiled.run.launch = lambda *a: None
    assert tc.cached_runner(compiled, (1, 1, 1)) is None


def test_the_cache_starts_over_past_its_limit(driver, monkeypatch):
    monkeypatch.setattr(tc, "CACHE_LIMIT", 3)
    compiled = _Compiled(driver, where=[0], metas=[_meta([1, 64, 16])])
    run = tc.cached_runner(compiled, (1, 1, 1))
    xs = [torch.randn(2, 64, 64) for _ in range(5)]
    for x in xs:
        run(_Desc(x, [1, 64, 16]), stream=1)
    assert len(run.cache) == 2
    run(_Desc(xs[-1], [1, 64, 16]), stream=1)
    assert len(driver.encodes) == 5


def test_the_switch_is_read_when_a_launcher_is_made(monkeypatch):
    monkeypatch.setenv("LIGHTNING_GLUON_TENSORMAPS", "0")
    assert launch_mod.PlainLauncher(sys.modules[__name__], "_kernel_stub").reuse_tensormaps is False
    monkeypatch.setenv("LIGHTNING_GLUON_TENSORMAPS", "1")
    assert launch_mod.PlainLauncher(sys.modules[__name__], "_kernel_stub").reuse_tensormaps is True


class _KernelStub:
    @staticmethod
    def fn(a, b=1):
        return None


_kernel_stub = _KernelStub()
