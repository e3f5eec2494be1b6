"""A plugin pair for the GPU timing gate's own check: the same registry name, once as the bundled
Triton kernel and once made slower on purpose.

``--kernel gate_probe:lightning`` measures ``plugin/lightning-probe`` as ``lightning/triton``;
``--kernel gate_probe:lightning_slowed`` measures it with one batch row computed a second time
and folded into o, the regression the gate must flag: a quarter more kernel work at B = 4 plus
an elementwise pass over o, about twice the time at the seed shape.
Put ``tests/gpu`` on ``PYTHONPATH`` to load it.
"""
from __future__ import annotations


def lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """lightning/triton under the probe's name (the unchanged kernel)."""
    from lattnbench.kernels.lightning.triton import lightning_attn_triton

    return lightning_attn_triton(q, k, v, gamma=gamma, scale=scale, initial_state=initial_state,
                                 output_final_state=True, reverse=reverse, cu_seqlens=cu_seqlens)


def lightning_slowed(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    """lightning/triton plus the first batch row once more: the same values, more work."""
    o, state = lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    h0 = None if initial_state is None else initial_state[:1]
    extra, _ = lightning(q[:1], k[:1], v[:1], gamma, scale, h0, reverse, None)
    return o + 0 * extra.sum(), state


for _fn in (lightning, lightning_slowed):
    _fn.lattnbench_name = "plugin/lightning-probe"
    _fn.lattnbench_devices = ("cuda",)
    _fn.lattnbench_features = ("initial_state", "reverse", "gqa", "dv", "any_dim")
