"""``lattnbench memory``: peak memory above the inputs, fwd and fwd+bwd."""
from __future__ import annotations

import typer

from lattnbench.commands import axes

EXAMPLE = """Examples:

  lattnbench memory --n 512..32768 --batch 4 --heads 32 --dim 128 --dtype bf16 --kernels 'softmax/*'

  lattnbench memory -k 'lightning/*' --mode fwdbwd
"""


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLE)
    def memory(
        n: axes.N = None, batch: axes.BATCH = None, heads: axes.HEADS = None, kv_heads: axes.KV_HEADS = None,
        dim: axes.DIM = None, dim_v: axes.DIM_V = None, dtype: axes.DTYPE = None,
        kernels: axes.KERNELS = None, kernel: axes.PLUGIN = None, mode: axes.MEMORY_MODE = "fwd,fwdbwd",
        device: axes.DEVICE = "auto", out: axes.OUT = None, json_: axes.JSON = False,
        decay: axes.DECAY = "alibi", gate_norm: axes.GATE_NORM = None, g_dtype: axes.G_DTYPE = None,
        resume: axes.RESUME = False, isolate: axes.ISOLATE = "auto",
        point_timeout: axes.POINT_TIMEOUT = "0",
        world_size: axes.WORLD_SIZE = None,
    ) -> None:
        """Peak memory above the live inputs, in MB, for fwd (no autograd graph) and fwd+bwd.

        torch: torch.cuda.max_memory_allocated after resetting the peak once the inputs exist
        (CUDA only; the CPU allocator keeps no peak, so torch kernels on CPU are 'unsupported').
        JAX: XLA's compiled memory analysis (temporaries + outputs). Each row records its method.
        Defaults as for speed: the seed shape on a GPU, a small fp32 sweep on a CPU.
        """
        from lattnbench.commands.sweep import SweepOptions, sweep_command

        sweep_command(SweepOptions(
            "memory", n=n, batch=batch, heads=heads, kv_heads=kv_heads, dim=dim, dim_v=dim_v, dtype=dtype,
            kernels=kernels, plugins=kernel, mode=mode, device=device, out=out, as_json=json_, decay=decay,
            resume=resume, budget=0.0, repeat=1, isolate=isolate, point_timeout=point_timeout,
            world_size=world_size, gate_norm=gate_norm, g_dtype=g_dtype))
