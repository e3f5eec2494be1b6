"""Lean launches of the autotuned kernels, and the launch-key parts every family's ``ops`` takes
(``alignment``, ``raw_stream``): after the first call of a launch key, reuse its compiled
kernel, tuned config and bound runner instead of going through Triton's autotuner and argument
binder.

Why: a launch through Triton's autotuner costs several times the host time of the compiled
kernel's own runner, and at short sequences (n ≤ 1024) a fwd+bwd (four launches) is host-bound,
so the launch path is what decides its time there.

The launch key is the caller's: it must fix everything Triton specializes on (tensor dtypes and
16-byte alignment, integers equal to 1 / divisible by 16 / beyond int32, the constexprs, the
autotune key, the device) and the grid. Each ``ops`` keys a launch by its full shape, dtype, flags,
alignment and device, a superset of that: a key can miss more often than Triton's own cache,
never hit wrongly. LIGHTNING_TRITON_FAST_LAUNCH=0 (read when a launcher is made, i.e. at import)
always takes Triton's own path: both give bit-identical results (the same compiled kernel), so
the switch is for a Triton whose specialization rules differ and for profiling Triton's launch.
"""
from __future__ import annotations

import importlib
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch

from .tensormap_cache import cached_runner

_LAUNCHERS: "weakref.WeakSet[Launcher]" = weakref.WeakSet()

# what a launch needs beyond its arguments, asked for only on a key's first call: (grid of the
# tuned meta, the kernel's keyword arguments)
Spec = Callable[[], tuple[Callable[[dict], tuple], dict]]


def forget_tuning() -> None:
    """Drop every launcher's cached compiled kernels and tuned configs (with the autotuners'
    caches cleared, the next call tunes again at its own shape)."""
    for launcher in list(_LAUNCHERS):
        launcher.cache.clear()


def alignment(*xs) -> bool | tuple[bool, ...]:
    """True when every given tensor (None skipped) starts on a 16-byte boundary, else the flag of
    each: part of the launch key, as Triton specializes on it."""
    for x in xs:
        if x is not None and x.data_ptr() % 16:
            return tuple(y is None or y.data_ptr() % 16 == 0 for y in xs)
    return True


def raw_stream(x: torch.Tensor) -> int | None:
    """The current device's current CUDA stream as a raw handle, the one Triton's own launch would
    take (None off the GPU / unknown torch)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    dev = getattr(torch._C, "_cuda_getDevice", None)
    return get(dev()) if get is not None and dev is not None and x.is_cuda else None


def dot_precision(dtype: torch.dtype) -> str:
    """The ``input_precision`` of a launch's fp32 dot operands for inputs of ``dtype``: IEEE for
    fp32 inputs (tf32 misses the fp32 tolerance); tf32 for 16-bit inputs, whose fp32 operands
    (gate-scaled products, states, inverses) then keep fp16's mantissa with fp32's range (16-bit
    operands ignore it)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def fast_launch_enabled() -> bool:
    return os.environ.get("LIGHTNING_TRITON_FAST_LAUNCH", "1").strip() != "0"


def tensormap_reuse_enabled() -> bool:
    """LIGHTNING_GLUON_TENSORMAPS=0 (read when a launcher is made) encodes every descriptor's tensor
    map at every launch, as Triton's own runner does (``tensormap_cache``)."""
    return os.environ.get("LIGHTNING_GLUON_TENSORMAPS", "1").strip() != "0"


class Launcher:
    """Launch ``module.<autotuned>[grid](*args, **kw)``; later calls with the same key go straight
    to the compiled kernel's runner. The autotuned kernel is None under the interpreter: then
    ``module.<plain>`` runs with ``interp_meta`` (autotune cannot run there)."""

    def __init__(self, module: Any, autotuned: str, plain: str, interp_meta: dict[str, int]):
        # the kernels are looked up in ``module`` at every first call (tests wrap them in spies)
        self.module, self.autotuned_name, self.plain_name = module, autotuned, plain
        self.interp_meta = interp_meta
        params = inspect.signature(self.plain.fn).parameters
        self.names = list(params)
        self.defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        # key -> (runner, values of the parameters after the positional args), or False where this
        # Triton's compiled kernel could not be reached (its own path then, every call)
        self.cache: dict[Hashable, Any] = {}
        self.fast = fast_launch_enabled()
        self.reuse_tensormaps = tensormap_reuse_enabled()
        self.fast_launches = 0
        self.stream_kw = True
        _LAUNCHERS.add(self)

    @property
    def autotuned(self) -> Any:
        return getattr(self.module, self.autotuned_name)

    @property
    def plain(self) -> Any:
        return getattr(self.module, self.plain_name)

    def __call__(self, key: Hashable, args: tuple, spec: Spec, stream: int | None = None) -> None:
        """Launch with positional ``args``; ``spec`` gives the grid and keywords of a new key.
        ``stream``: the raw CUDA stream, if the caller has it (the runner asks the driver
        otherwise, which costs more inside autograd's device thread)."""
        hit = self.cache.get(key)
        if hit:
            run, tail = hit
            if stream is not None and self.stream_kw:
                try:
                    run(*args, *tail, stream=stream)
                except TypeError:  # a runner without the stream keyword: raised before launching
                    self.stream_kw = False
                    run(*args, *tail)
            else:
                run(*args, *tail)
            self.fast_launches += 1
            return
        grid, kw = spec()
        if self.autotuned is None:
            meta = dict(self.interp_meta)
            self.plain[grid(meta)](*args, **kw, **meta)
            return
        self.autotuned[grid](*args, **kw)
        if self.fast and hit is None:
            self.cache[key] = self._compiled(grid, args, kw)

    def _compiled(self, grid: Callable[[dict], tuple], args: tuple, kw: dict):
        """(runner of the compiled kernel at its tuned config and grid, values of the parameters
        after ``args``), or False."""
        try:
            meta, options = self._tuned()
            compiled = self.plain.warmup(*args, grid=(1,), **kw, **options)
            values = {**self.defaults, **kw, **meta}
            tail = tuple(values[n] for n in self.names[len(args):])
            g = grid(meta)
            g3 = (g[0], g[1] if len(g) > 1 else 1, g[2] if len(g) > 2 else 1)
            run = (cached_runner(compiled, g3) if self.reuse_tensormaps else None) or compiled[g3]
            return run, tail
        except Exception:  # noqa: BLE001 — an unknown Triton version: keep its own launch path
            return False

    def _tuned(self) -> tuple[dict, dict]:
        """(the tuned config's kernel parameters, every keyword its compile took)."""
        cfg = self.autotuned.best_config
        return dict(cfg.kwargs), cfg.all_kwargs()


class PlainLauncher(Launcher):
    """The same reuse for a kernel with one launch config and no autotuner (the Gluon kernels):
    its keywords, launch options included, all come from the caller's spec."""

    def __init__(self, module: Any, name: str):
        super().__init__(module, name, name, {})

    def _tuned(self) -> tuple[dict, dict]:
        return {}, {}


_THREAD = threading.local()


def bind_cuda_context() -> None:
    """Make the current device's primary CUDA context current on this thread (once a thread).

    Why: a launch with host TensorDescriptors (the Gluon kernels) fills their tensor maps by a driver
    call that needs a current context, and autograd's device thread can reach such a launch before
    any runtime call has bound one there (the allocator's cached blocks need none): the launch then
    fails with "invalid device context". A stream query is a runtime call that binds it."""
    if not getattr(_THREAD, "cuda_bound", False):
        torch.cuda.current_stream().query()
        _THREAD.cuda_bound = True


class LazyLauncher:
    """A ``PlainLauncher`` made at its first launch: the Gluon kernels' modules import Gluon's Hopper
    API, so they load only when a call takes them. ``module`` is relative to ``package``. A launch
    on a CUDA stream binds the thread's CUDA context first (``bind_cuda_context``)."""

    def __init__(self, module: str, package: str, name: str):
        self._module, self._package, self._name = module, package, name
        self._launcher: PlainLauncher | None = None

    def __call__(self, key: Hashable, args: tuple, spec: Callable, stream=None) -> None:
        if stream is not None:
            bind_cuda_context()
        if self._launcher is None:
            self._launcher = PlainLauncher(importlib.import_module(self._module, self._package), self._name)
        self._launcher(key, args, spec, stream)
