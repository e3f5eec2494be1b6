"""Test-wide set-up: Triton kernels run in the interpreter on machines without a GPU, and the
user cache is a temporary directory.

TRITON_INTERPRET must be set before any ``@triton.jit`` kernel is defined, so it is set here,
before the test modules import the kernels.
"""
import os
import tempfile

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# runs without --out and the tuning store write under the user cache: keep the tests' in a
# directory of their own
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="lattnbench-test-cache-")

# JAX's persistent compile cache, shared by the test workers and the CLI processes they start:
# many CLI tests compile the same JAX kernels at the same small shapes, each in a fresh process.
# An entry is keyed by the compiled program, so a changed kernel compiles anew.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"lattnbench-test-jax-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
