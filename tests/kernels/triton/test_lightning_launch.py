"""The lean launch path (kernels/triton/lightning/launch.py), with stand-ins for Triton's autotuned
kernel and compiled kernel: the compiled kernel must get exactly the arguments Triton's binder
would, and any change Triton specializes on must miss the cache."""
from __future__ import annotations

import inspect
import types

import pytest
import torch

from lattnbench.kernels.triton.lightning.launch import Launcher


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


def test_second_call_goes_to_the_compiled_kernel_with_bound_arguments(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, meta = make()
    first, second = args_for(), args_for()
    launch(GRID, first, KW)
    launch(GRID, second, KW)
    assert [e[0] for e in log] == ["autotuned", "compiled"] and launch.fast_launches == 1
    bound = inspect.signature(kernel_fn).bind(*second, **KW, **meta)
    bound.apply_defaults()
    _, grid, passed, stream = log[1]
    assert stream is None
    assert grid == (128 // meta["BV"], 6, 1)
    assert len(passed) == len(bound.arguments)
    assert all(a is b or a == b for a, b in zip(passed, bound.arguments.values()))


@pytest.mark.parametrize("change", ["T not divisible by 16", "T equal to 1", "dtype", "misaligned",
                                    "constexpr", "tuning key", "int64 T"])
def test_a_new_specialization_misses_the_cache(change, monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, meta = make()
    kw = dict(KW)
    launch(GRID, args_for(), kw)
    other = {"T not divisible by 16": lambda: args_for(t=70), "T equal to 1": lambda: args_for(t=1),
             "dtype": lambda: args_for(dtype=torch.float16), "misaligned": lambda: args_for(offset=1),
             "constexpr": lambda: args_for(), "tuning key": lambda: args_for(), "int64 T": lambda: args_for()}[change]()
    if change == "constexpr":
        kw["FLAG"] = False
    if change == "tuning key":
        other = other[:6] + (3,) + other[7:]
    if change == "int64 T":
        other = other[:3] + (2**31 + 16,) + other[4:]
    launch(GRID, other, kw)
    assert [e[0] for e in log] == ["autotuned", "autotuned"]
    launch(GRID, other, kw)
    assert log[-1][0] == "compiled"


def test_env_var_turns_the_fast_path_off(monkeypatch):
    monkeypatch.setenv("LIGHTNING_TRITON_FAST_LAUNCH", "0")
    launch, mod, log, _ = make()
    for _ in range(3):
        launch(GRID, args_for(), KW)
    assert [e[0] for e in log] == ["autotuned"] * 3 and mod.plain.warmups == 0


def test_unknown_triton_falls_back_once(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make(fail=True)
    for _ in range(3):
        launch(GRID, args_for(), KW)
    assert [e[0] for e in log] == ["autotuned"] * 3 and mod.plain.warmups == 1


def test_interpreter_runs_the_plain_kernel_with_the_fixed_config():
    launch, mod, log, _ = make(interp=True)
    launch(GRID, args_for(), KW)
    kind, grid, _, kw = log[0]
    assert kind == "plain" and grid == (4, 6) and kw == {**KW, "BT": 32, "BV": 32}


def test_caller_vouched_alignment_and_stream(monkeypatch):
    """aligned=True skips the per-tensor alignment in the key (a separate cache entry from the
    checked one); the stream reaches the compiled kernel."""
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make()
    launch(GRID, args_for(), KW, aligned=True)
    launch(GRID, args_for(), KW, aligned=True, stream=1234)
    launch(GRID, args_for(), KW)  # unchecked call: its own key, so Triton's path once more
    assert [e[0] for e in log] == ["autotuned", "compiled", "autotuned"]
    assert log[1][3] == 1234


def test_runner_without_stream_keyword_is_retried_once(monkeypatch):
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    launch, mod, log, _ = make()

    class OldCompiled(Compiled):
        def __getitem__(self, grid):
            return lambda *args: self.log.append(("compiled", grid, args, None))
    mod.plain.warmup = lambda *a, grid, **kw: OldCompiled(log)
    for _ in range(3):
        launch(GRID, args_for(), KW, aligned=True, stream=99)
    assert [e[0] for e in log] == ["autotuned", "compiled", "compiled"] and not launch.stream_kw
