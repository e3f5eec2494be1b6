"""Shared helpers of the Triton kernel tests."""
import inspect
import json
import os
import subprocess
import sys


class LaunchSpy:
    """Counts launches of a kernel (kernel[grid](...)) and forwards them."""

    def __init__(self, kern):
        self.kern, self.grids = kern, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kern[grid]


def record_launches(monkeypatch, module, names) -> list:
    """Replace each kernel ``module.<name>`` with a spy that logs (kernel, grid, sorted keyword
    arguments) and runs it; returns the log."""
    log = []

    class Spy:
        def __init__(self, name, kernel):
            self.name, self.kernel, self.fn = name, kernel, kernel.fn

        def __getitem__(self, grid):
            def run(*args, **kw):
                log.append((self.name, tuple(grid(kw) if callable(grid) else grid), tuple(sorted(kw.items()))))
                return self.kernel[grid](*args, **kw)
            return run

    for name in names:
        monkeypatch.setattr(module, name, Spy(name, getattr(module, name)))
    return log


class SignatureCheckingJaxTriton:
    """Stands in for jax-triton (which needs a GPU): checks each launch against its kernel's
    signature as jax-triton passes it (every argument, then one pointer per output), records it
    (``launches``: name, args, constexprs, grid, num_warps, output shapes), and returns zeros of the
    declared outputs."""

    def __init__(self):
        self.launches = []

    def triton_call(self, *args, kernel, out_shape, grid, num_warps, num_stages, **meta):
        import jax.numpy as jnp

        params = [(n, "constexpr" in str(p.annotation), p.default)  # a JITFunction, or the interpreter's wrapper
                  for n, p in inspect.signature(kernel.fn).parameters.items()]
        runtime = [n for n, const, _ in params if not const]
        assert len(args) + len(out_shape) == len(runtime), (kernel.fn.__name__, len(args), len(out_shape), runtime)
        constexprs = {n for n, const, _ in params if const}
        assert set(meta) <= constexprs, set(meta) - constexprs
        missing = [n for n, const, default in params if const and n not in meta and default is inspect.Parameter.empty]
        assert not missing, (kernel.fn.__name__, missing)
        assert 1 <= len(grid) <= 3 and all(isinstance(x, int) and x > 0 for x in grid), grid
        self.launches.append(dict(name=kernel.fn.__name__, args=args, meta=dict(meta), grid=grid, num_warps=num_warps,
                                  outs=[tuple(o.shape) for o in out_shape]))
        return [jnp.zeros(o.shape, o.dtype) for o in out_shape]


_KNOBBED = """import importlib, json
from lattnbench.static import gluon_aot


def knobbed(knobs, compile_):
    saved = []
    for path, value in knobs.items():
        module, attr = path.rsplit(".", 1)
        owner = importlib.import_module(module)
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)
    try:
        return compile_()
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)
"""


def gluon_aot_metrics(*calls: str | tuple[dict, str]) -> list[dict]:
    """The metrics of ``lattnbench.static.gluon_aot`` compile calls (as source, e.g.
    ``"compile_forward(d=128)"``, or ``(knobs, call)`` with module attributes set for that call
    alone, e.g. ``{"lattnbench.kernels.gla.gluon.host.INTRA_PAIRS": 16}``), each without its PTX,
    from one fresh process without the interpreter: a Triton kernel interpreted in this one leaves
    Triton's language patched, and a compile after it fails."""
    code = _KNOBBED + "".join(
        f"m = knobbed({knobs!r}, lambda: gluon_aot.{call})\nm.pop('ptx', None)\nprint('METRICS', json.dumps(m))\n"
        for knobs, call in (c if isinstance(c, tuple) else ({}, c) for c in calls))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("METRICS ")]
    assert run.returncode == 0 and len(lines) == len(calls), run.stderr[-2000:]
    return [json.loads(ln.removeprefix("METRICS ")) for ln in lines]
