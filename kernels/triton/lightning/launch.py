"""Lean launches of the autotuned kernels: after the first call of a specialization, reuse its
compiled kernel and tuned config instead of going through Triton's autotuner and argument binder.

Why: a launch through Triton's autotuner costs several times the host time of the compiled
kernel's own runner, and at short sequences (n ≤ 1024) a fwd+bwd (four launches) is host-bound,
so the launch path is what decides its time there.

The cache key holds everything Triton specializes on: tensor dtypes and 16-byte alignment,
integers equal to 1 / divisible by 16 / beyond int32 (the autotuner's key integers by value), the
constexpr keywords, and the device. LIGHTNING_TRITON_FAST_LAUNCH=0 (read at every call) always
takes Triton's own path: both give bit-identical results (it is the same compiled kernel), so
the switch is for a Triton whose specialization rules this key does not follow, and for
profiling Triton's own launch.
"""
from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable
from typing import Any

import torch

_INT32 = (-(2**31), 2**31 - 1)
_LAUNCHERS: "weakref.WeakSet[Launcher]" = weakref.WeakSet()


def forget_tuning() -> None:
    """Drop every launcher's cached compiled kernels and tuned configs (with the autotuners'
    caches cleared, the next call tunes again at its own shape)."""
    for launcher in list(_LAUNCHERS):
        launcher.cache.clear()


def fast_launch_enabled() -> bool:
    return os.environ.get("LIGHTNING_TRITON_FAST_LAUNCH", "1").strip() != "0"


class Launcher:
    """Launch ``module.<autotuned>[grid](*args, **kw)``; later calls with the same specialization go
    straight to the compiled kernel. The autotuned kernel is None under the interpreter: then
    ``module.<plain>`` runs with ``interp_meta`` (autotune cannot run there)."""

    def __init__(self, module: Any, autotuned: str, plain: str, interp_meta: dict[str, int]):
        # the kernels are looked up in ``module`` at every call (tests wrap them in launch spies)
        self.module, self.autotuned_name, self.plain_name = module, autotuned, plain
        self.interp_meta = interp_meta
        params = inspect.signature(self.plain.fn).parameters
        self.names = list(params)
        self.defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        self.tune_keys = frozenset(getattr(self.autotuned, "keys", ()) or ())
        self.cache: dict[tuple, Any] = {}
        self.fast_launches = 0
        self.stream_kw = True
        _LAUNCHERS.add(self)

    @property
    def autotuned(self) -> Any:
        return getattr(self.module, self.autotuned_name)

    @property
    def plain(self) -> Any:
        return getattr(self.module, self.plain_name)

    def _key(self, args: tuple, kw: dict, aligned: bool) -> tuple:
        parts: list[Any] = [getattr(args[0], "device", None), aligned]
        for name, a in zip(self.names, args):
            if isinstance(a, torch.Tensor):
                parts.append(a.dtype if aligned else (a.dtype, a.data_ptr() % 16 == 0))
            elif isinstance(a, bool):
                parts.append(a)
            elif isinstance(a, int):
                parts.append(a if name in self.tune_keys else (a == 1, a % 16 == 0, _INT32[0] <= a <= _INT32[1]))
            else:
                parts.append(type(a))
        parts.append(tuple(sorted(kw.items())))
        return tuple(parts)

    def __call__(self, grid: Callable[[dict], tuple], args: tuple, kw: dict, *, aligned: bool = False,
                 stream: int | None = None) -> None:
        """``aligned``: the caller vouches that every tensor in ``args`` is 16-byte aligned (saves a
        ``data_ptr()`` per tensor); ``stream``: the raw CUDA stream, if the caller has it already.
        A torch call costs more inside autograd's device thread than on the main thread, so the
        backward passes both."""
        if self.autotuned is None:
            meta = dict(self.interp_meta)
            self.plain[grid(meta)](*args, **kw, **meta)
            return
        fast = fast_launch_enabled()
        key = self._key(args, kw, bool(aligned)) if fast else None
        hit = self.cache.get(key) if fast else None
        if hit:
            compiled, meta, tail = hit
            g = grid(meta)
            run = compiled[(g[0], g[1] if len(g) > 1 else 1, g[2] if len(g) > 2 else 1)]
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
        self.autotuned[grid](*args, **kw)
        if fast and hit is None:
            self.cache[key] = self._compiled(args, kw)

    def _compiled(self, args: tuple, kw: dict):
        """(compiled kernel, tuned meta, values of the parameters after ``args``) or False."""
        try:
            cfg = self.autotuned.best_config
            meta = dict(cfg.kwargs)
            compiled = self.plain.warmup(*args, grid=(1,), **kw, **cfg.all_kwargs())
            values = {**self.defaults, **kw, **meta}
            tail = [values[n] for n in self.names[len(args):]]
            return compiled, meta, tail
        except Exception:  # noqa: BLE001 — an unknown Triton version: keep its own launch path
            return False
