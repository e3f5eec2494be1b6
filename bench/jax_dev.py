"""GPU dev run for the JAX kernels: agreement vs fp64 at a small shape, then timings.

    python3 bench/jax_dev.py            # writes $OUT/jax_dev.log and $OUT/jax_dev.json

Timings: jit, warm-up (compile + 3 calls), then ``reps`` calls each followed by
``block_until_ready`` on the whole output pytree; median / p20 / p80 in ms. fwd+grad is one jitted
function returning (o, S, dq, dk, dv) via ``jax.vjp`` with fixed random cotangents.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

from lattnbench.kernels.decay import lightning_decay
from lattnbench.kernels.jax import chunked_attention
from lattnbench.kernels.jax.naive import lightning_naive, recurrent_naive
from lattnbench.kernels.jax.recurrent import recurrent_attention
from lattnbench.tolerance import TOLERANCE, err_ratio

OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "jax_dev.log"), "a")
T0 = time.time()
BUDGET_S = float(os.environ.get("JAX_DEV_BUDGET_S", "160"))
RESULTS: dict = {"device": str(jax.devices()[0]), "jax": jax.__version__, "agreement": [], "timing": []}


def log(*a):
    msg = " ".join(str(x) for x in a)
    print(msg, flush=True)
    LOG.write(msg + "\n")
    LOG.flush()


def save():
    with open(os.path.join(OUT, "jax_dev.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


# ---------------------------------------------------------------------------------------------
# agreement
# ---------------------------------------------------------------------------------------------

def agreement():
    rng = np.random.default_rng(0)
    b, t, h, hk, d, e = 2, 300, 4, 2, 48, 80
    gamma = -rng.uniform(0.0, 0.3, h).astype(np.float32)
    base = {"q": rng.standard_normal((b, t, h, d)), "k": rng.standard_normal((b, t, hk, d)),
            "v": rng.standard_normal((b, t, hk, e)), "h0": 0.5 * rng.standard_normal((b, h, d, e)),
            "g": -np.logaddexp(0, -(1.5 * rng.standard_normal((b, t, h, d)) + 1.0))}
    do = rng.standard_normal((b, t, h, e))
    ds = rng.standard_normal((b, h, d, e))
    for dtn, dt in (("bf16", jnp.bfloat16), ("fp32", jnp.float32)):
        x = {kk: np.asarray(jnp.asarray(vv.astype(np.float32)).astype(dt).astype(jnp.float32), np.float64)
             for kk, vv in base.items()}
        x["h0"] = base["h0"].astype(np.float32).astype(np.float64)
        for fam in ("lightning", "gla"):
            names = ["q", "k", "v", "h0"] + (["g"] if fam == "gla" else [])
            with jax.enable_x64(True):
                args64 = [jnp.asarray(x[nm], jnp.float64) for nm in names]
                if fam == "lightning":
                    ref_f = lambda q, k, v, h0: lightning_naive(q, k, v, gamma=jnp.asarray(gamma, jnp.float64),  # noqa: E731
                                                                initial_state=h0)
                else:
                    ref_f = lambda q, k, v, h0, g: recurrent_naive(q, k, v, g=g, initial_state=h0)  # noqa: E731
                (o, s), vjp = jax.vjp(ref_f, *args64)
                ref = [np.asarray(z) for z in (o, s) + vjp((jnp.asarray(do), jnp.asarray(ds)))]
            args = [jnp.asarray(x[nm], jnp.float32).astype(jnp.float32 if nm == "h0" else dt) for nm in names]
            impls = {"chunked64": dict(chunk=64), "chunked128-blocked": dict(chunk=128, scan="blocked"),
                     "recurrent": None}
            for iname, kw in impls.items():
                if kw is None:
                    if fam == "lightning":
                        f = lambda q, k, v, h0: recurrent_attention(q, k, v, g_gamma=gamma, initial_state=h0)  # noqa: E731
                    else:
                        f = lambda q, k, v, h0, g: recurrent_attention(q, k, v, g=g, initial_state=h0)  # noqa: E731
                elif fam == "lightning":
                    f = (lambda kw: lambda q, k, v, h0: chunked_attention(q, k, v, g_gamma=gamma, initial_state=h0, **kw))(kw)
                else:
                    f = (lambda kw: lambda q, k, v, h0, g: chunked_attention(q, k, v, g=g, initial_state=h0, **kw))(kw)

                def run(*a, f=f):
                    (o, s), vjp = jax.vjp(f, *a)
                    return (o, s) + vjp((jnp.asarray(do, jnp.float32).astype(o.dtype), jnp.asarray(ds, jnp.float32)))

                got = jax.jit(run)(*args)
                keys = ["o", "S", "dq", "dk", "dv", "dh0"] + (["dg"] if fam == "gla" else [])
                errs = {kk: err_ratio(gg, rr) for kk, gg, rr in zip(keys, got, ref)}
                ok = all(v <= TOLERANCE[dtn] for v in errs.values())
                log(f"agree {fam:9s} {iname:20s} {dtn}: {'ok ' if ok else 'FAIL'} "
                    + " ".join(f"{kk}={vv:.1e}" for kk, vv in errs.items()))
                RESULTS["agreement"].append({"family": fam, "impl": iname, "dtype": dtn, "ok": ok, "errs": errs})
    save()


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------

def bench(fn, args, reps):
    comp = jax.jit(fn).lower(*args).compile()
    mem = None
    try:
        ma = comp.memory_analysis()
        mem = int(ma.temp_size_in_bytes) if ma is not None else None
    except Exception:  # noqa: BLE001
        pass
    for _ in range(3):
        jax.block_until_ready(comp(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(comp(*args))
        ts.append((time.perf_counter() - t0) * 1e3)
    ts = np.asarray(ts)
    return float(np.median(ts)), float(np.percentile(ts, 20)), float(np.percentile(ts, 80)), mem


def timing():
    b, h, d = (int(x) for x in os.environ.get("JAX_DEV_BHD", "4,32,128").split(","))
    sizes = [int(x) for x in os.environ.get("JAX_DEV_SIZES", "32768,8192").split(",")]
    variants = [("c64-seq", dict(chunk=64)), ("c128-blocked", dict(chunk=128, scan="blocked")),
                ("c64-blocked", dict(chunk=64, scan="blocked")), ("c128-seq", dict(chunk=128)),
                ("c256-blocked", dict(chunk=256, scan="blocked"))]
    rng = np.random.default_rng(1)
    for n in sizes:
        key = jax.random.PRNGKey(n)
        ks = jax.random.split(key, 4)
        q, k, v = (jax.random.normal(kk, (b, n, h, d), jnp.bfloat16) for kk in ks[:3])
        do = jax.random.normal(ks[3], (b, n, h, d), jnp.bfloat16)
        ds = jnp.asarray(rng.standard_normal((b, h, d, d)), jnp.float32)
        for name, kw in variants:
            if time.time() - T0 > BUDGET_S:
                log(f"time budget reached, skipping {name} n={n}")
                continue

            def fwd(q, k, v, kw=kw):
                # = lightning_attn(q, k, v, 2, 8, impl="chunked", chunk=...) with the scan variant exposed
                return chunked_attention(q, k, v, g_gamma=jnp.asarray(lightning_decay(h, 2, 8)), **kw)

            def fwdbwd(q, k, v, do, ds, kw=kw):
                (o, s), vjp = jax.vjp(fwd, q, k, v)
                return (o, s) + vjp((do, ds))

            for mode, fn, args in (("fwd", fwd, (q, k, v)), ("fwdbwd", fwdbwd, (q, k, v, do, ds))):
                try:
                    t1 = time.time()
                    med, p20, p80, mem = bench(fn, args, reps=30 if n > 8192 else 50)
                    log(f"time {name:14s} n={n:6d} {mode:7s} median {med:8.3f} ms  p20 {p20:8.3f}  p80 {p80:8.3f}"
                        f"  temp {None if mem is None else round(mem / 2**20)} MiB  (wall {time.time() - t1:.1f}s)")
                    RESULTS["timing"].append({"variant": name, "n": n, "mode": mode, "median_ms": med,
                                              "p20_ms": p20, "p80_ms": p80, "temp_bytes": mem})
                except Exception as exc:  # noqa: BLE001
                    log(f"time {name} n={n} {mode}: ERROR {type(exc).__name__}: {str(exc)[:300]}")
                    RESULTS["timing"].append({"variant": name, "n": n, "mode": mode, "error": str(exc)[:300]})
                save()


if __name__ == "__main__":
    log(f"== jax_dev {time.strftime('%Y-%m-%d %H:%M:%S')} jax {jax.__version__} {jax.devices()}")
    what = sys.argv[1:] or ["agree", "time"]
    if "agree" in what:
        agreement()
        log(f"agreement done at {time.time() - T0:.1f}s")
    if "time" in what:
        timing()
    log(f"done at {time.time() - T0:.1f}s")
    save()
