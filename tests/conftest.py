"""Test-wide set-up: Triton kernels run in the interpreter on machines without a GPU, and the
user cache is a temporary directory.

TRITON_INTERPRET must be set before any ``@triton.jit`` kernel is defined, so it is set here,
at configure time, before the test modules import the kernels.
"""
import os
import sys
import tempfile

# One intra-op thread per process, set before torch loads its OpenMP runtime: the suite runs an
# xdist worker per core and its tests start CLI processes beside them, so per-process thread pools
# (torch's OpenMP, the BLAS ones numpy uses) oversubscribe the cores and their threads spin-wait on
# each other (an in-process CPU speed sweep takes 3x the time with two threads under that load).
# The CLI processes and their workers inherit it through the environment.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# runs without --out and the tuning store write under the user cache: keep the tests' in a
# directory of their own
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="lattnbench-test-cache-")

# JAX's persistent compile cache, shared by the test workers and the CLI processes they start:
# many CLI tests compile the same JAX kernels at the same small shapes, each in a fresh process.
# An entry is keyed by the compiled program, so a changed kernel compiles anew.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), f"lattnbench-test-jax-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

# Bytecode caching on, for the xdist workers and every CLI process they start, whatever the shell
# set (PYTHONDONTWRITEBYTECODE): the suite starts a few hundred Python processes that import the
# same project modules and would compile each one's source anew, and pytest rewrites the test
# modules' asserts again in every worker. The caches are __pycache__ folders, which git ignores.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config):
    """The Triton interpreter where torch sees no GPU. The xdist controller runs no test and skips
    it: importing torch there (some 1.5 s) would hold back the start of every worker."""
    distributing = (getattr(config.option, "dist", "no") != "no" and getattr(config.option, "tx", None)
                    and not config.option.collectonly)  # xdist's own test for starting workers
    if distributing and "PYTEST_XDIST_WORKER" not in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
