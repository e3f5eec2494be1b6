"""Per-kernel GPU time of the JAX chunked Lightning path (jax.profiler trace, parsed in Python).

    OUT=dir JAX_PROF_VARIANTS=new-c256-lowpart python3 bench/jax_prof.py

For each variant (names from bench/jax_dev2.VARIANTS) and mode (fwd, fwdbwd) at B4 H32
D=E=128 bf16, n = JAX_PROF_N (32768): compile, warm up, trace 3 calls, then sum the GPU events
by name (ms per call) and write the top ones with their HLO op, plus the optimized HLO text.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from jax_dev2 import VARIANTS, variant_fns  # noqa: E402

from lattnbench.kernels.decay import lightning_decay  # noqa: E402

OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
N = int(os.environ.get("JAX_PROF_N", "32768"))
B, H, D = 4, 32, 128
REPS = 3
R: dict = {}


def log(*a):
    print(*a, flush=True)
    with open(os.path.join(OUT, "jax_prof.log"), "a") as f:
        f.write(" ".join(str(x) for x in a) + "\n")


def events(trace_dir):
    from jax.profiler import ProfileData

    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    agg: dict = collections.defaultdict(lambda: [0.0, 0, ""])
    for path in paths:
        pd = ProfileData.from_file(path)
        for plane in pd.planes:
            if "GPU" not in plane.name:
                continue
            for line in plane.lines:
                if "XLA Ops" in line.name or "Modules" in line.name or "Steps" in line.name:
                    continue
                for ev in line.events:
                    a = agg[ev.name]
                    a[0] += ev.duration_ns / 1e6
                    a[1] += 1
                    if not a[2]:
                        try:
                            st = dict(ev.stats)
                            a[2] = str(st.get("hlo_op", st.get("tf_op", "")))[:80]
                        except Exception:  # noqa: BLE001
                            pass
    if not agg:  # show what the trace holds, to fix the filter
        for path in paths:
            for plane in ProfileData.from_file(path).planes:
                log("   plane", plane.name, [line.name for line in plane.lines][:8])
    return sorted(((name, ms / REPS, cnt // REPS, op) for name, (ms, cnt, op) in agg.items()),
                  key=lambda r: -r[1])


def main():
    wanted = os.environ.get("JAX_PROF_VARIANTS", "new-c256-lowpart").split(",")
    variants = [(nm, kw) for nm, kw in VARIANTS if nm in wanted]
    gamma = jnp.asarray(lightning_decay(H, 2, 8))
    ks = jax.random.split(jax.random.PRNGKey(0), 4)
    q, k, v, do = (jax.random.normal(kk, (B, N, H, D), jnp.bfloat16) for kk in ks)
    ds = jnp.asarray(np.random.default_rng(0).standard_normal((B, H, D, D)), jnp.float32)
    for name, kw in variants:
        fwd, fwdbwd = variant_fns(gamma, kw)
        for mode, fn, args in (("fwd", fwd, (q, k, v)), ("fwdbwd", fwdbwd, (q, k, v, do, ds))):
            try:
                comp = jax.jit(fn).lower(*args).compile()
                with open(os.path.join(OUT, f"hlo-{name}-{mode}.txt"), "w") as f:
                    f.write(comp.as_text())
                for _ in range(3):
                    jax.block_until_ready(comp(*args))
                t = time.perf_counter()
                for _ in range(REPS):
                    jax.block_until_ready(comp(*args))
                wall = (time.perf_counter() - t) / REPS * 1e3
                tdir = os.path.join(OUT, f"trace-{name}-{mode}")
                with jax.profiler.trace(tdir):
                    for _ in range(REPS):
                        jax.block_until_ready(comp(*args))
                rows = events(tdir)
                total = sum(r[1] for r in rows)
                log(f"== {name} {mode} n={N}: wall {wall:.2f} ms/call, GPU events {total:.2f} ms/call")
                for nm, ms, cnt, op in rows[:25]:
                    log(f"  {ms:8.3f} ms  x{cnt:<3d} {nm[:70]:70s} {op}")
                R[f"{name} {mode}"] = {"wall_ms": wall, "gpu_ms": total, "top": rows[:40]}
                import shutil
                shutil.rmtree(tdir, ignore_errors=True)
            except Exception as exc:  # noqa: BLE001
                log(f"== {name} {mode}: ERROR {type(exc).__name__}: {str(exc)[:400]}")
            with open(os.path.join(OUT, "jax_prof.json"), "w") as f:
                json.dump(R, f, indent=1)


if __name__ == "__main__":
    main()
