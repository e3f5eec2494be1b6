"""lattnbench: how fast, how much memory, and is it right — for linear-attention kernels."""
__version__ = "0.1.0"
