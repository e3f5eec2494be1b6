"""Misbehaving plugin kernels for the reliability tests: each fails in one way a real kernel can.

Use with ``--kernel hang_kernels:NAME`` and ``tests/lattnbench`` on the import path.
"""
import os
import signal
import sys
import time

import torch

from lattnbench.kernels.naive.torch_ref import lightning_naive


def hang(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """A kernel that never returns (a hung GPU kernel, a deadlocked compile)."""
    time.sleep(3600)
    return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


def nan(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Returns NaN in the output."""
    o, s = lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    return o * float("nan"), s


def boom(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Raises, as a failed compile or a bad launch does; the message has a second line."""
    raise RuntimeError("kernel launch failed: invalid argument\n(second line of details)")


def oom(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Raises torch's out-of-memory error."""
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def crash(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Takes the whole process down (the OOM killer, a segfault; SIGKILL leaves no core file)."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def abort(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Ends the process after a CUDA error's traceback and the hint CUDA prints after it."""
    sys.stderr.write("Traceback (most recent call last):\n  File \"kernel.py\", line 1, in <module>\n"
                     "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                     "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    sys.stderr.flush()
    os._exit(1)


hang.lattnbench_name = "plugin/hang"
nan.lattnbench_name = "plugin/nan"
boom.lattnbench_name = "plugin/boom"
oom.lattnbench_name = "plugin/oom"
crash.lattnbench_name = "plugin/crash"
abort.lattnbench_name = "plugin/abort"


def stall(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Never returns unless STALL_OFF is set: a run to interrupt, then to resume to the end."""
    if not os.environ.get("STALL_OFF"):
        time.sleep(3600)
    return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
