"""The sweep axes shared by ``speed``, ``memory`` and ``check-grad``: options, defaults, parsing."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

import typer

from lattnbench.spec import (DECAYS, DEFAULT_G_DTYPE, DEFAULT_GATE_NORM, DTYPES, G_DTYPES, MODES, Case, SpecError,
                             expand, parse_choices, parse_floats, parse_range, with_world_sizes)

RANGE_HELP = "range grammar: 512..32768 (doubling), 512..4096:x2, 1000..4000:+1000, 512,1000,4096"

N = Annotated[str | None, typer.Option("--n", "-n", help=f"Sequence lengths; {RANGE_HELP}.", show_default=False)]
BATCH = Annotated[str | None, typer.Option("--batch", "-b", help="Batch sizes (range grammar).", show_default=False)]
HEADS = Annotated[str | None, typer.Option("--heads", help="Query heads (range grammar).", show_default=False)]
KV_HEADS = Annotated[str | None, typer.Option(
    "--kv-heads", help="KV heads for GQA (default: = heads); heads must be a multiple.", show_default=False)]
DIM = Annotated[str | None, typer.Option("--dim", "-d", help="q/k head dim D (range grammar).", show_default=False)]
DIM_V = Annotated[str | None, typer.Option("--dim-v", help="v head dim E (default: = D).", show_default=False)]
DTYPE = Annotated[str | None, typer.Option("--dtype", help=f"Comma list of {', '.join(DTYPES)}.", show_default=False)]
KERNELS = Annotated[list[str] | None, typer.Option(
    "--kernels", "-k", help="Kernel names or globs, e.g. 'lightning/*,softmax/sdpa-flash' (default: the "
    "available non-reference kernels). See `lattnbench list`.", show_default=False)]
#: the filters of the views (report, plot): which kernels and lengths of a results file to show
ONLY_KERNELS = Annotated[list[str] | None, typer.Option(
    "--kernels", "-k", help="Only these kernels: names or globs, comma separated or repeated.", show_default=False)]
ONLY_N = Annotated[str | None, typer.Option(
    "--n", "-n", help="Only these sequence lengths (range grammar: 512..8192, 1024,4096).", show_default=False)]


def plugin_specs(values: list[str] | None) -> list[str] | None:
    """``--kernel`` values, repeated or comma-separated, as one list."""
    specs = [s.strip() for v in values or () for s in v.split(",") if s.strip()]
    return specs or None


PLUGIN = Annotated[list[str] | None, typer.Option(
    "--kernel", help="Add your own kernel: package.module:function, repeated or comma-separated "
    "(see docs/plugins.md).", show_default=False, callback=plugin_specs)]
MODE = Annotated[str, typer.Option("--mode", "-m", help=f"Comma list of {', '.join(MODES)}.")]
MEMORY_MODE = Annotated[str, typer.Option(
    "--mode", "-m", help="Comma list of fwd, fwdbwd (a backward's peak is inside fwd+bwd's).")]
DEVICE = Annotated[str, typer.Option("--device", help="auto (CUDA when present), cuda or cpu.")]
OUT = Annotated[str | None, typer.Option(
    "--out", "-o", help="Results JSON path (default: ~/.cache/lattnbench/results/<machine>/<command>-<time>.json, "
    "or under $LATTNBENCH_RESULTS_DIR).", show_default=False)]
JSON = Annotated[bool, typer.Option("--json", help="Print the results document on stdout; progress goes to stderr.")]
DECAY = Annotated[str, typer.Option(
    "--decay", help=f"Lightning's per-head decay, a comma list of {', '.join(DECAYS)} (strong: every head at "
    "the seeds' steepest slope, 8(H-1)/H, or 1 if steeper). GLA and softmax kernels run once whatever it is.")]
GATE_NORM = Annotated[str | None, typer.Option(
    "--gate-norm", metavar="NORMS", help=f"GLA gates g = logsigmoid(x)/NORM, x ~ N(0,1); a comma list such as "
    f"16,1,0.1 (default {DEFAULT_GATE_NORM:g}, the GLA paper's; 1 and 0.1 are fla's test recipes' strong "
    "gates). Lightning and softmax kernels run once whatever it is.", show_default=False)]
INPUT_SCALE = Annotated[str | None, typer.Option(
    "--input-scale", metavar="SCALES", help="Draw q, k, v ~N(0, s²): magnitude stress, a comma list such as "
    "1,10 (default 1; with --decay zero sums grow most).", show_default=False)]
G_DTYPE = Annotated[str | None, typer.Option(
    "--g-dtype", help=f"The dtype GLA gates are drawn in and handed to the kernel: a comma list of "
    f"{', '.join(G_DTYPES)} (default fp32).", show_default=False)]
SETTLE = Annotated[float | None, typer.Option(
    "--settle", min=0.0, help="Before each speed point, wait (at most 2 minutes) until the GPU is at or "
    "below this temperature in °C, so every point starts from the same thermal state (NVML; rows "
    "record settle_s and settle_temp_c).", show_default=False)]
BREAKDOWN = Annotated[bool, typer.Option(
    "--breakdown", help="Also profile each timed point (torch.profiler, after its timers): the time of "
    "every kernel one call launches, with its share; rows keep it as 'breakdown' and `lattnbench report` "
    "prints it. On a CPU it is each operator's host time.")]
RESUME = Annotated[bool, typer.Option("--resume", help="Skip points already in --out.")]
SEED = Annotated[int, typer.Option("--seed", min=0, help="Seed of the random inputs (>= 0).")]
ISOLATE = Annotated[str, typer.Option(
    "--isolate", help="Where points run: kernel (a fresh worker process per kernel, autotuning forgotten "
    "between its points), point (a fresh worker per point), none (this process). auto = kernel on a GPU, "
    "none on a CPU.")]
REPEAT = Annotated[int, typer.Option(
    "--repeat", min=1, max=100, help="Run the speed sweep R times, rotating the kernel order each run; rows "
    "report the median of the run medians and the spread across runs.")]
WORLD_SIZE = Annotated[str | None, typer.Option(
    "--world-size", "-P", help="Split each sequence over N ranks (range grammar: 1,2,4); only sequence-parallel "
    "kernels (lightning/triton-sp, -sp-ring, jax-sp) run above 1. The tool starts the ranks itself; under "
    "torchrun it is the launcher's WORLD_SIZE. See docs/sequence-parallel.md.", show_default=False)]
POINT_TIMEOUT = Annotated[str, typer.Option(
    "--point-timeout", metavar="SECONDS",
    help="Give up on a point (a hung kernel) after this many seconds: it is recorded as 'timeout' and the "
    "sweep goes on in a new worker process. 0 = off.")]
CHECK_JOBS = Annotated[int, typer.Option(
    "--jobs", "-j", min=1, max=64,
    help="Gradient-check workers at once (one per kernel, after all timing; they time nothing, so they may "
    "share a GPU). Needs worker isolation (kernel or point).")]


def parse_timeout(text: str | float | None) -> float:
    """``--point-timeout`` → seconds (0 = off); a one-line usage error (exit 2) otherwise."""
    import math

    from lattnbench.commands.common import die

    if text is None:
        return 0.0
    try:
        value = float(text)
    except (TypeError, ValueError):
        die(f"bad --point-timeout {text!r}: give seconds, e.g. 600 (0 = off)")
    if not math.isfinite(value) or value < 0:
        die(f"bad --point-timeout {text!r}: give a finite number of seconds >= 0 (0 = off)")
    return value


@dataclass
class Defaults:
    """Per-command, per-device defaults (GPU: the seed README's shape; CPU: small and quick)."""

    n: str
    batch: str
    heads: str
    dim: str
    dtype: str


GPU_DEFAULTS = Defaults(n="512..32768", batch="4", heads="32", dim="128", dtype="bf16")
CPU_DEFAULTS = Defaults(n="256..1024", batch="1", heads="4", dim="64", dtype="fp32")
CHECK_GPU = Defaults(n="256,1000", batch="2", heads="4", dim="64", dtype="fp32,bf16")
CHECK_CPU = Defaults(n="64,100", batch="2", heads="4", dim="32", dtype="fp32")


def cases(defaults: Defaults, n, batch, heads, kv_heads, dim, dim_v, dtype, decay: str,
          initial_state: tuple[bool, ...] = (False,), reverse: bool = False,
          varlen: str | None = None, input_scale: str | None = None, world_size: str | None = None,
          gate_norm: str | None = None, g_dtype: str | None = None) -> list[Case]:
    """Every case of the sweep, world size outermost, then shape, then n; raises SpecError on bad input."""
    pick = lambda given, default: default if given is None else given  # noqa: E731 - "" is an error
    ns = parse_range(pick(n, defaults.n), "--n")
    bs = parse_range(pick(batch, defaults.batch), "--batch")
    hs = parse_range(pick(heads, defaults.heads), "--heads")
    ds = parse_range(pick(dim, defaults.dim), "--dim")
    dvs = None if dim_v is None else parse_range(dim_v, "--dim-v")
    kvs = None if kv_heads is None else parse_range(kv_heads, "--kv-heads")
    dts = parse_choices(pick(dtype, defaults.dtype), DTYPES, "dtype")
    lengths = parse_lengths(varlen) if varlen else None
    decays = parse_choices(decay, DECAYS, "decay")
    norms = parse_floats(gate_norm, "--gate-norm") if gate_norm is not None else [DEFAULT_GATE_NORM]
    g_dtypes = parse_choices(g_dtype, G_DTYPES, "g dtype") if g_dtype is not None else [DEFAULT_G_DTYPE]
    scales = parse_floats(input_scale, "--input-scale", "1,10") if input_scale is not None else [1.0]
    return with_world_sizes(expand(ns, bs, hs, kvs, ds, dvs, dts, decays, initial_state, reverse, lengths, scales,
                                   norms, g_dtypes),
                            world_sizes(world_size))


def world_sizes(text: str | None) -> list[int]:
    """``--world-size``: under torchrun the launcher's WORLD_SIZE (a different value is an error)."""
    from lattnbench.runner.ranks import under_torchrun

    if under_torchrun():
        launched = int(os.environ["WORLD_SIZE"])
        if text is not None and parse_range(text, "--world-size") != [launched]:
            raise SpecError(f"--world-size {text} under torchrun, which started {launched} ranks")
        return [launched]
    return parse_range(text or "1", "--world-size")


def parse_lengths(text: str) -> list[int]:
    """``--varlen 60,1,37``: packed sequence lengths, in order (not sorted, repeats allowed)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecError(f"bad --varlen {text!r}: give sequence lengths such as 60,1,37") from None
    if not values or any(v <= 0 for v in values):
        raise SpecError(f"bad --varlen {text!r}: lengths must be positive")
    return values


def modes(text: str) -> list[str]:
    return parse_choices(text, MODES, "mode")
