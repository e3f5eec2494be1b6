"""Plugins that time ``lightning/gluon`` in forms that stay off by default until timed, beside the
default form in one run, each kernel in its own worker process: a form sets the Gluon configs'
switches (read at each call) before it calls ``lightning_attn_gluon``; the process holds no other
form. Put ``tests/gpu`` on ``PYTHONPATH`` and name the forms with ``--kernel``;
``suites/lightning-floor.toml`` times every form here beside the default and ``lightning/triton``
at the lengths of its targets."""
from __future__ import annotations

from lattnbench.kernels.lightning.gluon import configs
from lattnbench.kernels.lightning.gluon import lightning_attn_gluon


def _form(name: str, **switches):
    def run(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        for switch, value in switches.items():
            setattr(configs, switch, value)
        return lightning_attn_gluon(q, k, v, gamma=gamma, scale=scale, initial_state=initial_state,
                                    output_final_state=True, reverse=reverse, cu_seqlens=cu_seqlens)

    run.__name__ = name
    run.lattnbench_name = f"form/lightning-{name}"
    run.lattnbench_family = "lightning"
    run.lattnbench_devices = ("cuda",)
    run.lattnbench_dtypes = ("bf16", "fp16")
    run.lattnbench_features = ("initial_state", "reverse", "gqa", "dv", "any_dim")
    run.lattnbench_description = "lightning/gluon with " + ", ".join(f"{k}={v}" for k, v in switches.items())
    return run


#: the dq pass as a programmatic dependent launch after dkdv (LIGHTNING_GLUON_PDL=1)
pdl = _form("pdl", PDL=True)
