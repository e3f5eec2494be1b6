"""``lattnbench report``: markdown tables from results files, into a README block or a file."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lattnbench.commands import axes

from lattnbench.commands.common import die, err


#: --format values: tables at the terminal, markdown for files and pages
FORMATS = ("auto", "table", "md")


def report(
    results: Annotated[list[Path], typer.Argument(help="Results JSON files (one section each).",
                                                  show_default=False)],
    readme: Annotated[Optional[Path], typer.Option(
        help="Replace the block between <!-- lattnbench:NAME --> and <!-- /lattnbench:NAME --> "
        "in this file; everything else stays byte-identical.")] = None,
    name: Annotated[Optional[str], typer.Option(
        help="Block NAME for --readme (default: the first file's suite name).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write the markdown to this file.")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="table: tables fitted to the terminal's width; md: markdown. auto: markdown into "
        "--out / --readme, tables on stdout.")] = "auto",
    kernels: axes.ONLY_KERNELS = None,
    n: axes.ONLY_N = None,
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
    headline: Annotated[bool, typer.Option(
        "--headline", help="The README's compact view in markdown: n down, lightning/gluon, lightning/triton, "
        "fla, FlashAttention-2 and cuDNN across (those the file has; -k picks others), each with its "
        "speed-up against fla; one mode (--mode, default fwdbwd).")] = False,
) -> None:
    """Tables of results files: fitted to the terminal, or markdown for a file or a README block.

    At a terminal (and on stdout) the tables fit its width, kernels split over several tables
    when they do not; markdown goes to --out, into --readme's block, or to stdout with --format
    md. Same input, same bytes.
    """
    from lattnbench.results import results_stem
    from lattnbench.views.report import ReportError, ResultsError, load_docs, plot_links, render, replace_block
    from lattnbench.views.rows import UnknownTimer, filter_rows, parse_timer, select_rows

    try:
        fmt = fmt.strip().lower()
        if fmt not in FORMATS:
            die(f"bad --format {fmt!r}: choose {', '.join(FORMATS)}")
        timer = parse_timer(timer)
        if headline and mode is not None and len([m for m in mode.split(",") if m.strip()]) != 1:
            die("--headline shows one mode: give --mode fwd, bwd or fwdbwd")
        docs = select_rows(load_docs(results), mode, metric)
        docs = filter_rows(docs, None if headline else kernels, n)
        if readme is None and out is None and fmt != "md" and not headline:
            _print_tables(docs, timer, findings, reference)
            return
        links: list[str] = []
        if plots is not None:
            if not plots.is_dir():
                die(f"--plots {plots}: not a directory")
            target = readme or out
            base = target.parent if target is not None else Path.cwd()
            # the plots named after the block (``NAME-speed.png``) where there are any, else those
            # named after the results files
            links = (plot_links(plots, base, [name]) if name else []) or \
                plot_links(plots, base, [results_stem(p) for p in results])
            if not links:
                err.print(f"warning: no PNG or SVG plots in {plots}", highlight=False)
        if headline:
            markdown = _headline(docs, mode or "fwdbwd", timer, kernels, links)
        else:
            markdown = render(docs, reference=reference, plots=links, timer=timer, findings=findings)
        if readme is not None:
            block = name or str(docs[0].get("suite") or results_stem(results[0]))
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


def _headline(docs: list[dict], mode: str, timer: str, kernels: list[str] | None, links: list[str]) -> str:
    """The compact view of each file; ``kernels`` (names) replace the headline's own columns."""
    from lattnbench.views.headline import HEADLINE_KERNELS, headline

    chosen = HEADLINE_KERNELS
    if kernels:
        names = [p for raw in kernels for p in (x.strip() for x in raw.split(",")) if p]
        short = dict(HEADLINE_KERNELS)
        chosen = tuple((k, short.get(k, k.split("/", 1)[-1])) for k in names)
    parts = [headline(doc, mode, timer, chosen) for doc in docs]
    parts += [f"\n![{Path(link).stem}]({link})\n" for link in links]
    return "\n".join(parts)


def _print_tables(docs: list[dict], timer: str, findings: bool, reference: str | None) -> None:
    """Each file's environment line, then its speed, memory and agreement tables fitted to the
    terminal: a markdown row of 17 kernels is 500 characters, which no terminal shows."""
    from rich.text import Text

    from lattnbench.commands.common import out as console
    from lattnbench.results import display_name
    from lattnbench.views.tables import check_tables, memory_tables, speed_tables, speedup_tables
    from lattnbench.views.breakdown import breakdown_tables
    from lattnbench.views.dependence import DEPENDENCE_NOTE, data_dependence, dependence_mark
    from lattnbench.views.report import env_summary, timer_note
    from lattnbench.views.rows import doc_reference, is_speed, pick_reference, shape_label

    if reference is not None:
        pick_reference([r for d in docs for r in d["rows"]], reference)  # validates

    def group(row: dict) -> str:
        return f"{shape_label(row)} · {row.get('device')}"

    for doc in docs:
        rows = doc["rows"]
        console.print(Text(f"Results {display_name(doc.get('path', 'results.json'))} (suite {doc.get('suite')}): "
                           f"{env_summary(doc)}.", style="dim"))
        interp = sum(1 for r in rows if r.get("metric") == "time_ms" and r.get("interpreted"))
        if interp:
            console.print(f"{interp} Triton-interpreter timings left out of the speed tables.", highlight=False)
        speed = [r for r in rows if is_speed(r)]
        ref = reference if reference is not None else doc_reference(doc)
        ups = speedup_tables(speed, ref, timer, group=group) if ref else []
        dependence = data_dependence(speed, timer)
        tables = (speed_tables(speed, timer, group=group, mark=lambda r: dependence_mark(dependence.get(id(r))),
                               mark_note=DEPENDENCE_NOTE)
                  + ups + memory_tables(rows, group=group))
        checks = [r for r in rows if r.get("metric") == "err_ratio"]
        if checks and findings:
            from lattnbench.views.findings import render_findings

            tables.append(Text(render_findings(checks)))
        elif checks:
            tables += check_tables(checks)
        tables += [Text(t) for t in breakdown_tables(rows)]
        if speed:
            console.print(Text(f"time by the {timer} timer: {timer_note(timer, speed)}", style="dim"))
        for table in tables:
            console.print()
            console.print(table)
        if not rows:
            console.print("No points measured.")
        console.print()


def register(app: typer.Typer) -> None:
    app.command("report")(report)
