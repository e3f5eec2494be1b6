"""``LATTNBENCH_AUTOTUNE=first``: every Triton autotuner takes the first of its configs that
compiles and fits the GPU, instead of timing them all.

For correctness sweeps over many shapes and flags (the option matrix): there every new
combination would otherwise compile and time a peer's whole list (fla's chunk_gla: minutes per
point in fp32), and a timing says nothing about agreement. The choice goes through each
autotuner's own pruning, and a config that is out of resources is skipped as Triton's autotuner
skips it, so no point fails that a tuned call would pass. Each config tried runs once, untimed.
Speed points made so are not tuned, so the mode belongs to check-grad alone: nothing it picks is
kept where a later timed run would restore it (Triton's autotune disk cache, the tuning store).
"""
from __future__ import annotations

import os

MODE_ENV = "LATTNBENCH_AUTOTUNE"
_INF = float("inf")


def requested() -> bool:
    return os.environ.get(MODE_ENV, "").strip().lower() == "first"


def install() -> bool:
    """Patch Triton's Autotuner class (every autotuner, live or future); False where the Triton
    in use lacks the methods this relies on (then autotuning stays as it is)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return False
    if getattr(Autotuner, "_lattnbench_first", False):
        return True
    if not all(callable(getattr(Autotuner, name, None)) for name in ("prune_configs", "_bench")):
        return False
    prune, bench = Autotuner.prune_configs, Autotuner._bench

    def prune_configs(self, *args, **kwargs):
        self._lattnbench_found = False  # one benchmark round per key follows each pruning
        # no autotune results on disk either way: none of a tuned run's is read, and this mode's
        # untimed choice is never written where a later timed run would take it as tuned
        self.cache_results = False
        return prune(self, *args, **kwargs)

    def _bench(self, *args, config, **meta):
        if getattr(self, "_lattnbench_found", False):
            return [_INF] * 3
        saved = self.__dict__.get("_do_bench")
        self._do_bench = _run_once
        try:
            timing = bench(self, *args, config=config, **meta)
        finally:
            self._do_bench = saved
        self._lattnbench_found = timing[0] != _INF
        return timing

    Autotuner.prune_configs, Autotuner._bench = prune_configs, _bench
    Autotuner._lattnbench_first = True
    return True


def _run_once(kernel_call, quantiles=None):
    """One launch in place of a benchmark: compile errors and resource limits raise here."""
    kernel_call()
    return [0.0] * (len(quantiles) if quantiles else 1)


def install_if_requested() -> None:
    if requested():
        install()
