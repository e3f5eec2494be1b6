"""Static (compile-only) metrics of the bundled kernels: what the compilers make of them, no GPU.

``triton_aot`` compiles the Triton kernels ahead of time for sm_90 and reads registers, spills,
shared memory and PTX instruction counts; ``ptx`` parses the PTX; ``xla`` reads XLA's cost and
memory analyses of the JAX kernels on the CPU backend; ``results`` writes and loads the
``lattnbench.static/1`` file that ``lattnbench gate --static`` compares.
"""
