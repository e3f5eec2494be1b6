"""Compile every job (Triton, Gluon and XLA) in a process pool and turn the metrics into rows.

Why a pool: each AOT compile is single-threaded and independent, so the wall time falls with the
cores; the Triton and XLA compiles share the same pool. Each worker imports the kernels once.
Workers are spawned, not forked, and start without ``TRITON_INTERPRET``: a parent that imported
the kernels under the interpreter (a CPU test run) would otherwise hand them interpreted
functions, which do not compile for a GPU target.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor

from lattnbench.static import gluon_aot, triton_aot, xla
from lattnbench.static.triton_aot import Job
from lattnbench.static.xla import XlaJob


def _triton_rows(job: Job, metrics: dict, version: str) -> list[dict]:
    return [{"kernel": job.kernel, "config": job.config, "shape": job.shape, "mode": "compile",
             "metric": m, "value": v, "compiler": {"triton": version}} for m, v in metrics.items()]


def _xla_rows(job: XlaJob, metrics: dict, versions: dict) -> list[dict]:
    return [{"kernel": job.kernel, "config": "default", "shape": xla.shape_label(job.shape), "mode": job.mode,
             "metric": m, "value": v, "compiler": dict(versions)} for m, v in metrics.items()]


def _quiet_exit() -> None:
    """stderr to /dev/null as the worker exits: Gluon's compile leaves layout objects alive in the
    kernels' module caches, and nanobind lists each one it finds at interpreter shutdown (dozens of
    lines a worker, nothing wrong). A job's errors come back through its future, not stderr."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)


def _clean_env() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    atexit.register(_quiet_exit)


def _run_triton(job: Job | gluon_aot.GluonJob) -> tuple[dict, str]:
    compile_job = gluon_aot.compile_job if isinstance(job, gluon_aot.GluonJob) else triton_aot.compile_job
    return compile_job(job), triton_aot.triton_version()


def _run_xla(job: XlaJob) -> tuple[dict, dict]:
    return xla.compile_job(job), xla.versions()


def collect(triton_jobs: Iterable[Job], xla_jobs: Iterable[XlaJob], workers: int | None = None,
            progress: Callable[[str], None] | None = None) -> list[dict]:
    """Rows of every job; ``workers`` processes (default: the CPU count)."""
    triton_jobs, xla_jobs = list(triton_jobs), list(xla_jobs)
    rows: list[dict] = []
    workers = max(1, workers or os.cpu_count() or 1)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_clean_env) as pool:
        tri = [(j, pool.submit(_run_triton, j)) for j in triton_jobs]
        xl = [(j, pool.submit(_run_xla, j)) for j in xla_jobs]
        for job, fut in tri:
            metrics, version = fut.result()
            rows += _triton_rows(job, metrics, version)
            if progress:
                progress(f"{job.kernel} {job.config}")
        for job, fut in xl:
            metrics, versions = fut.result()
            rows += _xla_rows(job, metrics, versions)
            if progress:
                progress(f"{job.kernel} {xla.shape_label(job.shape)} {job.mode}")
    return rows
