"""The lean launch path (kernels/common/launch.py), with stand-ins for Triton's autotuned
kernel and compiled kernel: the compiled kernel must get exactly the arguments Triton's binder
would, a new launch key must go through the autotuner, and ops' launch keys must change with
everything Triton specializes on."""
from __future__ import annotations

import inspect
import sys
import types

import pytest
import torch

from lattnbench.kernels.common.launch import LazyLauncher, Launcher, PlainLauncher


def kernel_fn(q, k, g, T, H, scale, T_BUCKET, o, KD, FLAG, BT, BV, EXTRA=0):
    """Signature shaped like the real kernels: tensors, ints, a float, constexprs, tuned meta."""


class Config:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def all_kwargs(self):
        return {**self.kwargs, "num_warps": 4, "num_stages": 2}


class Compiled:
    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.log.append(("compiled", grid, args, stream))


class Plain:
    fn = staticmethod(kernel_fn)

    def __init__(self, log, fail=False):
        self.log, self.fail, self.warmups = log, fail, 0

    def warmup(self, *args, grid, **kw):
        self.warmups += 1
        if self.fail:
            raise TypeError("this Triton has no warmup like that")
        return Compiled(self.log)

    def __getitem__(self, grid):
        return lambda *args, **kw: self.log.append(("plain", grid, args, kw))


class Autotuned:
    keys = ["KD", "T_BUCKET"]

    def __init__(self, log, meta):
        self.log, self.best_config = log, Config(**meta)

    def __getitem__(self, grid):
        return lambda *args, **kw: self.log.append(("autotuned", grid(self.best_config.kwargs), args, kw))


def make(fail=False, interp=False):
    log: list = []
    rng = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    meta = {"BT": int(16 * torch.randint(1, 5, (), generator=rng)), "BV": int(16 * torch.randint(1, 5, (), generator=rng))}
    mod = types.SimpleNamespace(auto=None if interp else Autotuned(log, meta), plain=Plain(log, fail))
    return Launcher(mod, "auto", "plain", {"BT": 32, "BV": 32}), mod, log, meta


def args_for(t=64, dtype=torch.float32, offset=0):
    q = torch.randn(1 + t * 4 + offset, dtype=dtype)[offset:]
    k, o = torch.randn_like(q), torch.empty_like(q)
    g = torch.rand(3) - 1
    return (q, k, g, t, 3, float(torch.rand(())), 2, o)


KW = {"KD": 64, "FLAG": True}
GRID = lambda meta: (128 // meta["BV"], 6)  # noqa: E731


def spec_of(kw, asked=None):
    def spec():
        if asked is not None:
            asked.append(1)
        return GRID, dict(kw)
    return spec


def test_second_call_goes_to_the_compiled_kernel_with_bound_arguments(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, meta = make()
    first, second, asked = args_for(), args_for(), []
    launch("key", first, spec_of(KW, asked))
    launch("key", second, spec_of(KW, asked))
    assert [e[0] for e in log] == ["autotuned", "compiled"] and launch.fast_launches == 1
    assert len(asked) == 1  # a known key builds no grid and no keywords
    bound = inspect.signature(kernel_fn).bind(*second, **KW, **meta)
    bound.apply_defaults()
    _, grid, passed, stream = log[1]
    assert stream is None
    assert grid == (128 // meta["BV"], 6, 1)
    assert len(passed) == len(bound.arguments)
    assert all(a is b or a == b for a, b in zip(passed, bound.arguments.values()))


def test_a_new_key_goes_through_the_autotuner(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, meta = make()
    launch(("a", 1), args_for(), spec_of(KW))
    launch(("a", 2), args_for(t=70), spec_of({**KW, "FLAG": False}))
    assert [e[0] for e in log] == ["autotuned", "autotuned"]
    assert log[1][3] == {**KW, "FLAG": False}
    launch(("a", 2), args_for(t=70), spec_of(KW))
    assert log[-1][0] == "compiled"
    assert mod.plain.warmups == 2


def test_env_var_turns_the_fast_path_off(monkeypatch):
    monkeypatch.setenv("LIGHTNING_TRITON_FAST_LAUNCH", "0")
    launch, mod, log, _ = make()
    for _ in range(3):
        launch("key", args_for(), spec_of(KW))
    assert [e[0] for e in log] == ["autotuned"] * 3 and mod.plain.warmups == 0


def test_unknown_triton_falls_back_once(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make(fail=True)
    for _ in range(3):
        launch("key", args_for(), spec_of(KW))
    assert [e[0] for e in log] == ["autotuned"] * 3 and mod.plain.warmups == 1


def test_plain_launcher_reuses_the_compiled_kernel_with_the_callers_keywords(monkeypatch):
    """A kernel without an autotuner (Gluon's): the first call goes through its own launch with
    every keyword (launch options too), the compile is asked for with the same ones, and later
    calls reach the compiled kernel with the kernel's parameters bound, options left out."""
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    log: list = []
    mod = types.SimpleNamespace(plain=Plain(log))
    warm_kw: list = []
    mod.plain.warmup = lambda *a, grid, **kw: (warm_kw.append(kw), Compiled(log))[1]
    launch = PlainLauncher(mod, "plain")
    bv = int(16 * torch.randint(1, 5, ()))
    kw = {**KW, "BT": 64, "BV": bv, "num_warps": 4, "maxnreg": 168}
    grid = lambda meta: (128 // bv, 6)  # noqa: E731
    first, second = args_for(), args_for()
    launch("key", first, lambda: (grid, dict(kw)))
    launch("key", second, lambda: (grid, dict(kw)))
    assert [e[0] for e in log] == ["plain", "compiled"] and log[0][3] == kw
    assert warm_kw == [kw]
    bound = inspect.signature(kernel_fn).bind(*second, **{n: kw[n] for n in ("KD", "FLAG", "BT", "BV")})
    bound.apply_defaults()
    _, grid_used, passed, _ = log[1]
    assert grid_used == (128 // bv, 6, 1)
    assert len(passed) == len(bound.arguments)
    assert all(a is b or a == b for a, b in zip(passed, bound.arguments.values()))



def test_the_lazy_launcher_imports_its_module_at_the_first_launch(monkeypatch):
    """Made before its module exists (the Gluon modules must not load at import), it imports the
    module at its first launch, once, and then launches as a PlainLauncher does."""
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    log: list = []
    launch = LazyLauncher(".kmod", "lazy_launch_pkg", "plain")
    mod = types.ModuleType("lazy_launch_pkg.kmod")
    mod.plain = Plain(log)
    mod.plain.warmup = lambda *a, grid, **kw: Compiled(log)
    monkeypatch.setitem(sys.modules, "lazy_launch_pkg", types.ModuleType("lazy_launch_pkg"))
    monkeypatch.setitem(sys.modules, "lazy_launch_pkg.kmod", mod)
    kw = {**KW, "BT": 64, "BV": 32}
    grid = lambda meta: (4, 6)  # noqa: E731
    launch("key", args_for(), lambda: (grid, dict(kw)))
    monkeypatch.delitem(sys.modules, "lazy_launch_pkg.kmod")  # a second import would now fail
    launch("key", args_for(), lambda: (grid, dict(kw)))
    assert [e[0] for e in log] == ["plain", "compiled"]

def test_interpreter_runs_the_plain_kernel_with_the_fixed_config():
    launch, mod, log, _ = make(interp=True)
    launch("key", args_for(), spec_of(KW))
    kind, grid, _, kw = log[0]
    assert kind == "plain" and grid == (4, 6) and kw == {**KW, "BT": 32, "BV": 32}


def test_stream_reaches_the_compiled_kernel(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make()
    launch("key", args_for(), spec_of(KW), stream=1234)
    launch("key", args_for(), spec_of(KW), stream=1234)
    assert [e[0] for e in log] == ["autotuned", "compiled"]
    assert log[1][3] == 1234


def test_runner_without_stream_keyword_is_retried_once(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make()

    class OldCompiled(Compiled):
        def __getitem__(self, grid):
            return lambda *args: self.log.append(("compiled", grid, args, None))
    mod.plain.warmup = lambda *a, grid, **kw: OldCompiled(log)
    for _ in range(3):
        launch("key", args_for(), spec_of(KW), stream=99)
    assert [e[0] for e in log] == ["autotuned", "compiled", "compiled"] and not launch.stream_kw


# ---- ops' launch keys: whatever Triton specializes on must change them ---------------------------

def _fwd_keys(monkeypatch, **change):
    """The forward launch key of a small call, and of the same call with one thing changed."""
    from lattnbench.kernels.lightning.triton import lightning_attn_triton
    from lattnbench.kernels.lightning.triton import ops as tl_ops

    keys = []
    monkeypatch.setattr(type(tl_ops._FWD_LAUNCH), "__call__", lambda self, key, args, spec, stream=None: keys.append(key))

    def call(t=64, dtype=torch.float32, offset=0, h0=False, reverse=False, cu=None, final=True, hkv=2):
        q = torch.randn(t * 32 + 1, dtype=dtype)[offset:offset + t * 32].view(1, t, 2, 16)
        k = torch.randn(1, t, hkv, 16, dtype=dtype)
        v = torch.randn(1, t, hkv, 16, dtype=dtype)
        s0 = torch.randn(1 if cu is None else len(cu) - 1, 2, 16, 16) if h0 else None
        lightning_attn_triton(q, k, v, initial_state=s0, reverse=reverse, cu_seqlens=cu, output_final_state=final)

    call()
    call(**change)
    return keys


@pytest.mark.parametrize("change", [
    dict(t=65), dict(t=1), dict(dtype=torch.float16), dict(offset=1), dict(h0=True), dict(reverse=True),
    dict(cu=torch.tensor([0, 30, 64])), dict(cu=torch.tensor([0, 30, 64], dtype=torch.int32)),
    dict(final=False), dict(hkv=1)])
def test_ops_launch_key_follows_every_specialization(change, monkeypatch):
    first, second = _fwd_keys(monkeypatch, **change)
    assert first != second


def test_ops_launch_key_of_the_same_call_repeats(monkeypatch):
    first, second = _fwd_keys(monkeypatch)
    assert first == second
