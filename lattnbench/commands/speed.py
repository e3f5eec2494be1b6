"""``lattnbench speed``: time fwd / bwd / fwd+bwd over a sweep."""
from __future__ import annotations

import typer

from lattnbench.commands import axes

EXAMPLE = """Examples:

  lattnbench speed                                   # the machine's default sweep

  lattnbench speed --n 512..32768 --batch 4 --heads 32 --dim 128 --dtype bf16 --kernels 'softmax/*'

  lattnbench speed -k lightning/triton,softmax/sdpa-flash --mode fwd,fwdbwd --repeat 3 --json > run.json

  lattnbench speed -k gla/triton --n 8192 --mode fwdbwd --breakdown   # and the time of each kernel
"""


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLE)
    def speed(
        n: axes.N = None, batch: axes.BATCH = None, heads: axes.HEADS = None, kv_heads: axes.KV_HEADS = None,
        dim: axes.DIM = None, dim_v: axes.DIM_V = None, dtype: axes.DTYPE = None,
        kernels: axes.KERNELS = None, kernel: axes.PLUGIN = None, mode: axes.MODE = "fwd,fwdbwd",
        device: axes.DEVICE = "auto", out: axes.OUT = None, json_: axes.JSON = False,
        decay: axes.DECAY = "alibi", gate_norm: axes.GATE_NORM = None, g_dtype: axes.G_DTYPE = None,
        resume: axes.RESUME = False,
        budget: float | None = typer.Option(None, min=0.0, help="Seconds of device-timer samples per point "
                                            "(at least 5 samples; the graph and latency timers get half as much "
                                            "each). Default: 0.25 on a GPU (as the seed-readme suite), 0.5 on a CPU.",
                                            show_default=False),
        repeat: axes.REPEAT = 1, isolate: axes.ISOLATE = "auto", point_timeout: axes.POINT_TIMEOUT = "0",
        world_size: axes.WORLD_SIZE = None, settle: axes.SETTLE = None, breakdown: axes.BREAKDOWN = False,
    ) -> None:
        """Time kernels: median ms with p20–p80 on the device timer, with graph and latency beside it.

        device: repetitions back to back, L2 flushed between them (as triton.testing.do_bench);
        graph: device time without host work (CUDA-graph replay); latency: one synchronised call,
        and host: the time to enqueue one call. Warm-up runs until compilation and autotuning are
        done (the first call's time is kept apart). On a GPU: the seed README's shape (B4 H32
        D128 bf16, n 512..32768), each kernel in its own worker process; on a CPU: a small fp32
        sweep in this process. Exit 1 when a point errors or returns NaN/Inf.
        """
        from lattnbench.commands.sweep import SweepOptions, sweep_command

        sweep_command(SweepOptions(
            "speed", n=n, batch=batch, heads=heads, kv_heads=kv_heads, dim=dim, dim_v=dim_v, dtype=dtype,
            kernels=kernels, plugins=kernel, mode=mode, device=device, out=out, as_json=json_, decay=decay,
            resume=resume, budget=budget, repeat=repeat, isolate=isolate, point_timeout=point_timeout,
            world_size=world_size, settle=settle, gate_norm=gate_norm, g_dtype=g_dtype, breakdown=breakdown))
