"""The kernel tests mirror kernels/ (tests/kernels/<family>/<backend>/). Test helpers several of
those folders share sit here (``triton_testutil``, ``jax_testutil``, ``gluon_emulator``): this
conftest puts this folder on sys.path (pytest's prepend import mode), so ``from jax_testutil import
...`` works from any of them, a single test file run alone included. Where Triton's interpreter
runs, it computes bf16 as the GPU does (``lattnbench.harness.interpreter_bf16``), and a jitted helper's
call skips the language patch its launch already made (``interpreter_calls``)."""
import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """bf16 in the interpreter (``interpreter_bf16``), once tests/conftest.py has chosen it: Triton's
    language must first be imported with TRITON_INTERPRET set, or its jitted helpers stay compiled
    ones the interpreter cannot call."""
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        from lattnbench.harness import interpreter_bf16, interpreter_calls

        interpreter_bf16.install()
        interpreter_calls.install()
