"""The bundled kernel set (imported as ``lattnbench.kernels``).

A library: nothing here imports the harness. Grouped by operator, then backend:
``lightning/{triton,gluon,parallel}``, ``gla/triton``, ``gdn/{naive.py,jax}``; shared by the
families: ``common`` (host and JAX helpers), ``jax`` (the JAX kernels of the general recurrence:
Lightning, GLA), ``naive`` (the torch references of the general recurrence) and ``decay``.
"""
