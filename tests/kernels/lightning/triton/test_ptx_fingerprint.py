"""bench/ptx_fingerprint.py, the tool that proves a refactor leaves the generated code unchanged:
it must cover every config of the default autotune lists, forward and each backward role. Its
--list mode runs here (in a subprocess: it loads the kernels for a GPU, without the interpreter);
the compiles themselves need the GPU machines' Triton and take a minute."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lattnbench.kernels.lightning.triton import configs as C

ROOT = Path(__file__).resolve().parents[4]


def test_list_covers_every_default_config_in_every_role():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ptx_fingerprint.py"), "--list"],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    got = {tuple(line.split()[:6]) for line in out.splitlines() if "/interp" not in line}

    def want(name, table, table_t):
        rows = [(*c, 0) for c in table] + list(table_t) + [C.FP32_CONFIG]
        return {(name, f"BT={bt}", f"BV={bv}", f"TR={tr}", f"w{w}", f"s{s}") for bt, bv, w, s, tr in rows}

    expected = want("fwd", C.FWD_CONFIGS, C.FWD_CONFIGS_T)
    for role in ("dq", "dk", "dv"):
        expected |= want(f"bwd-{role}", C.BWD_CONFIGS, C.BWD_CONFIGS_T)
    assert got == expected
    bt, bv, w, s = C.INTERP_CONFIG
    interp = [line for line in out.splitlines() if "/interp" in line]
    assert len(interp) == 4 * 2 and all(f"BT={bt} BV={bv} TR=0 w{w} s{s}" in line for line in interp)
