"""``lattnbench run SUITE``: run a suite file in one go into one results file (+ CSV)."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from lattnbench.commands import axes

EXAMPLE = """Examples:

  lattnbench run suites/seed-readme.toml --repeat 3  # the README's headline run

  lattnbench run cpu --out /tmp/results --resume     # 'cpu' means the project's suites/cpu.toml

  lattnbench run long --only check-rows              # one kind of measurement of a suite

  lattnbench run gates --kernels 'gla/*'             # the suite's GLA kernels alone
"""


def register(app: typer.Typer) -> None:
    @app.command(epilog=EXAMPLE)
    def run(
        suite: str = typer.Argument(..., help="Suite TOML file, or a name in the project's suites/ "
                                    "(seed-readme, cpu, ci, ...)."),
        out: str | None = typer.Option(None, "--out", "-o", help="Directory for <suite>.json/.csv "
                                       "(default: ~/.cache/lattnbench/results/<machine>/, or under "
                                       "$LATTNBENCH_RESULTS_DIR)."),
        device: str | None = typer.Option(None, help="auto, cuda or cpu (default: the suite's, else auto)."),
        resume: bool = typer.Option(False, "--resume", help="Keep the points already in the output; run the rest."),
        kernel: list[str] | None = typer.Option(None, "--kernel", help="Plugin kernels package.module:function "
                                                "(repeated or comma-separated); they join every measurement of "
                                                "their family.", callback=axes.plugin_specs),
        json_: bool = typer.Option(False, "--json", help="Print the results document on stdout."),
        only: str | None = typer.Option(None, "--only", help="Run only these kinds of the suite's "
                                        "measurements: speed, memory, check-grad, check-rows (comma list)."),
        kernels: axes.ONLY_KERNELS = None,
        repeat: axes.REPEAT = 1, isolate: axes.ISOLATE = "auto", point_timeout: axes.POINT_TIMEOUT = "0",
        jobs: axes.CHECK_JOBS = 1, settle: axes.SETTLE = None, breakdown: axes.BREAKDOWN = False,
    ) -> None:
        """Run every measurement of a suite (speed, memory, check-grad) into one results file.

        Rows are written as they finish; an interrupted run keeps every finished point and
        `--resume` carries on where it stopped. On a GPU each kernel runs in its own worker
        process and the gradient checks run after all timing. Exit 1 when a point fails or errors.
        """
        from lattnbench.commands.common import die
        from lattnbench.commands.sweep import (execute, finish, glob_note, open_writer, resolve_isolation, settle_note,
                                               setup)
        from lattnbench.runner.drive import results_root
        from lattnbench.runner.select import (distinct, family_applies, family_case, nothing_to_run, only_kernels,
                                              pick_kernels, runs_at, with_plugins)
        from lattnbench.views.tables import check_tables, memory_tables, speed_tables
        from lattnbench.env import collect, machine_name
        from lattnbench.runner.plan import Task
        from lattnbench.spec import SpecError
        from lattnbench.suite import load_suite

        timeout_s = axes.parse_timeout(point_timeout)
        try:
            spec = load_suite(suite)
        except SpecError as exc:
            die(str(exc))
        # before any kernel module is imported here or in a worker: knobs are read at import
        os.environ.update(spec.env)
        kinds = {m.kind for m in spec.measurements}
        if only is not None:
            wanted = {x.strip() for x in only.split(",") if x.strip()}
            unknown = wanted - {"speed", "memory", "check-grad", "check-rows"}
            if unknown or not wanted:
                die(f"--only: expected speed, memory, check-grad or check-rows, got {only!r}")
            if not wanted & kinds:
                die(f"--only {only}: suite {spec.name!r} has only {', '.join(sorted(kinds))}")
            kinds &= wanted
        dev, reg = setup(device or spec.device, kernel)
        where = resolve_isolation(isolate, dev)
        tasks: list[Task] = []
        picked: dict = {}  # every kernel the suite's measurements chose, for a run with no point
        cases_seen: list = []  # and every case they were chosen for
        try:
            for m in (m for m in spec.measurements if m.kind in kinds):
                for case in m.cases:
                    chosen = pick_kernels(reg, m.kernels or None, dev, plugins=kernel,
                                          timing=m.kind not in ("check-grad", "check-rows"), note=glob_note)
                    cases_seen.append(case)
                    for entry in [*chosen, *with_plugins(reg, chosen, kernel)]:
                        picked.setdefault(entry.name, entry)
                        if not runs_at(entry, case):  # a single-GPU kernel beside the sequence-parallel ones
                            continue
                        seen = family_case(entry, case)
                        if m.kind in ("check-grad", "check-rows"):
                            if family_applies(entry, case):
                                tasks.append(Task(m.kind, entry.name, seen, seed=m.seed, tolerance=m.tolerance,
                                                  autotune=m.autotune))
                        else:
                            tasks.append(Task(m.kind, entry.name, seen, tuple(m.modes), m.budget,
                                              settle_c=settle if settle is not None else m.settle_c,
                                              breakdown=(breakdown or m.breakdown) and m.kind == "speed"))
            if kernels:
                tasks = only_kernels(tasks, kernels, spec.name)
        except SpecError as exc:
            die(str(exc))
        tasks = distinct(tasks, reg)
        if not tasks:
            die(f"suite {spec.name!r}: {nothing_to_run(reg, list(picked.values()), cases_seen, 'world_size =')}")
        if any(t.settle_c is not None for t in tasks):
            settle_note(dev, "settle")
        env = collect()
        target = Path(out) if out else results_root() / machine_name(env)
        writer = open_writer(target / f"{spec.name}.json", spec.name, env, resume)
        writer.doc["reference"] = spec.reference
        if spec.threshold:
            writer.doc["threshold"] = spec.threshold
        import shlex

        again = shlex.join(["lattnbench", "run", suite, *(["--out", out] if out else []),
                            *(["--device", device] if device else []), *(["--only", only] if only else []),
                            *(["--kernels", ",".join(kernels)] if kernels else []),
                            *(["--repeat", str(repeat)] if repeat != 1 else []), "--resume"])
        execute(spec.name, tasks, writer, reg, dev, isolate=where, point_timeout=timeout_s, repeat=repeat,
                plugins=kernel, resume=resume, check_jobs=jobs, again=again)
        finish(writer, json_, lambda rows: [*speed_tables(rows), *memory_tables(rows),
                                            *(check_tables(rows) if any(r["metric"] == "err_ratio" for r in rows) else [])])
