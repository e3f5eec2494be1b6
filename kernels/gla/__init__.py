"""Gated Linear Attention (a data-dependent gate g_t ∈ R^D per token and head), by backend:
``triton`` (registered as ``gla/triton``, with its jax-triton bridge). Its JAX forms are the
shared ``lattnbench.kernels.jax`` (``recurrent_gla``, ``impl=``); its naive reference is
``lattnbench.kernels.naive.torch_ref.recurrent_naive`` (g=...).
"""
