"""GPU probe of the Triton backward paths (split: three launches; one: the same three passes in one
launch; fused: dq pass + fused dk/dv pass), torch and jax-triton, side by side in one process.

    OUT=dir python3 bench/bwd_paths_dev.py       (GPU; ~2 min)

1. agree: per path, bf16 grads against the split path's at n=1024 (plain, h0 + reverse, GQA with
   D≠E): max rel err per tensor (autotune may pick other tiles per path, so not bit-identical);
   jax-triton one-call vs three-call grads the same way;
2. time: the harness's own measurement (TorchProblem, CUDA events, L2 flush) of bwd and fwdbwd at
   B4 H32 D=E=128 bf16, n = 512 … 32768, the paths interleaved per n; jax-triton fwdbwd
   (host-clock batches, as the harness times JAX) one-call vs three-call at n = 4096, 32768.
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devrun import DevRun  # noqa: E402

from lattnbench.kernels.triton.lightning import ops  # noqa: E402
from lattnbench.registry import default_registry  # noqa: E402
from lattnbench.spec import Case  # noqa: E402
from lattnbench.timing import measure  # noqa: E402
from lattnbench.torch_fw import TorchProblem, l2_flusher  # noqa: E402

RUN = DevRun("bwd_paths_dev", float(os.environ.get("BWD_BUDGET_S", "200")), ("agree", "time", "jax"))
PATHS = tuple(os.environ.get("BWD_PATHS", "split,one,fused").split(","))


def rel(x, ref):
    x, ref = x.float(), ref.float()
    return float(f"{((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item():.2e}")


def agree():
    from lattnbench.kernels.triton.lightning import lightning_attn_triton

    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = {"plain": dict(h=32, hkv=32, d=128, e=128, h0=False, rev=False),
             "h0_reverse": dict(h=8, hkv=8, d=128, e=128, h0=True, rev=True),
             "gqa_d96_e64": dict(h=8, hkv=2, d=96, e=64, h0=True, rev=False)}
    for name, c in cases.items():
        b, t = 2, 1024
        q = torch.randn(b, t, c["h"], c["d"], device="cuda", generator=gen).bfloat16()
        k = torch.randn(b, t, c["hkv"], c["d"], device="cuda", generator=gen).bfloat16()
        v = torch.randn(b, t, c["hkv"], c["e"], device="cuda", generator=gen).bfloat16()
        s0 = torch.randn(b, c["h"], c["d"], c["e"], device="cuda", generator=gen) if c["h0"] else None
        do = torch.randn(b, t, c["h"], c["e"], device="cuda", generator=gen).bfloat16()
        ds = torch.randn(b, c["h"], c["d"], c["e"], device="cuda", generator=gen)
        gam = -torch.rand(c["h"], device="cuda", generator=gen) * 0.5
        got = {}
        for path in PATHS:
            ops.set_bwd_path(path)
            leaves = [x.clone().requires_grad_(True) for x in (q, k, v)] + \
                ([s0.clone().requires_grad_(True)] if s0 is not None else [])
            o, st = lightning_attn_triton(*leaves[:3], gamma=gam, initial_state=leaves[3] if s0 is not None else None,
                                          reverse=c["rev"])
            got[path] = torch.autograd.grad((o, st), leaves, (do, ds))
        ops.set_bwd_path(None)
        for path in ("one", "fused"):
            RUN.guarded("agree", f"{name} {path} vs split",
                        lambda path=path: {nm: rel(a, b) for nm, a, b in zip(("dq", "dk", "dv", "dh0"), got[path], got["split"])})


def time_paths():
    entry = default_registry()["lightning/triton"]
    flush = l2_flusher("cuda")
    for n in (int(x) for x in os.environ.get("BWD_SIZES", "512,1024,2048,4096,8192,32768").split(",")):
        case = Case(batch=4, seqlen=n, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16")
        prob = TorchProblem(entry, case, "cuda")
        for mode in ("bwd", "fwdbwd"):
            for path in PATHS:
                def one(path=path, mode=mode):
                    ops.set_bwd_path(path)
                    fn = prob.bwd_callable() if mode == "bwd" else prob.fwdbwd
                    t = measure(fn, prob.sync, cuda_events=True, flush=flush, budget_s=0.5, min_reps=10)
                    return {"median_ms": round(t.median, 4), "p20": round(t.quantile(0.2), 4),
                            "p80": round(t.quantile(0.8), 4)}
                RUN.guarded("time", f"n{n} {mode} {path}", one)
        ops.set_bwd_path(None)
        del prob
        torch.cuda.empty_cache()


def jax_paths():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from lattnbench.kernels.triton.lightning import jax_bridge

    def grads(one, q, k, v, g, do, ds):
        jax_bridge.JAX_BWD_ONE = one
        jax_bridge._FN = None

        def f(q, k, v):
            return jax_bridge.lightning_attn_jax_triton(q, k, v, gamma=g)
        out, vjp = jax.vjp(f, q, k, v)
        return vjp((do, ds))

    rng = np.random.default_rng(0)
    for n in (int(x) for x in os.environ.get("BWD_JAX_SIZES", "1024,4096,32768").split(",")):
        b, h, d = 4, 32, 128
        q, k, v, do = (jnp.asarray(rng.standard_normal((b, n, h, d)), jnp.bfloat16) for _ in range(4))
        ds = jnp.asarray(rng.standard_normal((b, h, d, d)), jnp.float32)
        g = jnp.asarray(-rng.random(h) * 0.5, jnp.float32)
        if n == 1024:
            def cmp():
                a = grads(True, q, k, v, g, do, ds)
                r = grads(False, q, k, v, g, do, ds)
                return {nm: rel(torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.float32)))
                        for nm, x, y in zip(("dq", "dk", "dv"), a, r)}
            RUN.guarded("jax", f"n{n} one-call vs three-call grads", cmp)
            continue
        for one in (False, True):
            def tm(one=one):
                jax_bridge.JAX_BWD_ONE = one
                jax_bridge._FN = None

                @jax.jit
                def step(q, k, v):
                    out, vjp = jax.vjp(lambda q, k, v: jax_bridge.lightning_attn_jax_triton(q, k, v, gamma=g), q, k, v)
                    return out, vjp((do, ds))
                t = measure(lambda: step(q, k, v), jax.block_until_ready, budget_s=0.5, min_reps=10,
                            batch_short=True)
                return {"median_ms": round(t.median, 4), "method": t.method}
            RUN.guarded("jax", f"n{n} fwdbwd {'one-call' if one else 'three-call'}", tm)


def main():
    RUN.run_sections({"agree": agree, "time": time_paths, "jax": jax_paths},
                     [a for a in sys.argv[1:] if not a.startswith("-")] or ["agree", "time", "jax"])


if __name__ == "__main__":
    main()
