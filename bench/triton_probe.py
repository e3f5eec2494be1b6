"""Bound analysis + fused-backward check for the Triton Lightning kernels (one GPU call, <= ~150 s).

    bash -c 'source bench/gpu_setup.sh; python3 bench/triton_probe.py'      (OUT=dir for the JSON)

B4 H32 D=E=128 bf16, do_bench medians (ms):
  1. fwd: autotuned default; pinned (64,64,4,2) with PROBE 0..4 (0 real, 1 SKIP_INTRA,
     2 SKIP_STATE, 3 STREAM_ONLY = same grid and bytes, 4 NO_DECAY); a wide-grid streaming
     kernel (same bytes, T/64·B·H programs) = what this traffic costs at full parallelism;
  2. bwd split vs fused (fused BV=128 autotuned, fused BV=64 = fp32 dk partials): backward alone
     (ops.lightning_bwd) and fwd+bwd (torch.autograd.grad); each fused config pinned; peak memory;
  3. bf16 agreement (fp64 reference) of split and fused at T=1000 with GQA, reverse, h0, dS_T;
  4. n=512/1024: fwd, bwd, fwd+bwd eager and as a CUDA graph (host-overhead test).
Every measurement is wrapped: a failure prints one line and the rest goes on.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import triton
import triton.language as tl

T0 = time.time()
R: dict = {"fwd": {}, "bwd": {}, "fused_cfg": {}, "memory_MB": {}, "accuracy": {}, "small": {}, "fail": []}
B, H, D, E = 4, 32, 128, 128
PIN = (64, 64, 4, 2)  # (BT, BV, warps, stages): the autotuner's pick in run 2
PROBES = {0: "real", 1: "skip_intra", 2: "skip_state", 3: "stream_only", 4: "no_decay"}


@triton.jit
def stream_wide(a, b, c, o, T, HD: tl.constexpr, BT: tl.constexpr):
    # rows [i·BT, (i+1)·BT) of [B·T, H·D] flat: o = c + rowsum(a + b) (the probe's STREAM_ONLY math)
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    r = i * BT + tl.arange(0, BT)
    cols = j * 128 + tl.arange(0, 128)
    off = r[:, None] * HD + cols[None, :]
    x = tl.load(a + off).to(tl.float32) + tl.load(b + off).to(tl.float32)
    y = tl.load(c + off).to(tl.float32) + tl.sum(x, 1)[:, None]
    tl.store(o + off, y.to(o.dtype.element_ty))



def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def _pw(x):
    return max(16, 1 << (int(x) - 1).bit_length())


def _warm(job):
    """Subprocess: compile one kernel variant into Triton's disk cache."""
    import torch

    from lattnbench.kernels.triton.lightning import kernels as K
    kind, cfg = job
    t, dev, dt = 512, "cuda", torch.bfloat16
    q = torch.randn(1, t, H, D, device=dev, dtype=dt)
    g = torch.zeros(H, device=dev)
    o = torch.empty(1, t, H, E, device=dev, dtype=dt)
    st = torch.empty(1, H, D, E, device=dev)
    try:
        if kind == "fwd":
            bt, bv, w, s, probe = cfg
            K.lightning_fwd_kernel.warmup(q, q, q, g, g, g, t, H, H, 0.1, 0, o, st, KD=D, VD=E, BK=_pw(D),
                                          REVERSE=False, HAS_H0=False, STORE_HT=True, IS_VARLEN=False,
                                          DOT_PREC="tf32", BT=bt, BV=bv, PROBE=probe, num_warps=w,
                                          num_stages=s, grid=(1,))
        elif kind == "bwd":
            role, (bt, bv, w, s) = cfg
            K.lightning_bwd_kernel.warmup(q, q, q, q, g, g, g, g, t, H, H, 0.1, 0, o, g, KD=D, VD=E, BKD=_pw(D),
                                          BVD=_pw(E), ROLE=role, REVERSE=False, HAS_H0=False, HAS_DHT=False,
                                          IS_VARLEN=False, DOT_PREC="tf32", BT=bt, BV=bv, num_warps=w,
                                          num_stages=s, grid=(1,))
        else:
            bv, (bt, w, s) = cfg
            dk = o if bv >= E else torch.empty(2, 1, t, H, D, device=dev)
            K.lightning_bwd_dkdv_kernel.warmup(q, q, q, q, g, g, g, t, H, H, 0.1, 0, 0, dk, o, g, KD=D, VD=E,
                                               BKD=_pw(D), REVERSE=False, HAS_H0=False, HAS_DHT=False,
                                               IS_VARLEN=False, DOT_PREC="tf32", BV=bv, BT=bt, num_warps=w,
                                               num_stages=s, grid=(1,))
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{job}: {exc!r}"[:300]


def precompile():
    import multiprocessing as mp

    from lattnbench.kernels.triton.lightning import kernels as K
    jobs = [("fwd", (*c, 0)) for c in K.FWD_CONFIGS] + [("fwd", (*PIN, p)) for p in PROBES if p]
    jobs += [("bwd", (r, c)) for r in range(3) for c in K.BWD_CONFIGS]
    jobs += [("fused", (bv, c)) for bv in (128, 64) for c in K.FUSED_CONFIGS]
    t = time.time()
    with mp.get_context("spawn").Pool(min(16, len(jobs))) as pool:
        errs = [x for x in pool.map(_warm, jobs) if x]
    log(f"precompiled {len(jobs)} kernels in {time.time() - t:.1f}s; failures: {errs}")
    R["precompile_failures"] = errs


def main():
    out_dir = os.environ.get("OUT")
    import torch
    from triton.testing import do_bench

    from lattnbench.kernels.decay import lightning_decay
    from lattnbench.kernels.naive.torch_ref import lightning_naive
    from lattnbench.kernels.triton.lightning import kernels as K
    from lattnbench.kernels.triton.lightning import lightning_attn_triton
    from lattnbench.kernels.triton.lightning import ops as OPS
    from lattnbench.tolerance import TOLERANCE, err_ratio

    dev = "cuda"
    R["env"] = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()}
    log(R["env"])
    try:
        precompile()
    except Exception:  # noqa: BLE001
        log("precompile failed:", traceback.format_exc()[-500:])

    def bench(fn):
        return do_bench(fn, warmup=25, rep=60, return_mode="median")

    def measure(section, key, fn):
        try:
            R[section][key] = ms = bench(fn)
            log(f"{section:9s} {key:34s} {ms:8.3f} ms")
        except Exception as exc:  # noqa: BLE001
            R["fail"].append(f"{section}/{key}: {exc!r}"[:400])
            log(f"FAILED {section}/{key}: {exc!r}"[:400])
            torch.cuda.synchronize()

    gamma = torch.as_tensor(lightning_decay(H, 1, 4), device=dev, dtype=torch.float32)
    scale = D**-0.5

    def fwd_pinned(q, k, v, o, ht, probe, cfg=PIN):
        bt, bv, w, s = cfg
        n = q.shape[1]
        K.lightning_fwd_kernel[(triton.cdiv(E, bv), B * H)](
            q, k, v, gamma, gamma, gamma, n, H, H, scale, 2, o, ht, KD=D, VD=E, BK=_pw(D), REVERSE=False,
            HAS_H0=False, STORE_HT=True, IS_VARLEN=False, DOT_PREC="tf32", BT=bt, BV=bv, PROBE=probe,
            num_warps=w, num_stages=s)

    def fused_pinned(q, k, v, do, dk, dv, bv, cfg):
        bt, w, s = cfg
        n = q.shape[1]
        ns = triton.cdiv(E, bv)
        K.lightning_bwd_dkdv_kernel[(ns, B * H)](
            q, k, v, do, gamma, gamma, gamma, n, H, H, scale, 2, B * n * H * D if ns > 1 else 0, dk, dv, gamma,
            KD=D, VD=E, BKD=_pw(D), REVERSE=False, HAS_H0=False, HAS_DHT=False, IS_VARLEN=False,
            DOT_PREC="tf32", BV=bv, BT=bt, num_warps=w, num_stages=s)

    paths = (("split", None), ("fused", None), ("fused_bv64", 64))
    for n in (8192, 32768):
        torch.manual_seed(n)
        q, k, v, do = (torch.randn(B, n, H, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
        o = torch.empty_like(q)
        ht = torch.empty(B, H, D, E, device=dev)
        nb = 4 * q.numel() * 2
        R["fwd"][f"bytes_{n}"] = nb
        measure("fwd", f"n{n} default(autotuned)", lambda: lightning_attn_triton(q, k, v, gamma))
        for p, name in PROBES.items():
            measure("fwd", f"n{n} pin{PIN} {name}", lambda p=p: fwd_pinned(q, k, v, o, ht, p))
        measure("fwd", f"n{n} stream_wide", lambda: stream_wide[(B * n // 64, H * D // 128)](
            q, k, v, o, n, H * D, 64, num_warps=4))
        measure("fwd", f"n{n} torch_copy_2tensors", lambda: o.copy_(q))
        # backward alone (kernels + the small torch steps), then fwd+bwd through autograd
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        for tag, bv in paths:
            OPS.set_bwd_path("split" if tag == "split" else "fused", bv)
            measure("bwd", f"n{n} {tag} bwd", lambda: OPS.lightning_bwd(q, k, v, do, gamma, scale, None, None,
                                                                     False, None, B))
            measure("bwd", f"n{n} {tag} fwd+bwd", lambda: torch.autograd.grad(
                lightning_attn_triton(qg, kg, vg, gamma)[0], (qg, kg, vg), do))
        OPS.set_bwd_path(None)
        if n == 32768:
            dk32 = torch.empty(2, B, n, H, D, device=dev)
            dv = torch.empty_like(q)
            for bv in (128, 64):
                for cfg in K.FUSED_CONFIGS:
                    dk = q.new_empty(q.shape) if bv == 128 else dk32
                    measure("fused_cfg", f"n{n} BV{bv} (BT,w,s)={cfg}",
                            lambda bv=bv, cfg=cfg, dk=dk: fused_pinned(q, k, v, do, dk, dv, bv, cfg))
            del dk32, dv
            for tag, bv in paths:
                try:
                    OPS.set_bwd_path("split" if tag == "split" else "fused", bv)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    grads = torch.autograd.grad(lightning_attn_triton(qg, kg, vg, gamma)[0], (qg, kg, vg), do)
                    torch.cuda.synchronize()
                    R["memory_MB"][f"n{n} {tag} fwd+bwd"] = (torch.cuda.max_memory_allocated() - base) / 2**20
                    del grads
                    log("peak memory", tag, R["memory_MB"][f"n{n} {tag} fwd+bwd"])
                except Exception as exc:  # noqa: BLE001
                    R["fail"].append(f"memory {tag}: {exc!r}"[:300])
                    log("FAILED memory", tag, repr(exc)[:300])
            OPS.set_bwd_path(None)
        try:
            R["autotune"] = {f"{nm} {kk}": str(cc) for nm, fn in (("fwd", K.lightning_fwd), ("bwd", K.lightning_bwd),
                                                                  ("fused", K.lightning_bwd_dkdv))
                             for kk, cc in fn.cache.items()}
        except Exception as exc:  # noqa: BLE001
            log("autotune report failed", repr(exc))
        del q, k, v, do, o, qg, kg, vg
        torch.cuda.empty_cache()
        save(out_dir)

    # ---------------------------------------------------------------- accuracy (bf16 vs fp64)
    def accuracy(tag, path, bv):
        g = torch.Generator().manual_seed(7)
        b, t, h, hkv, d, e = 2, 1000, 8, 2, 128, 128
        qc = torch.randn(b, t, h, d, generator=g).bfloat16()
        kc = torch.randn(b, t, hkv, d, generator=g).bfloat16()
        vc = torch.randn(b, t, hkv, e, generator=g).bfloat16()
        s0 = torch.randn(b, h, d, e, generator=g)
        gam = -torch.rand(h, generator=g) * 1.5
        gam[0] = 0.0
        doc = torch.randn(b, t, h, e, generator=g).bfloat16()
        ds = torch.randn(b, h, d, e, generator=g)
        xs = [x.to(dev).requires_grad_(True) for x in (qc, kc, vc, s0)]
        OPS.set_bwd_path(path, bv)
        saved = (K.lightning_fwd, K.lightning_bwd, K.lightning_bwd_dkdv, dict(OPS._INTERP_META))
        K.lightning_fwd = K.lightning_bwd = K.lightning_bwd_dkdv = None  # fixed config PIN: few compiles
        OPS._INTERP_META.update(dict(zip(("BT", "BV", "num_warps", "num_stages"), PIN)))
        try:
            o_, st = lightning_attn_triton(*xs[:3], gam.to(dev), initial_state=xs[3], reverse=True)
            ((o_.float() * doc.to(dev).float()).sum() + (st * ds.to(dev)).sum()).backward()
        finally:
            OPS.set_bwd_path(None)
            K.lightning_fwd, K.lightning_bwd, K.lightning_bwd_dkdv = saved[:3]
            OPS._INTERP_META.clear()
            OPS._INTERP_META.update(saved[3])
        r = [x.to(dev).double().requires_grad_(True) for x in (qc, kc, vc, s0)]
        ro, rs = lightning_naive(*r[:3], gam.double().to(dev), initial_state=r[3], reverse=True)
        ((ro * doc.to(dev).double()).sum() + (rs * ds.to(dev).double()).sum()).backward()
        errs = {"o": err_ratio(o_, ro), "S_T": err_ratio(st, rs)}
        errs.update({nm: err_ratio(a.grad, bb.grad) for nm, a, bb in zip(["dq", "dk", "dv", "dh0"], xs, r)})
        ok = all(x <= TOLERANCE["bf16"] for x in errs.values())
        R["accuracy"][tag] = {"ok": ok, **errs}
        log(f"accuracy {tag:12s} {'OK' if ok else 'FAIL'} " + " ".join(f"{a}={x:.2e}" for a, x in errs.items()))

    for tag, path, bv in (("split", "split", None), ("fused", "fused", None), ("fused_bv64", "fused", 64)):
        try:
            accuracy(tag, path, bv)
        except Exception as exc:  # noqa: BLE001
            R["fail"].append(f"accuracy {tag}: {exc!r}"[:400])
            log("FAILED accuracy", tag, traceback.format_exc()[-600:])
    save(out_dir)

    # ---------------------------------------------------------------- small n: host overhead?
    for n in (512, 1024):
        torch.manual_seed(n)
        q, k, v, do = (torch.randn(B, n, H, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

        def fwd():
            return lightning_attn_triton(q, k, v, gamma)

        def bwd():
            return OPS.lightning_bwd(q, k, v, do, gamma, scale, None, None, False, None, B)

        def fwdbwd():
            return torch.autograd.grad(lightning_attn_triton(qg, kg, vg, gamma)[0], (qg, kg, vg), do)

        for path in ("split", "fused"):
            OPS.set_bwd_path(path)
            for name, fn in (("fwd", fwd), ("bwd", bwd), ("fwd+bwd", fwdbwd)):
                if name == "fwd" and path == "fused":
                    continue
                measure("small", f"n{n} {path} {name} eager", fn)
                try:
                    fn()  # autotune outside the capture
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(3):
                            fn()
                    torch.cuda.current_stream().wait_stream(s)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        fn()
                    measure("small", f"n{n} {path} {name} graph", graph.replay)
                    # host time of one eager call (no sync): the launch cost the graph removes
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    for _ in range(20):
                        fn()
                    R["small"][f"n{n} {path} {name} host_ms"] = (time.perf_counter() - t) / 20 * 1e3
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001
                    R["fail"].append(f"graph n{n} {path} {name}: {exc!r}"[:400])
                    log(f"FAILED graph n{n} {path} {name}: {exc!r}"[:400])
        OPS.set_bwd_path(None)
        del q, k, v, do, qg, kg, vg
        torch.cuda.empty_cache()
    save(out_dir)
    print(table(), flush=True)
    if out_dir:
        with open(os.path.join(out_dir, "triton_probe.txt"), "w") as f:
            f.write(table())


def table():
    lines = [f"== triton_probe  {R.get('env')}  total {time.time() - T0:.0f}s"]
    for sec in ("fwd", "bwd", "fused_cfg", "small"):
        for key, val in R[sec].items():
            if isinstance(val, float) and not key.startswith("bytes"):
                extra = ""
                if sec == "fwd":
                    n = key.split()[0][1:]
                    nb = R["fwd"].get(f"bytes_{n}")
                    if nb and "copy" not in key:
                        extra = f"   {nb / val / 1e9:6.2f} TB/s (q,k,v,o)"
                lines.append(f"{sec:9s} {key:40s} {val:8.3f}{' ms' if 'host' not in key else ' ms host'}{extra}")
    for key, val in R["memory_MB"].items():
        lines.append(f"memory    {key:40s} {val:8.0f} MB above inputs")
    for key, val in R["accuracy"].items():
        lines.append(f"accuracy  {key:12s} " + " ".join(f"{a}={x:.2e}" if isinstance(x, float) else f"{a}={x}"
                                                       for a, x in val.items()))
    lines.append(f"autotune  {R.get('autotune')}")
    lines.append(f"failures  {len(R['fail'])}: " + " | ".join(R["fail"]))
    return "\n".join(lines) + "\n"


def save(out_dir):
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "triton_probe.json"), "w") as f:
            json.dump(R, f, indent=1, default=str)


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001
        log("probe aborted:", traceback.format_exc()[-1500:])
        save(os.environ.get("OUT"))
        print(table(), flush=True)
    sys.exit(0)
