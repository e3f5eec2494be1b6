"""Autotuning between points: forget it, so each point is tuned at its own shape, and remember
what each point's shape tuned to, so later runs need not tune again.

Triton autotuners cache the chosen config per key, and many keys leave out the grid and the
sequence length (fla's chunk kernels key on the head dims alone): a process that measured one
shape keeps that shape's configs for every later one. Between two points of one worker the
runner clears every autotuner's cache and every launch cache that holds a tuned config (a
callable ``forget_tuning`` that a kernel module exposes), so the next call tunes as a fresh
process would. The on-disk compile cache stays, so tuning costs benchmarking, not compiling.

Benchmarking still costs (fla: a few hundred configs per point), so what a point tuned to is kept
in ``tuning_dir()``, one file per (kernel, case, machine, versions): a later worker measuring the
same point restores those configs instead of tuning again. A config is restored only into an
autotuner that still lists it. ``LATTNBENCH_TUNING_CACHE=0`` turns the store off.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import pickle
import sys
import types
from pathlib import Path

STORE_ENV = "LATTNBENCH_TUNING_CACHE"


def shape_fields(case) -> dict:
    """The fields of a case that name its tuning: every field but the input distribution's, so
    points that differ only there share what they tuned to (a config's speed is the kernel's work,
    which the values do not change; a kernel whose work does depend on them is what the
    data-dependence finding reports). The g dtype stays: it changes the compiled kernel."""
    from lattnbench.spec import DISTRIBUTION_FIELDS

    fields = case.fields(gated=True)
    return {k: v for k, v in fields.items() if k == "g_dtype" or k not in DISTRIBUTION_FIELDS}


def _autotuners() -> list:
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    return [obj for obj in gc.get_objects() if issubclass(type(obj), Autotuner)]


def reset_autotuning() -> int:
    """Clear the config caches of every live Triton autotuner and kernel launch cache; how many."""
    cleared = 0
    for tuner in _autotuners():
        tuner.cache.clear()
        cleared += 1
    for name, module in list(sys.modules.items()):
        forget = getattr(module, "forget_tuning", None) if name.startswith("lattnbench.kernels") else None
        if callable(forget):
            forget()
            cleared += 1
    return cleared


def _name(tuner) -> str:
    """``module.function`` of the Python function under the autotuner (through heuristics, jit)."""
    fn = tuner
    for _ in range(8):
        if isinstance(fn, types.FunctionType):
            return f"{fn.__module__}.{fn.__qualname__}"
        fn = getattr(fn, "fn", None)
        if fn is None:
            break
    return repr(tuner)


def snapshot() -> dict[str, list[tuple[bytes, int, str]]]:
    """Every live autotuner's choices: name -> [(pickled key, config index, config text)]."""
    out: dict[str, list[tuple[bytes, int, str]]] = {}
    for tuner in _autotuners():
        configs = list(getattr(tuner, "configs", []))
        texts = [str(c) for c in configs]
        for key, config in tuner.cache.items():
            try:
                blob = pickle.dumps(key)
            except Exception:  # noqa: BLE001 - an unpicklable key is simply not kept
                continue
            text = str(config)
            if text in texts:
                out.setdefault(_name(tuner), []).append((blob, texts.index(text), text))
    return out


def restore(saved: dict[str, list[tuple[bytes, int, str]]]) -> int:
    """Put saved choices back into the live autotuners that still list those configs; how many."""
    done = 0
    for tuner in _autotuners():
        configs = list(getattr(tuner, "configs", []))
        for blob, index, text in saved.get(_name(tuner), []):
            if index < len(configs) and str(configs[index]) == text:
                tuner.cache[pickle.loads(blob)] = configs[index]
                done += 1
    return done


def tuning_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lattnbench" / "tuning"


def store_enabled() -> bool:
    """Off under ``LATTNBENCH_TUNING_CACHE=0``, and under ``LATTNBENCH_AUTOTUNE=first``, whose
    untimed choices a later run must not restore as tuned."""
    from lattnbench.runner import first_config

    return os.environ.get(STORE_ENV, "1").strip() != "0" and not first_config.requested()


def point_file(kernel: str, case_fields: dict, machine: dict) -> Path:
    """The store's file for one point on one machine and software stack."""
    ident = json.dumps({"kernel": kernel, "case": case_fields, "machine": machine}, sort_keys=True)
    return tuning_dir() / f"{hashlib.sha1(ident.encode()).hexdigest()[:20]}.pkl"


def load_point(path: Path) -> dict | None:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, ValueError):
        return None


def save_point(path: Path, saved: dict) -> None:
    if not saved:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(pickle.dumps(saved))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a re-tune
