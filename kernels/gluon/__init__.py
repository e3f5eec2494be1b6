"""Gluon kernels (Triton's lower-level dialect: explicit layouts, TMA, async wgmma, warp
specialization), torch autograd."""
