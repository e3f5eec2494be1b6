"""Plugins for ``suites/gla-forms.toml``: ``gla/triton`` with its Gluon launches in forms that stay
off by default until timed, so that one run times them beside the default form, each kernel in its
own worker process. A form sets the host's switches (``kernels.gla.gluon.host``, read at each
call) before it calls ``gla_triton``; the process holds no other form.
Put ``tests/gpu`` on ``PYTHONPATH`` and name the forms with ``--kernel``."""
from __future__ import annotations

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import gla_triton


def _form(name: str, **switches):
    def run(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        for switch, value in switches.items():
            setattr(host, switch, value)
        return gla_triton(q, k, v, g, scale=scale, initial_state=initial_state, reverse=reverse,
                          cu_seqlens=cu_seqlens)

    run.__name__ = name
    run.lattnbench_name = f"form/{name}"
    run.lattnbench_family = "gla"
    run.lattnbench_devices = ("cuda",)
    run.lattnbench_dtypes = ("bf16", "fp16")
    run.lattnbench_description = "gla/triton with " + ", ".join(f"{k}={v}" for k, v in switches.items())
    return run


#: the Gluon in-chunk backward with the in-block pairs in registers and the exit terms in the launch
_PAIRS_EXIT = dict(INTRA_ON=True, INTRA_PAIRS=16, INTRA_ROW_LANES=4, INTRA_EXIT=True)

intra16 = _form("intra16", **_PAIRS_EXIT, INTRA_OP16=True, INTRA_KDS=64)
intra16_kds32 = _form("intra16-kds32", **_PAIRS_EXIT, INTRA_OP16=True, INTRA_KDS=32)
#: blocks of 8 rows at 8 lanes a key channel, slices of 32 channels: 8 warps, fewer spills than intra16
intra8_kds32 = _form("intra8-kds32", **{**_PAIRS_EXIT, "INTRA_PAIRS": 8, "INTRA_ROW_LANES": 8}, INTRA_OP16=True,
                     INTRA_KDS=32)
intra32 = _form("intra32", **_PAIRS_EXIT, INTRA_OP16=False, INTRA_KDS=64)
intra16_no_exit = _form("intra16-no-exit", **{**_PAIRS_EXIT, "INTRA_EXIT": False}, INTRA_OP16=True, INTRA_KDS=64)
prep_ks64 = _form("prep-ks64", PREP_KS=64)
prep_prefetch = _form("prep-prefetch", PREP_PREFETCH=True)
triton_prep = _form("triton-prep", PREP_ON=False)
#: the warp-specialized prep launch, at its default program cap and at the whole-D kernel's
prep_ws = _form("prep-ws", PREP_WS=True)
prep_ws_p64 = _form("prep-ws-p64", PREP_WS=True, PREP_WS_PROGRAMS=64)
prep_ws_prefetch = _form("prep-ws-prefetch", PREP_WS=True, PREP_PREFETCH=True)
#: with four lanes a key channel: 16 warps make the operands (96 registers a thread, as the products')
prep_ws_rl4 = _form("prep-ws-rl4", PREP_WS=True, ROW_LANES=4)
prep_ws_rl4_prefetch = _form("prep-ws-rl4-prefetch", PREP_WS=True, ROW_LANES=4, PREP_PREFETCH=True)
#: the whole-D prep launch with four lanes a key channel: 16 warps a program at 128 registers a thread
prep_rl4 = _form("prep-rl4", ROW_LANES=4)
prep_rl4_intra16 = _form("prep-rl4-intra16", ROW_LANES=4, **_PAIRS_EXIT, INTRA_OP16=True, INTRA_KDS=64)
#: with eight lanes a key channel: 32 warps a program at 64 registers a thread
prep_rl8 = _form("prep-rl8", ROW_LANES=8)
#: the warp-specialized prep launch beside the candidate in-chunk backward
prep_ws_intra16 = _form("prep-ws-intra16", PREP_WS=True, **_PAIRS_EXIT, INTRA_OP16=True, INTRA_KDS=64)
