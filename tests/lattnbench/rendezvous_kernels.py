"""Two faithful plugin kernels that meet: each, on its first call, marks its arrival in
``$LATTNBENCH_TEST_RENDEZVOUS`` and waits until the other has arrived. Run one after the other
they cannot meet, and the first fails after the wait; run at once (``check-grad --jobs 2``) both
pass. A test of concurrency that waits on a condition, not on a clock."""
from __future__ import annotations

import os
import time
from pathlib import Path

from fake_kernels import faithful

WAIT_S = 120.0


def _meet(me: str, other: str) -> None:
    where = Path(os.environ["LATTNBENCH_TEST_RENDEZVOUS"])
    (where / me).touch()
    deadline = time.monotonic() + WAIT_S
    while not (where / other).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{me} waited {WAIT_S:g} s for {other}: the two did not run at once")
        time.sleep(0.05)


def meet_a(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    _meet("a", "b")
    return faithful(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


def meet_b(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    _meet("b", "a")
    return faithful(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


meet_a.lattnbench_name = "plugin/meet-a"
meet_b.lattnbench_name = "plugin/meet-b"
