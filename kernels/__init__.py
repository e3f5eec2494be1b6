"""The bundled kernel set (imported as ``lattnbench.kernels``).

A library: nothing here imports the harness. Each op has a ``naive`` reference beside it.
"""
