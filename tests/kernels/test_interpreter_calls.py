"""A jitted helper's call inside an interpreted launch skips the language patch the launch already
made (``interpreter_calls``, installed by this folder's conftest): a kernel that calls a helper in
a loop patches the language once per launch, not once per call, computes what torch computes, and
leaves triton.language as it found it. On a GPU the same kernel runs compiled."""
from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _scaled_sum(x, w):
    return tl.sum(x * w, axis=0)


@triton.jit
def _calls_in_a_loop(x, y, N: tl.constexpr, CALLS: tl.constexpr):
    i = tl.arange(0, N)
    acc = tl.zeros([N], dtype=tl.float32)
    for c in range(CALLS):
        row = tl.load(x + c * N + i)
        acc += _scaled_sum(row[:, None], row[None, :] * 0.5)  # a helper call an iteration
    tl.store(y + i, acc)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's own path")
def test_a_helper_called_in_a_loop_patches_the_language_once_a_launch(monkeypatch):
    from triton.runtime import interpreter

    sweeps = []
    real = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a, **k: (sweeps.append(a[0]), real(*a, **k))[1])
    n = 8
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    counts = []
    builtin_sum = tl.sum
    for calls in (4, 40):
        x = torch.randn(calls, n, generator=gen)
        y = torch.full((n,), float("nan"))
        sweeps.clear()
        _calls_in_a_loop[(1,)](x, y, N=n, CALLS=calls)
        torch.testing.assert_close(y, (0.5 * x[:, :, None] * x[:, None, :]).sum(dim=(0, 1)), rtol=1e-5, atol=1e-5)
        counts.append(len(sweeps))
        assert tl.sum is builtin_sum  # restored after the launch
    # a launch's patch of its language modules (and at most one more where a helper's globals see
    # another), however many calls: without the install every call sweeps again (47 sweeps at 4
    # calls, 407 at 40)
    assert all(0 < count <= 12 for count in counts), counts

def test_on_the_gpu_the_same_kernel_runs_compiled():
    n, calls = 8, 3
    x = torch.arange(calls * n, dtype=torch.float32, device=DEV).reshape(calls, n) / 10
    y = torch.empty(n, device=DEV)
    _calls_in_a_loop[(1,)](x, y, N=n, CALLS=calls)
    torch.testing.assert_close(y, (0.5 * x[:, :, None] * x[:, None, :]).sum(dim=(0, 1)), rtol=1e-5, atol=1e-5)
