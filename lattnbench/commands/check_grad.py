"""``lattnbench check-grad``: outputs and gradients of every kernel against the fp64 reference."""
from __future__ import annotations

import typer

from lattnbench.commands import axes

EXAMPLE = """Examples:

  lattnbench check-grad                               # every available bundled kernel, small shapes

  lattnbench check-grad -k lightning/triton --dtype bf16 --n 1000 --dim 96 --dim-v 48

  lattnbench check-grad -k 'lightning/*' --varlen 60,1,37 --reverse
"""


def register(app: typer.Typer) -> None:
    @app.command("check-grad", epilog=EXAMPLE)
    def check_grad(
        n: axes.N = None, batch: axes.BATCH = None, heads: axes.HEADS = None, kv_heads: axes.KV_HEADS = None,
        dim: axes.DIM = None, dim_v: axes.DIM_V = None, dtype: axes.DTYPE = None,
        kernels: axes.KERNELS = None, kernel: axes.PLUGIN = None,
        device: axes.DEVICE = "auto", out: axes.OUT = None, json_: axes.JSON = False,
        decay: axes.DECAY = "random", gate_norm: axes.GATE_NORM = None, g_dtype: axes.G_DTYPE = None,
        tolerance: str = typer.Option("lattnbench", "--tolerance", help="Whose tolerance table judges each "
                                      "err: lattnbench (per dtype: fp32 1e-5, fp16 2e-3, bf16 1.5e-2) or fla "
                                      "(fla's tests: 0.005 for every tensor and dtype). Rows record it."),
        seed: axes.SEED = 0,
        initial_state: str = typer.Option("both", help="Run with an initial state: off, on or both."),
        reverse: bool = typer.Option(False, "--reverse", help="Run the recurrence backwards in time."),
        varlen: str | None = typer.Option(None, help="Packed sequences (batch 1), e.g. 60,1,37."),
        input_scale: axes.INPUT_SCALE = None,
        batch_rows: bool = typer.Option(False, "--batch-rows", help="Instead of the fp64 reference, check "
                                        "the first and last batch rows against themselves computed alone "
                                        "(no reference needed: sizes past 2^31 elements, offset overflow)."),
        resume: axes.RESUME = False, isolate: axes.ISOLATE = "auto", point_timeout: axes.POINT_TIMEOUT = "0",
        jobs: axes.CHECK_JOBS = 1,
        world_size: axes.WORLD_SIZE = None,
    ) -> None:
        """Error ratios of o, final state, dq, dk, dv, dh0 (and dg, dbeta) against the fp64 reference.

        err = RMS(x − ref)/RMS(ref), reference in fp64 from the same dtype-rounded inputs, random
        cotangents for o and the final state. PASS/FAIL per tensor from one tolerance table per
        dtype (README, "Tolerances"). Softmax kernels are checked against the naive softmax.
        Defaults: on a GPU B2 H4 D64 fp32+bf16, n 256,1000; on a CPU B2 H4 D32 fp32, n 64,100
        (the Triton kernel in the interpreter). Exit 1 when anything fails.
        """
        from lattnbench.commands.common import die
        from lattnbench.commands.sweep import (execute, finish, glob_note, guarded, open_writer, report_left_out,
                                               resolve_isolation, setup)
        from lattnbench.runner.select import distinct, family_applies, family_case, pick_kernels, runs_at
        from lattnbench.measure.tolerance import TOLERANCE_TABLES
        from lattnbench.views.tables import check_tables
        from lattnbench.env import collect
        from lattnbench.runner.plan import Task

        timeout_s = axes.parse_timeout(point_timeout)
        dev, reg = setup(device, kernel)
        where = resolve_isolation(isolate, dev)
        defaults = axes.CHECK_GPU if dev == "cuda" else axes.CHECK_CPU
        h0 = {"off": (False,), "on": (True,), "both": (False, True)}.get(initial_state)
        if h0 is None:
            die(f"bad --initial-state {initial_state!r}: choose off, on or both")
        cases = guarded(lambda: axes.cases(defaults, n, batch, heads, kv_heads, dim, dim_v, dtype, decay,
                                           initial_state=h0, reverse=reverse, varlen=varlen,
                                           input_scale=input_scale, world_size=world_size,
                                           gate_norm=gate_norm, g_dtype=g_dtype))
        if tolerance not in TOLERANCE_TABLES:
            die(f"bad --tolerance {tolerance!r}: choose {', '.join(TOLERANCE_TABLES)}")
        parallel = any(c.world_size > 1 for c in cases)
        chosen = guarded(lambda: pick_kernels(reg, kernels, dev, plugins=kernel, timing=False, parallel=parallel,
                                          note=glob_note))
        kind = "check-rows" if batch_rows else "check-grad"
        tasks = distinct([Task(kind, e.name, family_case(e, c), seed=seed, tolerance=tolerance)
                          for c in cases for e in chosen
                          if family_applies(e, c) and runs_at(e, c)], reg)
        report_left_out(reg, chosen, cases, tasks)
        from lattnbench.runner.invocation import cli_args, resume_command

        args = cli_args([("--n", n), ("--batch", batch), ("--heads", heads), ("--kv-heads", kv_heads),
                         ("--dim", dim), ("--dim-v", dim_v), ("--dtype", dtype), ("--kernels", kernels),
                         ("--kernel", kernel), ("--device", None if device == "auto" else device),
                         ("--decay", None if decay == "random" else decay), ("--gate-norm", gate_norm),
                         ("--g-dtype", g_dtype), ("--tolerance", None if tolerance == "lattnbench" else tolerance),
                         ("--seed", seed or None),
                         ("--initial-state", None if initial_state == "both" else initial_state),
                         ("--reverse", reverse), ("--varlen", varlen),
                         ("--input-scale", input_scale), ("--batch-rows", batch_rows),
                         ("--isolate", None if isolate == "auto" else isolate),
                         ("--point-timeout", None if str(point_timeout) == "0" else point_timeout),
                         ("--jobs", None if jobs == 1 else jobs), ("--world-size", world_size)])
        writer = open_writer(out, "check-grad", collect(), resume, args)
        execute("check-grad", tasks, writer, reg, dev, isolate=where, point_timeout=timeout_s, repeat=1,
                plugins=kernel, resume=resume, check_jobs=jobs,
                again=resume_command("check-grad", args, writer.path))
        finish(writer, json_, check_tables)
