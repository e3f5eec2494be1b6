"""GPU dev run for the Lightning ``lightning="vjp"`` chunked path (custom VJP, matrix state pass).

    python3 bench/jax_dev2.py            # writes $OUT/jax_dev2.log and $OUT/jax_dev2.json
    python3 bench/jax_dev2.py --smoke    # tiny shapes, a few variants: an end-to-end check on CPU

1. agreement vs the fp64 JAX naive reference at a small shape, bf16 and fp32 (o, S_T, dq, dk,
   dv, dh0), for the new path's variants and the old default;
2. timings at B4 H32 D=E=128 bf16 (``JAX_DEV_BHD``), n = 32768 then 8192 (``JAX_DEV_SIZES``),
   seeds' decay (layer 2 of 8): fwd and fwd+grad (one jitted ``jax.vjp`` returning o, S, dq, dk,
   dv with fixed random cotangents), median / p20 / p80 ms after compile + 3 warm-up calls, and
   the compiled ``memory_analysis().temp_size_in_bytes``. The most informative variants go first;
   the clock is checked before each one and the rest is skipped past ``JAX_DEV_BUDGET_S`` (200 s).
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
from lattnbench.kernels.jax.naive import lightning_naive
from lattnbench.tolerance import TOLERANCE, err_ratio

SMOKE = "--smoke" in sys.argv
OUT = os.environ.get("OUT", "out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "jax_dev2.log"), "a")
T0 = time.time()
BUDGET_S = float(os.environ.get("JAX_DEV_BUDGET_S", "200"))
RESULTS: dict = {"device": str(jax.devices()[0]), "jax": jax.__version__, "smoke": SMOKE,
                 "agreement": [], "timing": []}

OLD = dict(lightning="autodiff", chunk=256, scan="blocked")          # the previous default
# (name, chunked_attention keywords), most informative first
# v2 (commit after 974d10c): state_precision="auto" (TF32 state pass for bf16) and a two-level group dividing NC
# are the defaults now, so every "new-*" variant below already has them; "base-c256-lowpart" pins the
# session-2 configuration (HIGHEST state pass, group 11 = round(sqrt(128)) at n = 32768) for comparison.
V2 = dict(lightning="vjp", chunk=256, combine="low")
VARIANTS = [
    ("v2-c256-direct-lowpart", dict(V2, state="direct")),               # S_in by one bf16 [NC, NC] matmul
    ("v2-c256-direct-lowall", dict(V2, state="direct", scores="low")),
    ("v2-c128-direct-lowall", dict(V2, chunk=128, state="direct", scores="low")),
    ("v2-c64-direct-lowall", dict(V2, chunk=64, state="direct", scores="low")),
    ("v2-c128-mask", dict(V2, chunk=128, state="direct", scores="low", intra="mask")),   # session 3: before folding
    ("v2-c128-fold", dict(V2, chunk=128, state="direct", scores="low", intra="fold")),
    ("v2-c512-direct-lowall", dict(V2, chunk=512, state="direct", scores="low")),
    ("v2-c256-direct-lowall-nosave", dict(V2, state="direct", scores="low", save_states=False)),
    ("v2-c256-direct-lowall-bthd", dict(V2, state="direct", scores="low", layout="bthd")),
    ("v2-c256-lowpart", dict(V2, layout="bthd")),                       # no entry/exit transposes
    ("v2-c256-lowall", dict(V2, layout="bthd", scores="low")),
    ("v2-c256-bhtd-lowpart", dict(V2)),                                 # = the new default
    ("v2-c256-bhtd-lowall", dict(V2, scores="low")),
    ("v2-c256-lowall-matrix", dict(V2, layout="bthd", scores="low", state="matrix")),
    ("v2-c256", dict(lightning="vjp", chunk=256, combine="f32", layout="bthd")),
    ("v2-c128-lowall", dict(V2, chunk=128, layout="bthd", scores="low")),
    ("base-c256-lowpart", dict(V2, state_precision="highest", group=11)),
    ("new-c256", dict(lightning="vjp", chunk=256, combine="f32")),
    ("old-c256-blocked", OLD),
    ("new-c256-concat", dict(lightning="vjp", chunk=256, combine="concat")),
    ("new-c128", dict(lightning="vjp", combine="f32", chunk=128)),
    ("new-c256-lowpart", dict(lightning="vjp", chunk=256, combine="low")),
    ("new-c128-concat", dict(lightning="vjp", chunk=128, combine="concat")),
    ("new-c256-concat-low", dict(lightning="vjp", chunk=256, combine="concat", scores="low")),
    ("new-c256-lowscores", dict(lightning="vjp", combine="f32", chunk=256, scores="low")),
    ("new-c256-nosave", dict(lightning="vjp", combine="f32", chunk=256, save_states=False)),
    ("new-c512", dict(lightning="vjp", combine="f32", chunk=512)),
    ("new-c128-lowscores", dict(lightning="vjp", combine="f32", chunk=128, scores="low")),
    ("new-c256-statetf32", dict(lightning="vjp", combine="f32", chunk=256, state_precision="default")),
    ("new-c256-matrix", dict(lightning="vjp", combine="f32", chunk=256, state="matrix")),
    ("new-c256-scan", dict(lightning="vjp", combine="f32", chunk=256, state="scan")),
    ("new-c64", dict(lightning="vjp", combine="f32", chunk=64)),
]
AGREE = [("v2-c256-direct-lowall", dict(V2, state="direct", scores="low")),
         ("v2-c64-direct-bthd", dict(V2, chunk=64, state="direct", layout="bthd")),
         ("v2-c256-lowall", dict(V2, layout="bthd", scores="low")),       # TF32 state pass on the GPU
         ("v2-c128-bhtd-lowpart", dict(V2, chunk=128)),
         ("new-c64", dict(lightning="vjp", chunk=64, combine="f32")),
         ("new-c256-concat", dict(lightning="vjp", chunk=256, combine="concat")),
         ("new-c128-lowpart", dict(lightning="vjp", chunk=128, combine="low")),
         ("new-c128-lowscores", dict(lightning="vjp", combine="f32", chunk=128, scores="low")),
         ("new-c256-matrix-nosave", dict(lightning="vjp", combine="f32", chunk=256, state="matrix", save_states=False)),
         ("new-c64-scan-tf32", dict(lightning="vjp", combine="f32", chunk=64, state="scan", state_precision="default")),
         ("old-c128-blocked", dict(lightning="autodiff", chunk=128, scan="blocked"))]


def log(*a):
    msg = " ".join(str(x) for x in a)
    print(msg, flush=True)
    LOG.write(msg + "\n")
    LOG.flush()


def save():
    with open(os.path.join(OUT, "jax_dev2.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


def over_budget() -> bool:
    return time.time() - T0 > BUDGET_S


# ---------------------------------------------------------------------------------------------
# agreement
# ---------------------------------------------------------------------------------------------

def agreement():
    rng = np.random.default_rng(0)
    b, t, h, hk, d, e = (2, 40, 2, 1, 16, 24) if SMOKE else (2, 700, 4, 2, 48, 80)
    gamma = -rng.uniform(0.0, 0.3, h).astype(np.float32)
    gamma[0] = -5.8                                    # a strong head: λ^C underflows
    base = {"q": rng.standard_normal((b, t, h, d)), "k": rng.standard_normal((b, t, hk, d)),
            "v": rng.standard_normal((b, t, hk, e)), "h0": 0.5 * rng.standard_normal((b, h, d, e))}
    do = rng.standard_normal((b, t, h, e))
    ds = rng.standard_normal((b, h, d, e))
    names = ["q", "k", "v", "h0"]
    for dtn, dt in (("bf16", jnp.bfloat16), ("fp32", jnp.float32)):
        x = {kk: np.asarray(jnp.asarray(vv.astype(np.float32)).astype(dt).astype(jnp.float32), np.float64)
             for kk, vv in base.items()}
        x["h0"] = base["h0"].astype(np.float32).astype(np.float64)
        for rev in (False, True):
            agree = AGREE if not rev else AGREE[:2]           # reverse: the two main variants only
            with jax.enable_x64(True):
                args64 = [jnp.asarray(x[nm], jnp.float64) for nm in names]
                ref_f = lambda q, k, v, h0, rev=rev: lightning_naive(  # noqa: E731
                    q, k, v, gamma=jnp.asarray(gamma, jnp.float64), initial_state=h0, reverse=rev)
                (o, s), vjp = jax.vjp(ref_f, *args64)
                ref = [np.asarray(z) for z in (o, s) + vjp((jnp.asarray(do), jnp.asarray(ds)))]
            args = [jnp.asarray(x[nm], jnp.float32).astype(jnp.float32 if nm == "h0" else dt) for nm in names]
            for iname, kw in agree:
                if over_budget():
                    log(f"time budget reached, skipping agreement {iname} {dtn}")
                    continue
                f = (lambda kw, rev: lambda q, k, v, h0: chunked_attention(
                    q, k, v, g_gamma=gamma, initial_state=h0, reverse=rev, **kw))(kw, rev)

                def run(*a, f=f):
                    (o, s), vjp = jax.vjp(f, *a)
                    return (o, s) + vjp((jnp.asarray(do, jnp.float32).astype(o.dtype), jnp.asarray(ds, jnp.float32)))

                try:
                    got = jax.jit(run)(*args)
                    keys = ["o", "S", "dq", "dk", "dv", "dh0"]
                    errs = {kk: err_ratio(gg, rr) for kk, gg, rr in zip(keys, got, ref)}
                    ok = all(v <= TOLERANCE[dtn] for v in errs.values())
                    log(f"agree {iname:24s} {dtn} rev={int(rev)}: {'ok ' if ok else 'FAIL'} "
                        + " ".join(f"{kk}={vv:.1e}" for kk, vv in errs.items()))
                    RESULTS["agreement"].append({"impl": iname, "dtype": dtn, "reverse": rev, "ok": ok,
                                                 "errs": errs})
                except Exception as exc:  # noqa: BLE001
                    log(f"agree {iname} {dtn}: ERROR {type(exc).__name__}: {str(exc)[:300]}")
                    RESULTS["agreement"].append({"impl": iname, "dtype": dtn, "reverse": rev, "ok": False,
                                                 "error": str(exc)[:300]})
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


def variant_fns(gamma, kw):
    """fwd and fwd+grad of one variant: lightning_attn(q, k, v, 2, 8, impl="chunked") with the
    knobs exposed; fwd+grad returns (o, S_T, dq, dk, dv) for the cotangents (do, dS)."""
    def fwd(q, k, v):
        return chunked_attention(q, k, v, g_gamma=gamma, **kw)

    def fwdbwd(q, k, v, do, ds):
        (o, s), vjp = jax.vjp(fwd, q, k, v)
        return (o, s) + vjp((do, ds))
    return fwd, fwdbwd


def timing():
    if SMOKE:
        b, h, d, sizes = 1, 2, 32, [512, 256]
    else:
        b, h, d = (int(x) for x in os.environ.get("JAX_DEV_BHD", "4,32,128").split(","))
        sizes = [int(x) for x in os.environ.get("JAX_DEV_SIZES", "32768,8192").split(",")]
    only = os.environ.get("JAX_DEV_VARIANTS")
    variants = [(nm, kw) for nm, kw in VARIANTS if not only or nm in only.split(",")]
    if SMOKE:
        variants = variants[:6] + [vv for vv in variants if vv[0] in ("new-c256-matrix", "new-c256-scan")]
    # JAX_DEV_DECAY=alibi: the official package's ALiBi slopes (the suites' default, max|γ| 0.84 at H32)
    # instead of the seeds' lightning_decay(H, 2, 8) (max|γ| 5.8: too strong for intra="fold" at chunk 128)
    if os.environ.get("JAX_DEV_DECAY", "seeds") == "alibi":
        from lattnbench.kernels.decay import alibi_decay

        gamma = jnp.asarray(alibi_decay(h))
    else:
        gamma = jnp.asarray(lightning_decay(h, 2, 8))
    rng = np.random.default_rng(1)
    for n in sizes:
        key = jax.random.PRNGKey(n)
        ks = jax.random.split(key, 4)
        q, k, v = (jax.random.normal(kk, (b, n, h, d), jnp.bfloat16) for kk in ks[:3])
        do = jax.random.normal(ks[3], (b, n, h, d), jnp.bfloat16)
        ds = jnp.asarray(rng.standard_normal((b, h, d, d)), jnp.float32)
        for name, kw in variants:
            fwd, fwdbwd = variant_fns(gamma, kw)
            for mode, fn, args in (("fwd", fwd, (q, k, v)), ("fwdbwd", fwdbwd, (q, k, v, do, ds))):
                if over_budget():
                    log(f"time budget reached, skipping {name} n={n} {mode}")
                    continue
                try:
                    t1 = time.time()
                    med, p20, p80, mem = bench(fn, args, reps=5 if SMOKE else (30 if n > 8192 else 50))
                    log(f"time {name:20s} n={n:6d} {mode:7s} median {med:8.3f} ms  p20 {p20:8.3f}  p80 {p80:8.3f}"
                        f"  temp {None if mem is None else round(mem / 2**20)} MiB  (wall {time.time() - t1:.1f}s)")
                    RESULTS["timing"].append({"variant": name, "kw": kw, "n": n, "mode": mode, "median_ms": med,
                                              "p20_ms": p20, "p80_ms": p80, "temp_bytes": mem})
                except Exception as exc:  # noqa: BLE001
                    log(f"time {name} n={n} {mode}: ERROR {type(exc).__name__}: {str(exc)[:300]}")
                    RESULTS["timing"].append({"variant": name, "kw": kw, "n": n, "mode": mode,
                                              "error": str(exc)[:300]})
                save()


if __name__ == "__main__":
    log(f"== jax_dev2 {time.strftime('%Y-%m-%d %H:%M:%S')} jax {jax.__version__} {jax.devices()}"
        f"{' (smoke)' if SMOKE else ''} budget {BUDGET_S:.0f}s XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    what = [a for a in sys.argv[1:] if not a.startswith("--")] or ["agree", "time"]
    if "agree" in what:
        agreement()
        log(f"agreement done at {time.time() - T0:.1f}s")
    if "time" in what:
        timing()
    log(f"done at {time.time() - T0:.1f}s")
    save()
