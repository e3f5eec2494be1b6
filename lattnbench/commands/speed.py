"""``lattnbench speed``: time fwd / bwd / fwd+bwd over a sweep."""
from __future__ import annotations

import typer

from lattnbench.commands import axes
from lattnbench.commands.sweep import finish, guarded, open_writer, pick_kernels, run_points, setup
from lattnbench.commands.tables import speed_tables
from lattnbench.supervise import POINT_TIMEOUT

EXAMPLE = """Examples:

  lattnbench speed                                   # the machine's default sweep

  lattnbench speed --n 512..32768 --batch 4 --heads 32 --dim 128 --dtype bf16 --kernels 'softmax/*'

  lattnbench speed -k lightning/triton,softmax/sdpa-flash --mode fwd,fwdbwd --json > run.json
"""


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLE)
    def speed(
        n: axes.N = None, batch: axes.BATCH = None, heads: axes.HEADS = None, kv_heads: axes.KV_HEADS = None,
        dim: axes.DIM = None, dim_v: axes.DIM_V = None, dtype: axes.DTYPE = None,
        kernels: axes.KERNELS = None, kernel: axes.PLUGIN = None, mode: axes.MODE = "fwd,fwdbwd",
        device: axes.DEVICE = "auto", out: axes.OUT = None, json_: axes.JSON = False,
        decay: axes.DECAY = "alibi", resume: axes.RESUME = False,
        budget: float = typer.Option(0.5, min=0.0, help="Seconds of timed repetitions per point (at least 5 reps)."),
        point_timeout: POINT_TIMEOUT = "0",
    ) -> None:
        """Time kernels (median ms with p20–p80 and % of the roofline floor on GPU).

        Warm-up runs until compilation and autotuning are done; each repetition is timed with
        CUDA events (torch) or block_until_ready (JAX), with an L2 flush before it on GPU.
        Defaults: on a GPU the seed README's shape (B4 H32 D128 bf16, n 512..32768); on a CPU
        a small fp32 sweep. Exit 1 when a point errors or returns NaN/Inf.
        """
        _run("speed", n, batch, heads, kv_heads, dim, dim_v, dtype, kernels, kernel, mode, device, out,
             json_, decay, resume, budget, point_timeout)


def _run(command, n, batch, heads, kv_heads, dim, dim_v, dtype, kernels, plugins, mode, device, out,
         as_json, decay, resume, budget, point_timeout="0") -> None:
    from lattnbench.env import collect
    from lattnbench.measure import Sweeper
    from lattnbench.supervise import heartbeat, parse_timeout, supervise

    timeout_s = parse_timeout(point_timeout)
    dev, reg = setup(device, plugins)
    defaults = axes.GPU_DEFAULTS if dev == "cuda" else axes.CPU_DEFAULTS
    cases = guarded(lambda: axes.cases(defaults, n, batch, heads, kv_heads, dim, dim_v, dtype, decay))
    chosen = guarded(lambda: pick_kernels(reg, kernels, dev, families=("lightning", "softmax")))
    want = guarded(lambda: axes.modes(mode))
    if command == "memory":
        want = [m for m in want if m != "bwd"] or ["fwd"]
    env = collect()
    writer = open_writer(out, command, env, resume)
    supervise(writer.path, timeout_s)
    ceilings = writer.doc.get("ceilings") or {}
    if dev == "cuda" and command == "speed" and not ceilings:
        from lattnbench.roofline import measure_ceilings
        ceilings = measure_ceilings(dev)
        writer.set_ceilings(ceilings)
    sweeper = Sweeper(dev, writer.add, ceilings, budget_s=budget,
                      skip=frozenset(writer.done_keys()) if resume else frozenset())
    point = sweeper.speed if command == "speed" else sweeper.memory
    metric = "time_ms" if command == "speed" else "peak_mb"

    def one(entry, case):
        heartbeat(entry, case, dev, want, metric)
        return point(entry, case, want)

    run_points(command, chosen, cases, one)
    from lattnbench.commands.tables import memory_tables
    finish(writer, as_json, speed_tables if command == "speed" else memory_tables)
