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


def offset_bug(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Right for batch row 0, wrong beyond it (what an overflowing row offset does)."""
    o, s = lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    o = o.clone()
    o[1:] = o[1:] * 0.5
    return o, s


offset_bug.lattnbench_name = "plugin/offset-bug"


def jitter(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """Right within fp32 tolerance, but never bitwise the same twice (as atomics-based kernels are)."""
    import torch

    o, s = lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    return o + 1e-9 * torch.randn_like(o) * o.detach().abs().mean(), s


jitter.lattnbench_name = "plugin/jitter"
