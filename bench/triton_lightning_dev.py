"""Dev bench for the Triton Lightning Attention kernels on a GPU (one script per device call).

    PYTHONUNBUFFERED=1 python3 bench/triton_lightning_dev.py [--out DIR] [--quick] [--jax]

1. warms Triton's disk cache by compiling every autotune config in parallel processes;
2. times fwd and fwd+bwd (triton.testing.do_bench, median) at B4 H32 D=E=128 bf16 for
   n = 512..32768 beside fla's chunk_simple_gla (g_gamma) and torch SDPA flash / cuDNN;
3. prints the autotuner's choice and every config's time;
4. checks bf16 (every config, and options: h0, dS_T, reverse, varlen, GQA, odd dims), fp16 and
   fp32 (IEEE dots) against the fp64 reference; peak memory of fwd+bwd at the largest n;
5. optionally the jax-triton bridge.
Writes log lines and results.json under --out ($OUT); prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

T0 = time.time()
RESULTS: dict = {"timing": [], "errors": [], "configs": {}, "memory": {}, "notes": []}


def log(*a):
    msg = " ".join(str(x) for x in a)
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def _warm_one(job):
    """Subprocess: compile one (kernel, config) so the parent's autotuner finds it in the disk cache."""
    import torch

    from lattnbench.kernels.triton.lightning import kernels as K
    kind, role, dtype_name, cfg, d, e = job
    dt = getattr(torch, dtype_name)
    bt, bv, w, s = cfg
    b, t, h = 1, 512, 32
    dev = "cuda"
    q = torch.randn(b, t, h, d, device=dev, dtype=dt)
    k = torch.randn(b, t, h, d, device=dev, dtype=dt)
    v = torch.randn(b, t, h, e, device=dev, dtype=dt)
    g = torch.zeros(h, device=dev)
    prec = "ieee" if dt == torch.float32 else "tf32"
    pw = triton_next_pow2
    try:
        if kind == "fwd":
            o = torch.empty(b, t, h, e, device=dev, dtype=dt)
            ht = torch.empty(b, h, d, e, device=dev)
            K.lightning_fwd_kernel.warmup(q, k, v, g, g, g, t, h, h, 0.1, 0, o, ht, KD=d, VD=e, BK=max(16, pw(d)),
                                          REVERSE=False, HAS_H0=False, STORE_HT=True, IS_VARLEN=False,
                                          DOT_PREC=prec, BT=bt, BV=bv, num_warps=w, num_stages=s, grid=(1,))
        else:
            dx = torch.empty(b, t, h, d if role < 2 else e, device=dev, dtype=dt)
            K.lightning_bwd_kernel.warmup(q, k, v, v, g, g, g, g, t, h, h, 0.1, 0, dx, g, KD=d, VD=e,
                                          BKD=max(16, pw(d)), BVD=max(16, pw(e)), ROLE=role, REVERSE=False,
                                          HAS_H0=False, HAS_DHT=False, IS_VARLEN=False, DOT_PREC=prec,
                                          BT=bt, BV=bv, num_warps=w, num_stages=s, grid=(1,))
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{job}: {exc!r}"


def triton_next_pow2(x):
    return 1 << (int(x) - 1).bit_length()


def precompile(dtype_name="bfloat16", d=128, e=128):
    import multiprocessing as mp

    from lattnbench.kernels.triton.lightning import kernels as K
    jobs = [("fwd", -1, dtype_name, c, d, e) for c in K.FWD_CONFIGS]
    jobs += [("bwd", r, dtype_name, c, d, e) for r in range(3) for c in K.BWD_CONFIGS]
    t = time.time()
    with mp.get_context("spawn").Pool(min(16, len(jobs))) as pool:
        errs = [x for x in pool.map(_warm_one, jobs) if x]
    log(f"precompiled {len(jobs)} kernels in {time.time() - t:.1f}s; failures: {errs}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jax", action="store_true")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; later sections are skipped past it")
    ap.add_argument("--no-precompile", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch
    import triton
    from triton.testing import do_bench

    from lattnbench.kernels.decay import lightning_decay
    from lattnbench.kernels.naive.torch_ref import lightning_naive
    from lattnbench.kernels.triton.lightning import kernels as K
    from lattnbench.kernels.triton.lightning import lightning_attn_triton
    from lattnbench.kernels.triton.lightning import ops as OPS
    from lattnbench.tolerance import TOLERANCE, err_ratio

    dev = "cuda"
    log("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
    RESULTS["env"] = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()}
    if not args.no_precompile:
        try:
            precompile()
        except Exception:  # noqa: BLE001
            log("precompile failed:", traceback.format_exc())

    def left():
        return args.budget - (time.time() - T0)

    B, H, D, E = 4, 32, 128, 128
    gamma = torch.as_tensor(lightning_decay(H, 1, 4), device=dev)
    ns = [512, 1024, 2048, 4096, 8192, 16384, 32768]
    if args.quick:
        ns = [512, 4096, 32768]

    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as exc:  # noqa: BLE001
        chunk_simple_gla = None
        log("fla unavailable:", repr(exc))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def bench(fn, grads=None):
        return do_bench(fn, warmup=25, rep=60, grad_to_none=grads, return_mode="median")

    table = []
    for n in ns:
        torch.manual_seed(n)
        q = torch.randn(B, n, H, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, n, H, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, n, H, E, device=dev, dtype=torch.bfloat16)
        do = torch.randn(B, n, H, E, device=dev, dtype=torch.bfloat16)
        row = {"n": n}
        # ours
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        t = time.time()
        try:
            row["mine_fwd"] = bench(lambda: lightning_attn_triton(q, k, v, gamma))
            row["mine_fwdbwd"] = bench(lambda: lightning_attn_triton(qg, kg, vg, gamma)[0].backward(do), [qg, kg, vg])
            log(f"n={n} mine fwd {row['mine_fwd']:.3f} fwdbwd {row['mine_fwdbwd']:.3f} ms "
                f"({time.time() - t:.1f}s incl. tuning)")
        except Exception:  # noqa: BLE001
            log("mine failed:", traceback.format_exc()[-1500:])
        if n == ns[-1] and "mine_fwdbwd" in row:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            with torch.no_grad():
                lightning_attn_triton(q, k, v, gamma)
            torch.cuda.synchronize()
            RESULTS["memory"]["fwd_MB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            qg.grad = kg.grad = vg.grad = None
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            lightning_attn_triton(qg, kg, vg, gamma)[0].backward(do)
            torch.cuda.synchronize()
            RESULTS["memory"]["fwdbwd_MB"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            log("peak memory above inputs (MB)", RESULTS["memory"])
        # SDPA
        qt, kt, vt, dot = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
        qtg, ktg, vtg = (x.clone().requires_grad_(True) for x in (qt, kt, vt))
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            if left() < 100 or (name == "flash" and n > 16384):
                continue
            try:
                with sdpa_kernel(be):
                    row[f"{name}_fwd"] = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True))
                    row[f"{name}_fwdbwd"] = bench(
                        lambda: F.scaled_dot_product_attention(qtg, ktg, vtg, is_causal=True).backward(dot), [qtg, ktg, vtg])
            except Exception as exc:  # noqa: BLE001
                log(f"sdpa {name} failed", repr(exc)[:200])
        log("row", json.dumps({a: (round(b, 4) if isinstance(b, float) else b) for a, b in row.items()}))
        table.append(row)
        RESULTS["timing"] = table
        del q, k, v, do, qg, kg, vg, qt, kt, vt, qtg, ktg, vtg
        torch.cuda.empty_cache()

    def fla_rows():
        """fla's chunk_simple_gla (its own autotuning can be slow: run after the checks, within budget)."""
        for row in table:
            n = row["n"]
            if chunk_simple_gla is None or left() < 25:
                log("budget/availability: skipping fla at n >=", n)
                return
            torch.manual_seed(n)
            q, k, v, do = (torch.randn(B, n, H, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
            try:
                row["fla_fwd"] = bench(lambda: chunk_simple_gla(q, k, v, g_gamma=gamma))
                row["fla_fwdbwd"] = bench(lambda: chunk_simple_gla(qg, kg, vg, g_gamma=gamma)[0].backward(do),
                                          [qg, kg, vg])
                log(f"n={n} fla fwd {row['fla_fwd']:.3f} fwdbwd {row['fla_fwdbwd']:.3f} ms")
            except Exception as exc:  # noqa: BLE001
                log("fla failed", repr(exc)[:300])
            del q, k, v, do, qg, kg, vg
            torch.cuda.empty_cache()

    # the autotuner's choices and every config's time
    try:
        for name, fn in (("fwd", K.lightning_fwd), ("bwd", K.lightning_bwd)):
            for key, cfg in fn.cache.items():
                RESULTS["configs"][f"{name} {key}"] = str(cfg)
            timings = getattr(fn, "configs_timings", None)
            if timings:
                log(name, "last tuning:", {str(c): [round(float(x), 4) for x in (t if isinstance(t, (list, tuple)) else [t])]
                                           for c, t in timings.items()})
            log(name, "chosen:", {str(kk): str(cc) for kk, cc in fn.cache.items()})
    except Exception:  # noqa: BLE001
        log("config report failed:", traceback.format_exc()[-600:])
    save(args.out)

    # ---------------------------------------------------------------- correctness
    def check(tag, b, t, h, hkv, d, e, dtype, h0=True, reverse=False, cu=None, dst=True, fixed=None):
        g = torch.Generator(device="cpu").manual_seed(hash(tag) % 2**31)
        n_seq = b if cu is None else len(cu) - 1
        q = torch.randn(b, t, h, d, generator=g).to(dtype)
        k = torch.randn(b, t, hkv, d, generator=g).to(dtype)
        v = torch.randn(b, t, hkv, e, generator=g).to(dtype)
        s0 = torch.randn(n_seq, h, d, e, generator=g) if h0 else None
        gam = -torch.rand(h, generator=g) * 1.5
        gam[0] = 0.0
        do_ = torch.randn(b, t, h, e, generator=g).to(dtype)
        ds = torch.randn(n_seq, h, d, e, generator=g)
        xs = [x.to(dev).requires_grad_(True) for x in (q, k, v)] + ([s0.to(dev).requires_grad_(True)] if h0 else [])
        saved = (K.lightning_fwd, K.lightning_bwd, dict(OPS._INTERP_META))
        if fixed is not None:
            K.lightning_fwd = K.lightning_bwd = None
            OPS._INTERP_META.update(dict(zip(("BT", "BV", "num_warps", "num_stages"), fixed)))
        try:
            o, st = lightning_attn_triton(xs[0], xs[1], xs[2], gam.to(dev), initial_state=xs[3] if h0 else None,
                                          reverse=reverse, cu_seqlens=cu)
            loss = (o.float() * do_.to(dev).float()).sum()
            if dst:
                loss = loss + (st * ds.to(dev)).sum()
            loss.backward()
        finally:
            K.lightning_fwd, K.lightning_bwd = saved[0], saved[1]
            OPS._INTERP_META.clear()
            OPS._INTERP_META.update(saved[2])
        r = [x.detach().to(dev).double().requires_grad_(True) for x in (q, k, v)] + (
            [s0.to(dev).double().requires_grad_(True)] if h0 else [])
        ro, rs = lightning_naive(r[0], r[1], r[2], gam.double().to(dev), initial_state=r[3] if h0 else None,
                                 reverse=reverse, cu_seqlens=cu)
        rl = (ro * do_.to(dev).double()).sum()
        if dst:
            rl = rl + (rs * ds.to(dev).double()).sum()
        rl.backward()
        errs = {"o": err_ratio(o, ro), "S_T": err_ratio(st, rs)}
        for nm, a, bb in zip(["dq", "dk", "dv", "dh0"], xs, r):
            errs[nm] = err_ratio(a.grad, bb.grad)
        dname = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
        ok = all(x <= TOLERANCE[dname] for x in errs.values())
        RESULTS["errors"].append({"case": tag, "dtype": dname, "ok": ok, **errs})
        log(f"check {tag:34s} {dname} {'OK ' if ok else 'FAIL'} " + " ".join(f"{a}={b:.2e}" for a, b in errs.items()))
        return ok

    cases = []
    # every config at the benchmark's flags (no h0, loss on o only): the autotuner may pick any
    for cfg in sorted(set(K.FWD_CONFIGS) | set(K.BWD_CONFIGS)):
        cases.append((f"cfg{cfg}", dict(b=1, t=1000, h=4, hkv=4, d=128, e=128, dtype=torch.bfloat16,
                                         h0=False, dst=False, fixed=cfg)))
    cases += [
        ("tuned h0 dS_T T=2000", dict(b=2, t=2000, h=4, hkv=4, d=128, e=128, dtype=torch.bfloat16)),
        ("tuned reverse T=1000", dict(b=1, t=1000, h=4, hkv=4, d=128, e=128, dtype=torch.bfloat16, reverse=True)),
        ("tuned varlen [0,300,301,1000]", dict(b=1, t=1000, h=4, hkv=4, d=128, e=128, dtype=torch.bfloat16,
                                               cu=[0, 300, 301, 1000])),
        ("fp32 ieee T=500", dict(b=1, t=500, h=2, hkv=2, d=128, e=128, dtype=torch.float32, fixed=(64, 32, 4, 2))),
        ("fp16 T=700", dict(b=1, t=700, h=2, hkv=2, d=128, e=128, dtype=torch.float16, fixed=(64, 32, 4, 2))),
        ("bf16 gqa d96 e64 T=300", dict(b=1, t=300, h=4, hkv=2, d=96, e=64, dtype=torch.bfloat16, fixed=(64, 32, 4, 2))),
        ("bf16 d192 e48 rev T=130", dict(b=1, t=130, h=2, hkv=2, d=192, e=48, dtype=torch.bfloat16, reverse=True,
                                         fixed=(64, 32, 4, 2))),
    ]
    for tag, kw in cases:
        if left() < 40:
            log("budget: skipping remaining checks")
            break
        try:
            check(tag, **kw)
        except Exception:  # noqa: BLE001
            log("check", tag, "raised", traceback.format_exc()[-800:])
    save(args.out)

    if args.jax and left() > 60:
        try:
            jax_checks(log)
        except Exception:  # noqa: BLE001
            log("jax bridge failed:", traceback.format_exc()[-1500:])
        save(args.out)
    fla_rows()
    save(args.out)
    summary = table_text(table)
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(summary)
    print(summary, flush=True)


def table_text(table):
    lines = ["n      | mine fwd / fwd+bwd | fla fwd / fwd+bwd | flash fwd / fwd+bwd | cudnn fwd / fwd+bwd (ms)"]
    for r in table:
        def f(key):
            x = r.get(key)
            return f"{x:7.3f}" if isinstance(x, float) else "      -"
        lines.append(f"{r['n']:6d} | {f('mine_fwd')} / {f('mine_fwdbwd')} | {f('fla_fwd')} / {f('fla_fwdbwd')} | "
                     f"{f('flash_fwd')} / {f('flash_fwdbwd')} | {f('cudnn_fwd')} / {f('cudnn_fwdbwd')}")
    bad = [e["case"] for e in RESULTS["errors"] if not e["ok"]]
    lines.append(f"checks: {len(RESULTS['errors'])} run, failures: {bad}; memory {RESULTS['memory']}")
    lines.append("configs: " + json.dumps(RESULTS["configs"]))
    return "\n".join(lines) + "\n"


def jax_checks(log):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from triton.testing import do_bench

    from lattnbench.kernels.naive.torch_ref import lightning_naive
    from lattnbench.kernels.triton.lightning.jax_bridge import lightning_attn_jax_triton
    from lattnbench.tolerance import err_ratio

    rng = np.random.default_rng(0)
    b, t, h, d, e = 1, 300, 4, 64, 64
    q, k, v = (rng.standard_normal((b, t, h, x)).astype(np.float32) for x in (d, d, e))
    s0 = rng.standard_normal((b, h, d, e)).astype(np.float32)
    gam = -rng.random(h).astype(np.float32)
    do, ds = rng.standard_normal((b, t, h, e)).astype(np.float32), rng.standard_normal((b, h, d, e)).astype(np.float32)
    for rev in (False, True):
        def loss(q, k, v, s0):
            o, st = lightning_attn_jax_triton(q, k, v, gam, None, s0, reverse=rev)
            return jnp.sum(o * do) + jnp.sum(st * ds), (o, st)
        (val, (o, st)), grads = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, s0)
        r = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v, s0)]
        ro, rs = lightning_naive(r[0], r[1], r[2], torch.tensor(gam, dtype=torch.float64), initial_state=r[3], reverse=rev)
        ((ro * torch.tensor(do, dtype=torch.float64)).sum() + (rs * torch.tensor(ds, dtype=torch.float64)).sum()).backward()
        errs = {"o": err_ratio(np.asarray(o), ro), "S_T": err_ratio(np.asarray(st), rs)}
        errs.update({nm: err_ratio(np.asarray(gr), rr.grad) for nm, gr, rr in zip(["dq", "dk", "dv", "dh0"], grads, r)})
        ok = all(x <= 1e-5 for x in errs.values())
        RESULTS["errors"].append({"case": f"jax-triton fp32 rev={rev}", "dtype": "fp32", "ok": ok, **errs})
        log(f"jax-triton fp32 reverse={rev} {'OK' if ok else 'FAIL'}", {a: f"{x:.2e}" for a, x in errs.items()})
    # speed at B4 H32 D=E=128 bf16 n=8192
    n = 8192
    key = jax.random.PRNGKey(0)
    qj, kj, vj = (jax.random.normal(jax.random.fold_in(key, i), (4, n, 32, 128), jnp.bfloat16) for i in range(3))
    gj = jnp.asarray(-np.linspace(0, 1, 32), jnp.float32)
    fwd = jax.jit(lambda q, k, v: lightning_attn_jax_triton(q, k, v, gj)[0])
    grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(lightning_attn_jax_triton(q, k, v, gj)[0].astype(jnp.float32)),
                            argnums=(0, 1, 2)))
    for name, fn in (("fwd", fwd), ("grad", grad)):
        jax.block_until_ready(fn(qj, kj, vj))
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(qj, kj, vj))
            ts.append(time.perf_counter() - t0)
        log(f"jax-triton {name} n={n} median {1e3 * sorted(ts)[len(ts) // 2]:.3f} ms (host clock, block_until_ready)")
    del do_bench


def save(out):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
