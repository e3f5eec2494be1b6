"""``lattnbench run SUITE``: run a suite file in one go into one results file (+ CSV)."""
from __future__ import annotations

from pathlib import Path

import typer

from lattnbench.commands.common import die, err
from lattnbench.supervise import POINT_TIMEOUT

EXAMPLE = """Examples:

  lattnbench run suites/seed-readme.toml             # writes results/<machine>/seed-readme.json

  lattnbench run cpu --out /tmp/results --resume     # 'cpu' means suites/cpu.toml
"""


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLE)
    def run(
        suite: str = typer.Argument(..., help="Suite TOML file, or a name in suites/ (seed-readme, cpu, ci, ...)."),
        out: str | None = typer.Option(None, "--out", "-o", help="Directory for <suite>.json/.csv "
                                       "(default: results/<machine>/)."),
        device: str | None = typer.Option(None, help="auto, cuda or cpu (default: the suite's, else auto)."),
        resume: bool = typer.Option(False, "--resume", help="Keep the points already in the output; run the rest."),
        kernel: list[str] | None = typer.Option(None, "--kernel", help="Plugin kernels package.module:function."),
        json_: bool = typer.Option(False, "--json", help="Print the results document on stdout."),
        point_timeout: POINT_TIMEOUT = "0",
    ) -> None:
        """Run every measurement of a suite (speed, memory, check-grad) under one progress bar.

        Rows are written as they finish; an interrupted run keeps every finished point and
        `--resume` carries on where it stopped. Exit 1 when a point fails or errors.
        """
        from lattnbench.commands.sweep import finish, pick_kernels, progress_bar, setup
        from lattnbench.commands.tables import check_tables, memory_tables, speed_tables
        from lattnbench.env import collect, machine_name
        from lattnbench.measure import Sweeper
        from lattnbench.results import ResultsError, ResultsWriter
        from lattnbench.spec import SpecError
        from lattnbench.suite import load_suite
        from lattnbench.supervise import heartbeat, heartbeat_check, parse_timeout, supervise
        from lattnbench.verify import check

        timeout_s = parse_timeout(point_timeout)
        try:
            spec = load_suite(suite)
        except SpecError as exc:
            die(str(exc))
        dev, reg = setup(device or spec.device, kernel)
        try:
            plan = [(m, pick_kernels(reg, m.kernels or None, dev)) for m in spec.measurements]
        except SpecError as exc:
            die(str(exc))
        env = collect()
        target = Path(out) if out else Path("results") / machine_name(env)
        try:
            writer = ResultsWriter(target / f"{spec.name}.json", spec.name, env, resume=resume)
        except ResultsError as exc:
            die(str(exc))
        writer.doc["reference"] = spec.reference
        supervise(writer.path, timeout_s, out_arg=target)
        ceilings = writer.doc.get("ceilings") or {}
        if dev == "cuda" and not ceilings and any(m.kind == "speed" for m in spec.measurements):
            from lattnbench.roofline import measure_ceilings
            ceilings = measure_ceilings(dev)
            writer.set_ceilings(ceilings)
        done = frozenset(writer.done_keys()) if resume else frozenset()
        total = sum(len(ks) * len(m.cases) for m, ks in plan)
        with progress_bar() as bar:
            task = bar.add_task(spec.name, total=total)
            try:
                for m, kernels in plan:
                    sweeper = Sweeper(dev, writer.add, ceilings, budget_s=m.budget, skip=done)
                    for case in m.cases:
                        for entry in kernels:
                            bar.update(task, description=f"{m.kind} {entry.name} {case.label()}")
                            if m.kind == "check-grad":
                                heartbeat_check(entry, case, dev)
                            else:
                                heartbeat(entry, case, dev, m.modes, "time_ms" if m.kind == "speed" else "peak_mb")
                            if m.kind == "speed":
                                sweeper.speed(entry, case, m.modes)
                            elif m.kind == "memory":
                                sweeper.memory(entry, case, m.modes)
                            elif not (entry.family == "softmax" and case.initial_state):
                                _check_once(writer, done, check, entry, case, dev, m.seed)
                            bar.advance(task)
            except KeyboardInterrupt:
                err.print("[yellow]interrupted: every finished point is saved; --resume continues[/]")
                raise typer.Exit(130) from None
        finish(writer, json_, lambda rows: [*speed_tables(rows), *memory_tables(rows),
                                            *(check_tables(rows) if any(r["metric"] == "err_ratio" for r in rows) else [])])


def _check_once(writer, done, check, entry, case, dev, seed) -> None:
    """check-grad one point unless --resume already holds its rows."""
    from lattnbench.measure import base_row
    from lattnbench.results import row_key

    probe = {**base_row(entry, case, dev, "fwdbwd", "err_ratio"), "tensor": "o"}
    if row_key(probe) in done:
        return
    writer.add(check(entry, case, dev, seed))
