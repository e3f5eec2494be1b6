"""Lightning Attention (one log decay γ_h per head), by backend: ``triton`` (registered as
``lightning/triton``), ``gluon`` (``lightning/gluon``, Hopper) and ``parallel`` (sequence-parallel,
torch.distributed and JAX ``shard_map``). Its JAX forms are the shared ``lattnbench.kernels.jax``
(``impl=``); its naive references are ``lattnbench.kernels.naive.torch_ref`` and
``lattnbench.kernels.jax.naive``.

Backends of the family may import each other's public names; nothing here imports another
family except through ``lattnbench.kernels.common`` (and the allow-list in
tests/lattnbench/test_layers.py).
"""
