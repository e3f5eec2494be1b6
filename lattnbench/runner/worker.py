"""A worker process: ``python -m lattnbench.runner.worker JOB.json`` runs a job's tasks in order.

Before each task it writes a heartbeat (the task's index and start time) so the parent can time
it out; after each task it appends one JSON line with the task's rows. Under isolation it forgets
autotuning between timing points and keeps or restores each point's tuned configs
(``lattnbench.runner.tuning``). It dies with its parent.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from lattnbench.runner import first_config, tuning

#: the parent's pid: a worker whose parent is gone stops
PARENT_ENV = "LATTNBENCH_PARENT_PID"


def die_with_parent() -> None:
    """Be SIGKILLed when the parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - then the worker merely outlives a killed parent
            pass
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit() and os.getppid() != int(parent):
        sys.exit(130)  # the parent died before the death signal was armed


def _beat(path: Path, index: int | None) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "task": index, "start": time.time()}))
    os.replace(tmp, path)


def _machine(device: str) -> dict:
    """What a tuned config depends on besides the point: the GPU and the software stack."""
    from lattnbench.env import PACKAGES, package_version

    gpu = None
    if device == "cuda":
        import torch

        gpu = torch.cuda.get_device_name(0)
    return {"gpu": gpu, "versions": {p: package_version(p) for p in PACKAGES}}


def run_job(job: dict) -> None:
    """The job's tasks in order; at a world size above 1, as rank 0 of its ranks or as a follower."""
    from lattnbench.registry import registry_with

    device = job["device"]
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    registry = registry_with(job.get("plugins") or [])
    first_config.install_if_requested()
    if int(job.get("ranks", 1)) > 1:
        from lattnbench.adapters import sharded

        sharded.join(device)
        if sharded.rank() > 0:  # rank 0 measures and writes; the others make its calls on their shards
            sharded.follow(registry, device)
            return
        try:
            _run_tasks(job, registry, device)
        finally:
            sharded.stop_followers()
        return
    _run_tasks(job, registry, device)


def _run_tasks(job: dict, registry, device: str) -> None:
    from lattnbench.harness.points import execute
    from lattnbench.runner.plan import Task

    ceilings = job.get("ceilings") or {}
    beat, timed = Path(job["heartbeat"]), 0
    remember = bool(job.get("forget_tuning")) and tuning.store_enabled()
    machine = _machine(device) if remember else {}
    with open(job["rows"], "a") as out:
        for i, spec in enumerate(job["tasks"]):
            task = Task.from_json(spec)
            _beat(beat, i)
            if task.autotune == "first" and not task.times:  # a check worker never times: untuned is fine
                first_config.install()
            if task.kind == "ceilings":
                from lattnbench.measure.roofline import measure_ceilings

                ceilings = measure_ceilings(device)
                msg = {"task": i, "ceilings": ceilings}
            else:
                store = None
                if task.times and job.get("forget_tuning"):
                    if timed:
                        tuning.reset_autotuning()
                    if remember:
                        store = tuning.point_file(task.kernel, tuning.shape_fields(task.case), machine)
                        saved = tuning.load_point(store)
                        if saved and tuning.restore(saved):
                            store = None  # tuned in an earlier run: nothing new to keep
                timed += task.times
                msg = {"task": i, "rows": execute(task, registry, device, ceilings)}
                if store is not None:
                    tuning.save_point(store, tuning.snapshot())
            out.write(json.dumps(msg) + "\n")
            out.flush()
    _beat(beat, None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    try:
        run_job(json.loads(Path(argv[0]).read_text()))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
