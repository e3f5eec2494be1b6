"""Points at a world size above 1: which processes run them, and how their ranks start and end.

A torch sequence-parallel point runs in N worker processes, one per rank, wired together by the
torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port);
rank 0 writes the rows and the heartbeat, the others follow it (``lattnbench.adapters.sharded``).
A JAX one runs in one worker that sees N devices (N host devices on a CPU, the first N GPUs).
The ranks share one process group, so a signal to rank 0's group reaches them all; when one
rank dies the others are killed at once, and the rank that died first is the one reported.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import groupby

#: set in every rank of a run the tool started itself (so a worker knows it is not under torchrun)
LAUNCHED_ENV = "LATTNBENCH_RANKS"
#: after rank 0 finished, how long the other ranks may take to follow it out
FOLLOW_OUT_S = 10.0


def under_torchrun() -> bool:
    """This process is one of several that torchrun (or another launcher) started."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and LAUNCHED_ENV not in os.environ


def world_of(task) -> int:
    return task.case.world_size if task.case is not None else 1


def split_jobs(jobs: list, framework_of: Callable[[str], str], in_workers: bool = True) -> list:
    """Each job cut where the world size or framework changes; parts above world size 1 run in
    workers (``in_workers``: False under torchrun, where this process is rank 0 already)."""
    out = []
    for job in jobs:
        key = lambda t: (world_of(t), framework_of(t.kernel) if t.kernel else "")  # noqa: E731
        for (world, framework), tasks in groupby(job.tasks, key=key):
            tasks = list(tasks)
            if world == 1 or not in_workers:
                out.append(replace(job, tasks=tasks))
            else:
                ranks = world if framework == "torch" else 1
                out.append(replace(job, tasks=tasks, worker=True, world_size=world, ranks=ranks))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device_env(world: int, ranks: int, device: str) -> dict[str, str]:
    """What a JAX worker needs to see ``world`` devices (a torch rank sees its own GPU through LOCAL_RANK)."""
    if ranks > 1:
        return {}
    if device == "cpu":
        flags = os.environ.get("XLA_FLAGS", "")
        return {"XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={world}".strip()}
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(world))}
    return {}


class RankGroup:
    """The processes of one job's ranks, seen as one process (``poll``, ``wait``, ``returncode``, ``pid``)."""

    def __init__(self, cmd: list[str], env: dict[str, str], ranks: int, logs: list, **popen) -> None:
        port = str(free_port())
        self.procs: list[subprocess.Popen] = []
        self.failed_rank: int | None = None
        self.returncode: int | None = None
        self._leader_done: float | None = None
        for r in range(ranks):
            rank_env = {**env, LAUNCHED_ENV: "1", "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks),
                        "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
            # one process group for all ranks (a signal to it reaches every rank), not the terminal's
            group = {"process_group": 0 if r == 0 else self.procs[0].pid}
            self.procs.append(subprocess.Popen(cmd, env=rank_env, stdout=logs[r], stderr=logs[r], **group, **popen))
        self.pid = self.procs[0].pid

    def poll(self) -> int | None:
        """None while every rank runs; once one fails, kill the rest and give its exit status."""
        if self.returncode is not None:
            return self.returncode
        codes = [p.poll() for p in self.procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            from lattnbench.errors import PEER_LOST_EXIT

            causes = [(r, c) for r, c in bad if c != PEER_LOST_EXIT] or bad
            self.failed_rank, code = causes[0]
            self._kill_all()
            self.returncode = code
        elif all(c == 0 for c in codes):
            self.returncode = 0
        elif codes[0] == 0:  # rank 0 is done and has told the others to stop
            self._leader_done = self._leader_done or time.monotonic()
            if time.monotonic() - self._leader_done > FOLLOW_OUT_S:
                self._kill_all()
                self.returncode = 0
        return self.returncode

    def _kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()

    def wait(self, timeout: float | None = None) -> int:
        self.procs[0].wait(timeout=timeout)
        for p in self.procs[1:]:
            p.wait(timeout=timeout)
        return self.poll()

    def describe(self, how: str) -> str:
        """``rank R died (how)`` for the rank that failed first, else ``how``."""
        return how if self.failed_rank is None else f"rank {self.failed_rank} of {len(self.procs)} ended ({how})"
