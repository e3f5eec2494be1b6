"""``lattnbench report``: markdown tables from results files, into a README block or a file."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands.common import die, err


def report(
    results: Annotated[list[Path], typer.Argument(help="Results JSON files (one section each).",
                                                  show_default=False)],
    readme: Annotated[Optional[Path], typer.Option(
        help="Replace the block between <!-- lattnbench:NAME --> and <!-- /lattnbench:NAME --> "
        "in this file; everything else stays byte-identical.")] = None,
    name: Annotated[Optional[str], typer.Option(
        help="Block NAME for --readme (default: the first file's suite name).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the markdown to this file.")] = None,
    reference: Annotated[Optional[str], typer.Option(
        help="Kernel the speed-up columns compare against (default: the file's own reference, as a "
        "suite names it, when timed; else softmax/sdpa-flash when timed, else the first softmax kernel).")] = None,
    plots: Annotated[Optional[Path], typer.Option(
        help="Directory of plots (from `lattnbench plot`) to link, relative to the README/--out.")] = None,
    timer: Annotated[str, typer.Option(
        help="Timer the speed tables show: device (back to back, as do_bench), graph (device time "
        "without host work) or latency (one synchronised call); points without it show —.")] = "device",
    mode: Annotated[Optional[str], typer.Option(
        help="Only these modes: fwd, bwd, fwdbwd (comma list).")] = None,
    metric: Annotated[Optional[str], typer.Option(
        help="Only these tables: speed, memory, check (comma list).")] = None,
    findings: Annotated[bool, typer.Option(
        "--findings", help="Agreement as a line per kernel (points passed, failed, refused) and a line "
        "per finding (kernel, dtype, way of failing, tensors, cases), not a table per case: for wide "
        "runs such as the option matrix.")] = False,
) -> None:
    """Markdown speed / memory / agreement tables in the lightning_attn README's shape.

    Without --readme or --out the markdown goes to stdout. Same input, same bytes.
    """
    from lattnbench.views.report import ReportError, ResultsError, load_docs, plot_links, render, replace_block
    from lattnbench.views.rows import UnknownTimer, parse_timer, select_rows

    try:
        timer = parse_timer(timer)
        docs = select_rows(load_docs(results), mode, metric)
        links: list[str] = []
        if plots is not None:
            if not plots.is_dir():
                die(f"--plots {plots}: not a directory")
            target = readme or out
            base = target.parent if target is not None else Path.cwd()
            # the plots named after the block (``NAME-speed.png``) where there are any, else those
            # named after the results files
            links = (plot_links(plots, base, [name]) if name else []) or \
                plot_links(plots, base, [Path(p).stem for p in results])
            if not links:
                err.print(f"warning: no PNG or SVG plots in {plots}", highlight=False)
        markdown = render(docs, reference=reference, plots=links, timer=timer, findings=findings)
        if readme is not None:
            block = name or str(docs[0].get("suite") or Path(results[0]).stem)
            try:
                with open(readme, encoding="utf-8", newline="") as f:
                    text = f.read()
            except OSError as exc:
                die(f"{readme}: cannot read ({exc.strerror})")
            new = replace_block(text, block, markdown, where=str(readme))
            if new != text:
                try:
                    with open(readme, "w", encoding="utf-8", newline="") as f:
                        f.write(new)
                except OSError as exc:
                    die(f"{readme}: cannot write ({exc.strerror})")
            err.print(f"{readme}: block '{block}' {'updated' if new != text else 'unchanged'}",
                      highlight=False)
        if out is not None:
            try:
                out.write_text(markdown, encoding="utf-8")
            except OSError as exc:
                die(f"{out}: cannot write ({exc.strerror})")
        if readme is None and out is None:
            typer.echo(markdown, nl=False)
    except (ResultsError, ReportError, UnknownTimer) as exc:
        die(str(exc))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
