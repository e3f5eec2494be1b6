"""Sequence-parallel Lightning Attention over gloo: 2 and 4 processes (one spawn of 4 ranks serves
both: the world, and two groups of two) against the single-process result on the whole sequence,
dense and packed (sequences crossing shard boundaries, one spanning every shard), with h0,
reverse and GQA, for the all-gather (LASP-2) and ring (LASP-1) schemes. The fp64 references as
the local kernel must agree to fp64 rounding; the Triton kernel (interpreter, fp32) within the
fp32 tolerance."""
from __future__ import annotations

import multiprocessing as mp
import os
import socket

import pytest

from lattnbench.kernels.lightning.parallel import plan_shard, shard_bounds
from lattnbench.measure.tolerance import TOLERANCE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    failures = []
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from sp_cases import CASES, run_checks

        pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        pair = pairs[rank // 2]
        failures += run_checks(None, "naive", torch.float64, 1e-12)
        failures += run_checks(pair, "naive", torch.float64, 1e-12)
        # the Triton kernel (fp32 in the interpreter) on the packed, reversed case with h0
        failures += run_checks(None, "triton", torch.float32, TOLERANCE["fp32"], ("allgather",),
                               [CASES[3]])
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
        failures.append(f"rank {rank}: {type(exc).__name__}: {exc}")
    queue.put((rank, failures))


def test_gloo_2_and_4_ranks_agree_with_one_process():
    ctx = mp.get_context("fork")  # the children inherit the imported torch: no 4 x import time
    queue, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, 4, port, queue)) for r in range(4)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert sorted(results) == [0, 1, 2, 3]
    failures = [f for r in sorted(results) for f in results[r]]
    assert not failures, "\n".join(failures)


def test_shard_plan_marks_pieces_crossing_ranks():
    # T=19 over 4 ranks: [0,4) [4,9) [9,14) [14,19); sequences [0,3) [3,10) [10,11) [11,19)
    cu = [0, 3, 10, 11, 19]
    assert shard_bounds(19, 4) == [0, 4, 9, 14, 19]
    mid = plan_shard(19, 4, 1, cu)
    assert (mid.seq_ids, mid.carried, mid.passes_through) == ((1,), True, True)
    third = plan_shard(19, 4, 2, cu)
    assert third.seq_ids == (1, 2, 3) and third.local_cu == (0, 1, 2, 5)
    assert third.starts == (False, True, True) and third.ends == (True, True, False)
    back = plan_shard(19, 4, 2, cu, reverse=True)  # backwards the last piece is entered first
    assert back.carried and back.entry == 2 and back.starts == (True, True, False)
    with pytest.raises(ValueError, match="cannot give each"):
        shard_bounds(3, 4)
