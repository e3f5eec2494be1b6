"""Plugin kernels for the CLI tests: one right, one that silently drops the decay."""
from lattnbench.kernels.naive.torch_ref import lightning_naive


def faithful(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """The reference itself, in the input dtype: must PASS."""
    return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)


def no_decay(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """A plausible bug: the per-head decay is ignored. Must FAIL check-grad."""
    return lightning_naive(q, k, v, None, scale, initial_state, reverse, cu_seqlens)


no_decay.lattnbench_name = "plugin/no-decay"
faithful.lattnbench_name = "plugin/faithful"
