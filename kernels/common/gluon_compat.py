"""What this Triton's Gluon offers, probed once at import: whether the Hopper pieces the Gluon
kernels (``lightning/gluon``, ``gla/gluon``) use exist, and how ``gl.warp_specialize`` is called.

``gl.warp_specialize`` changed its signature in late 2025. The older form is
``warp_specialize(default_args, default_fn, worker_args, worker_fns, worker_num_warps,
worker_num_regs)``; the newer one (Triton 3.6 on the GPU image, 3.9 here) takes one list of
``(fn, args)`` pairs, the default partition first, then the workers' warps and registers.
The kernels branch on ``WS_LIST_FORM`` (a constexpr) and writes both calls.
"""
from __future__ import annotations

import inspect

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                                  warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    IMPORT_ERROR: str | None = None
except Exception as exc:  # noqa: BLE001 — no Triton, or one without Gluon's Hopper API
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = None
    TensorDescriptor = async_copy = None
    IMPORT_ERROR = f"{type(exc).__name__}: {exc}"


def _list_form() -> bool:
    """Whether gl.warp_specialize takes the list of (fn, args) pairs (True) or the older split
    arguments (False)."""
    params = list(inspect.signature(gl.warp_specialize).parameters)
    return params[0] == "functions_and_args"


def _tma_copies():
    """(global→shared, shared→global) TMA copies: ``async_copy_global_to_shared`` /
    ``async_copy_shared_to_global`` up to 3.6, renamed ``async_load`` / ``async_store`` later
    (where the old names remain only to raise)."""
    if hasattr(tma, "async_load"):
        return tma.async_load, tma.async_store
    return tma.async_copy_global_to_shared, tma.async_copy_shared_to_global


tma_load, tma_store = _tma_copies() if IMPORT_ERROR is None else (None, None)
# per-thread asynchronous copies global → shared (cp.async, masked elements zero-filled), committed
# in groups and waited on by count: ``async_copy_global_to_shared`` up to 3.6, ``async_load`` later
copy_to_shared = (getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
                  ) if IMPORT_ERROR is None else None
copy_commit = async_copy.commit_group if IMPORT_ERROR is None else None
copy_wait = async_copy.wait_group if IMPORT_ERROR is None else None
# a barrier of all the program's threads: ``gl.thread_barrier`` up to 3.6, ``gl.barrier`` later
cta_barrier = (getattr(gl, "thread_barrier", None) or gl.barrier) if IMPORT_ERROR is None else None
LIST_FORM: bool = IMPORT_ERROR is None and _list_form()

if IMPORT_ERROR is None:
    # PTX grid dependency control, for programmatic dependent launches (this Triton's Gluon has no
    # op for it): inline assembly over one element a thread of a 4-warp partition, kept as it has
    # an effect
    _GDC_LAYOUT = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))

    @gluon.jit
    def _grid_dependency_control(INSTRUCTION: gl.constexpr):
        gl.inline_asm_elementwise(INSTRUCTION + "\n mov.u32 $0, 0;", "=r,r",
                                  [gl.full([128], 0, gl.int32, _GDC_LAYOUT)], dtype=gl.int32, is_pure=False,
                                  pack=1)

    @gluon.jit
    def grid_dependents():
        """A programmatic dependent launch after this kernel may start once every program of this
        one has passed here or ended (``griddepcontrol.launch_dependents``; 4 warps)."""
        _grid_dependency_control("griddepcontrol.launch_dependents;")

    @gluon.jit
    def grid_dependency_wait():
        """Waits until the kernel this one was launched programmatically after has completed and its
        writes are visible (``griddepcontrol.wait``; 4 warps)."""
        _grid_dependency_control("griddepcontrol.wait;")
else:
    grid_dependents = grid_dependency_wait = None
# the same as a constexpr the kernels read as a global
WS_LIST_FORM = gl.constexpr(LIST_FORM) if gl is not None else LIST_FORM


def unavailable_reason() -> str | None:
    """None when the Gluon kernel can be compiled here, else why not (one line)."""
    if IMPORT_ERROR is not None:
        return f"Triton's Gluon Hopper API is not importable ({IMPORT_ERROR})"
    return None



def sm90_reason(device, what: str) -> str | None:
    """None when ``what`` (a Gluon kernel, named for the message) can run on the torch ``device``,
    else why not (one line): the API here, a CUDA device, compute capability 9.0."""
    reason = unavailable_reason()
    if reason is not None:
        return reason
    if device.type != "cuda":
        return f"{what} needs a CUDA sm_90 GPU, not {device.type}"
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        return f"{what} is written for sm_90 (Hopper), not sm_{major}{minor}"
    return None
