"""The kernel tests mirror kernels/ (tests/kernels/<family>/<backend>/). Test helpers several of
those folders share sit here (``triton_testutil``, ``jax_testutil``): this conftest puts this folder
on sys.path (pytest's prepend import mode), so ``from jax_testutil import ...`` works from any of
them, a single test file run alone included."""
