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

# runs without --out, the tuning store and JAX's compile cache write under the user cache: keep
# the tests' in a directory of their own
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="lattnbench-test-cache-")
