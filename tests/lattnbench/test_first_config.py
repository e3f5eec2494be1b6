"""LATTNBENCH_AUTOTUNE=first: an autotuner runs the first config that fits, once, and no other."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from triton.runtime.errors import OutOfResources
    from lattnbench.runner import first_config

    calls = []

    def too_big(nargs):
        raise OutOfResources(300000, 232448, "shared memory")

    def mark(tag):
        return lambda nargs: calls.append(tag)

    @triton.autotune(configs=[triton.Config({"BLOCK": 8}, pre_hook=too_big),
                              triton.Config({"BLOCK": 16}, pre_hook=mark(16)),
                              triton.Config({"BLOCK": 32}, pre_hook=mark(32))], key=["n"])
    @triton.jit
    def double(x, y, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

    assert first_config.install()
    double.cache_results = True  # as fla's autotuners ask: this mode must neither read nor write it
    for n in (40, 7):
        x = torch.randn(n)
        y = torch.full_like(x, float("nan"))
        double[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
        assert torch.equal(y, 2 * x), (y, x)
    assert double.cache_results is False
    print(calls)
''')


def test_first_config_skips_what_does_not_fit_and_times_nothing():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # per key: the out-of-resources config is skipped, the next runs once to try it and once for
    # real, the last is never compiled
    assert out.stdout.strip().splitlines()[-1] == "[16, 16, 16, 16]"


def test_the_tuning_store_is_off_in_this_mode(monkeypatch):
    from lattnbench.runner import tuning

    monkeypatch.delenv("LATTNBENCH_TUNING_CACHE", raising=False)
    monkeypatch.delenv("LATTNBENCH_AUTOTUNE", raising=False)
    assert tuning.store_enabled()
    monkeypatch.setenv("LATTNBENCH_AUTOTUNE", "first")
    assert not tuning.store_enabled()  # its untimed choices must not come back as tuned
