"""Launches of compiled Gluon kernels that reuse the tensor maps of their host descriptors.

Why: for every ``TensorDescriptor`` argument, Triton's launcher encodes a ``CUtensorMap`` on every
launch (``make_tensordesc_arg``: Python around ``cuTensorMapEncodeTiled``). A lightning/gluon
fwd+bwd passes up to fifteen, on the host path that bounds it at short sequences. A map encodes
the base address, shape, strides, box, element type, swizzle and padding, never the data, so the
map made for the same address and layout is the same 128 bytes. A runner here keys the expanded
argument (the map, shape and strides) by argument position, which fixes the box, element type
and swizzle of the compiled kernel, and by address, shape, strides and padding.

The runner calls the launcher's own C entry with the arguments Triton's wrapper would pass. It is
made only for a launcher of the form it knows (Triton 3.6's ``wrap_handle_tensordesc`` closure
over ``launcher``, ``tensordesc_indices``, ``tensordesc_meta``, no global or profile scratch);
any other form, or a launch hook set at call time, keeps Triton's own runner. Without hooks it
passes none to the launch, where Triton's runner passes its empty hook chains and builds launch
metadata for them on every launch.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# maps kept per runner before the cache starts over (a model of many layers at one shape passes
# a few per layer; a miss only costs the encode it would have cost anyway)
CACHE_LIMIT = 512

# Triton's base launch arguments before the kernel's: grid x, y, z, stream, function, cooperative,
# PDL, global scratch, profile scratch, packed metadata, launch metadata, enter hook, exit hook
_BASE_ARGS = 13


def _closure(fn: Any) -> dict[str, Any]:
    cells = getattr(fn, "__closure__", None) or ()
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in cells)))


def _hooked(hook: Any) -> bool:
    """Whether a launch hook would do anything: Triton 3.6 keeps a ``HookChain`` there, empty unless
    a profiler added to it, where older ones keep None."""
    return hook is not None and bool(getattr(hook, "calls", True))


def cached_runner(compiled: Any, grid: tuple[int, int, int]) -> Callable[..., None] | None:
    """A runner like ``compiled[grid]`` (positional kernel arguments, ``stream=``) whose descriptor
    arguments reuse their encoded tensor maps, or None where the launcher is not of the known form
    or has no descriptor arguments."""
    try:
        launcher = compiled.run
        fields = _closure(launcher.launch)
        raw, where, metas = fields["launcher"], fields["tensordesc_indices"], fields["tensordesc_meta"]
        driver = sys.modules[type(launcher).__module__]
        expand = driver.make_tensordesc_arg
        base_len = driver._BASE_ARGS_FORMAT_LEN
        function, packed = compiled.function, compiled.packed_metadata
        from triton import knobs
        runtime = knobs.runtime
    except Exception:  # noqa: BLE001 — another Triton's launcher: its own runner
        return None
    if (base_len != _BASE_ARGS or not where or not metas or any(m is None for m in metas)
            or len(metas) != len(where) or launcher.global_scratch_size or launcher.profile_scratch_size):
        return None
    meta_at = dict(zip(sorted(where), metas))
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    plain = compiled[grid]
    cache: dict[tuple, list] = {}

    def run(*args: Any, stream: int | None = None) -> None:
        if stream is None or _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
            plain(*args, stream=stream)
            return
        final = [grid[0], grid[1], grid[2], stream, function, coop, pdl, None, None, packed, None, None, None]
        for i, arg in enumerate(args):
            meta = meta_at.get(i)
            if meta is None:
                final.append(arg)
                continue
            key = (i, arg.base.data_ptr(), *arg.shape, *arg.strides, arg.padding)
            expanded = cache.get(key)
            if expanded is None:
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                expanded = cache[key] = expand(arg, meta)
            final.extend(expanded)
        raw(*final)

    run.cache = cache  # type: ignore[attr-defined]
    return run
