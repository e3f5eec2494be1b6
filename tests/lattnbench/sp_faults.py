"""Sequence-parallel plugin kernels that fail on one rank only (``--kernel sp_faults:NAME``)."""
import os
import time

from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.parallel import lightning_attn_sp


def _sp(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    return lightning_attn_sp(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens, local=lightning_naive)


def dies_on_rank1(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Rank 1's process ends in the call (an OOM kill, a segfault); rank 0 waits in a collective."""
    if os.environ.get("RANK") == "1":
        os._exit(7)
    return _sp(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


def hangs_on_rank1(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Rank 1 never returns (a hung kernel); rank 0 waits in a collective."""
    if os.environ.get("RANK") == "1":
        time.sleep(3600)
    return _sp(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


for fn in (dies_on_rank1, hangs_on_rank1):
    fn.lattnbench_sequence_parallel = True
    fn.lattnbench_devices = ("cpu",)
