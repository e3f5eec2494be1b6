"""The harness layer: drives kernels through the adapters (the sweep engine, check-grad, memory fit).

Sits above ``lattnbench.measure`` (pure timing, clocks, tolerance, ceilings) and the adapters;
the runner and commands call into it.
"""
