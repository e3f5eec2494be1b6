"""lightning/jax-sp's kernel: shard_map over 2 and 4 host devices (a fresh process, since XLA reads
--xla_force_host_platform_device_count once) against the single-device reference, fp32 tolerance."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lattnbench.measure.tolerance import TOLERANCE


def test_shard_map_agrees_with_one_device():
    script = Path(__file__).with_name("jax_sp_check.py")
    done = subprocess.run([sys.executable, str(script), str(TOLERANCE["fp32"])], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
