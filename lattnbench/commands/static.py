"""``lattnbench static``: compile-only metrics of every bundled kernel, for the static gate."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands.common import EXIT_FAIL, die, err, out

EXAMPLE = """Examples:

  lattnbench static                                   # table of every metric
  lattnbench static --out results/static/cpu.json     # write (or update) the CI baseline
  lattnbench static --only triton --json              # Triton rows only, as JSON
  lattnbench gate --static now.json --baseline results/static/cpu.json
"""

PARTS = ("all", "triton", "jax")


def static(
    out_file: Annotated[Optional[Path], typer.Option(
        "--out", help="Write the lattnbench.static/1 results file here.", show_default=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results document as JSON.")] = False,
    only: Annotated[str, typer.Option(help="Which kernels: all, triton or jax.")] = "all",
    workers: Annotated[Optional[int], typer.Option(
        help="Parallel compile processes (default: the CPU count).", show_default=False)] = None,
) -> None:
    """Compile every bundled kernel without running it and record what the compilers made of it.

    Triton: each default autotune config of the Lightning, GLA and gated delta rule launches, and
    the Gluon launches an sm_90 call takes by default (lightning/gluon's forward and backward, GLA's
    prep), compiled ahead of time for sm_90 at D=E=128 bf16 (no GPU needed): registers (a
    warp-specialized kernel's launch cap), spilled bytes, shared memory, PTX instructions in all and
    in the chunk loop, barriers in the chunk loop, mma/wgmma count. JAX: XLA's cost and
    memory analyses on the CPU backend, fwd and fwd+bwd, at small fixed shapes. Every row names
    its compiler versions.
    """
    if only not in PARTS:
        die(f"--only must be one of {', '.join(PARTS)}, got {only!r}")
    if workers is not None and workers < 1:
        die(f"--workers must be at least 1, got {workers}")
    from lattnbench.env import collect
    from lattnbench.static import results
    from lattnbench.static.collect import collect as collect_rows

    tri, xl = [], []
    if only in ("all", "triton"):
        try:
            import importlib

            from lattnbench.operators import family, names

            modules = [family(n).static_jobs for n in names() if family(n).static_jobs]
            tri = [job for m in modules for job in importlib.import_module(m).default_jobs()]
        except ImportError as exc:
            die(f"the Triton kernels cannot be compiled here: {exc}")
    if only in ("all", "jax"):
        try:
            import jax  # noqa: F401
        except ImportError as exc:
            die(f"the JAX kernels cannot be compiled here: {exc}")
        from lattnbench.static.xla import default_jobs as xla_jobs
        xl = xla_jobs()
    start = time.perf_counter()
    total = len(tri) + len(xl)
    done = [0]

    def progress(what: str) -> None:
        done[0] += 1
        if not json_out:
            err.print(f"[dim][{done[0]}/{total}] {what}[/]", highlight=False)

    try:
        rows = collect_rows(tri, xl, workers=workers, progress=progress)
    except Exception as exc:  # a kernel that no longer compiles: one line, and CI fails
        first = (str(exc).strip().splitlines() or [""])[0]
        die(f"a compile failed: {type(exc).__name__}: {first}", code=EXIT_FAIL)
    seconds = time.perf_counter() - start
    env = collect(with_gpu=False)
    env["static_seconds"] = round(seconds, 1)
    doc = results.document(rows, env)
    if out_file is not None:
        results.write(doc, out_file)
    if json_out:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    _table(doc)
    where = f", written to {out_file}" if out_file is not None else ""
    out.print(f"{len(rows)} rows from {total} compiles in {seconds:.0f} s{where}", highlight=False)


#: column headers of the metrics, in table order
HEADERS = {"registers": "regs", "spilled_bytes": "spill B", "shared_bytes": "smem B", "ptx_instructions": "ptx",
           "loop_instructions": "loop", "loop_barriers": "bar", "mma": "mma", "wgmma": "wgmma", "flops": "flops", "bytes_accessed": "bytes",
           "temp_bytes": "temp B", "output_bytes": "out B"}


def _num(v: float) -> str:
    """Compact: 147456 -> 147k, 25600776 -> 25.6M (the JSON keeps every digit)."""
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    return f"{v / 1e3:.3g}k" if v >= 1e4 else f"{v:g}"


#: what a narrow terminal drops, in order: the ungated metrics, the mma count (wgmma stays), then the
#: chunk loop's barriers (gated: a failure line names them, and the JSON keeps them)
DROPPABLE = ("ptx_instructions", "output_bytes", "mma", "loop_barriers")


def static_tables(doc: dict, width: int) -> list:
    """One table per compiler family (Triton, XLA); one line per kernel and config or shape and
    mode. The widest layout that fits ``width`` columns; the JSON keeps every metric."""
    from lattnbench.views.tables import fit, table as make_table

    groups: dict[tuple, dict] = {}
    for r in doc["rows"]:
        groups.setdefault((r["kernel"], r["config"], r["shape"], r["mode"]), {})[r["metric"]] = r["value"]
    tables = []
    for title, is_triton in (("Triton and Gluon, sm_90 AOT, D=E=128 bf16", True), ("XLA, CPU backend", False)):
        mine = {k: v for k, v in groups.items() if ("registers" in v) is is_triton}
        if not mine:
            continue
        every = [m for m in HEADERS if any(m in v for v in mine.values())]

        def layout(metrics: list[str], gap: int, title=title, is_triton=is_triton, mine=mine):
            def make():
                table = make_table(title, gap)
                for col in ("kernel", "config") if is_triton else ("kernel", "shape", "mode"):
                    table.add_column(col, no_wrap=True)
                for m in metrics:
                    table.add_column(HEADERS[m], justify="right", no_wrap=True)
                for (kernel, config, shape, mode), vals in mine.items():
                    lead = (kernel, config) if is_triton else (kernel, shape.removesuffix(" fp32"), mode)
                    table.add_row(*lead, *(_num(vals[m]) if m in vals else "" for m in metrics))
                return table
            return make

        shorter = [[m for m in every if m not in DROPPABLE[:i]] for i in range(len(DROPPABLE) + 1)]
        table = fit([layout(ms, gap) for ms in shorter for gap in (2, 1)], width)
        tables.append(table if table is not None else layout(shorter[-1], 1)())
    return tables


def _table(doc: dict) -> None:
    for table in static_tables(doc, out.width):
        out.print(table)


def register(app: typer.Typer) -> None:
    app.command("static", epilog=EXAMPLE)(static)
