"""Plugin kernels with process state, for the isolation tests (CPU stand-ins for autotuned GPU kernels).

``tuned`` keeps its "tuned config" in a real Triton autotuner's cache keyed by head dim alone (as
fla's chunk kernels key): the first sequence length it sees wins, and a call at another length is
slow (a config tuned for another shape). ``neighbour`` writes into that cache, as another kernel's
import or tuning can. Both compute the reference, so only their speed tells the state.
"""
import time

import triton

from lattnbench.kernels.naive.torch_ref import lightning_naive

SLOW_S = 0.1


@triton.jit
def _never_launched(x):
    pass


TUNER = triton.autotune(configs=[triton.Config({})], key=["x"])(_never_launched)


def tuned(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Slow unless its cached config was tuned at this sequence length."""
    seen = TUNER.cache.setdefault(q.shape[-1], q.shape[1])
    if seen != q.shape[1]:
        time.sleep(SLOW_S)
    return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


def neighbour(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Leaves a config for another length in the shared cache."""
    TUNER.cache[q.shape[-1]] = -1
    return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


tuned.lattnbench_name = "plugin/tuned"
neighbour.lattnbench_name = "plugin/neighbour"
