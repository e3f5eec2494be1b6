"""Test-wide set-up: Triton kernels run in the interpreter on machines without a GPU.

TRITON_INTERPRET must be set before any ``@triton.jit`` kernel is defined, so it is set here,
before the test modules import the kernels.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
