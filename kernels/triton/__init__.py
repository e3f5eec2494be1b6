"""Triton kernels (torch autograd)."""
