"""Session-2 GPU probe for the Triton Lightning kernels (one call, budget-checked).

    bash -c 'source bench/gpu_setup.sh; python3 bench/triton_dev2.py'   (OUT=dir for log + JSON)

1. host overhead at small n (B4 H32 D128 bf16, n=512/1024): wall time per call of many
   back-to-back fwd / fwd+bwd calls (host-bound there), a cProfile of fwd+bwd, and the host cost
   of one launch: autotuned wrapper vs plain JIT with a fixed config vs the CompiledKernel runner;
2. forward with TMA tensor descriptors (host TensorDescriptor on the [B·T, H·D] view, forward
   direction, no varlen) vs the autotuned pointer kernel, n=8192 and 32768, several configs;
   a pointer-load twin of the same simplified loop isolates the TMA effect.
Each measurement is wrapped: a failure logs one line and the rest goes on.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devrun import DevRun  # noqa: E402

RUN = DevRun("triton_dev2", float(os.environ.get("DEV2_BUDGET_S", "200")),
             ("host", "tma", "fast", "prof", "thread"))
R, log, guarded, OUT = RUN.results, RUN.log, RUN.guarded, RUN.out
B, H, D = 4, 32, 128


def wall_ms(fn, reps=300, warm=10, sync_each=False, scale=1e3, digits=4):
    """Host wall time per call of back-to-back calls (one sync at the end unless sync_each), in
    ms (scale=1e6: µs). Host-bound small calls measure host cost; others the GPU's."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return round((time.perf_counter() - t) / reps * scale, digits)


# ---- TMA forward probe (forward direction, T % BT == 0, no varlen, D = E = BK) -------------------
@triton.jit
def fwd_tma(q_desc, k_desc, v_desc, o_desc, g, T, H, scale,
            D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr = False):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_b = i_nh // H
    i_h = i_nh % H
    gam = tl.load(g + i_h).to(tl.float32)
    pf = tl.arange(0, BT).to(tl.float32)
    diff = pf[:, None] - pf[None, :]
    m_intra = tl.where(diff >= 0, tl.exp(gam * tl.maximum(diff, 0.0)), 0.0) * scale
    qdec = tl.exp(gam * (pf + 1.0)) * scale
    kdec = tl.exp(gam * (BT - 1.0 - pf))
    lam = tl.exp(gam * BT)
    S = tl.zeros([D, BV], dtype=tl.float32)
    row0 = i_b * T
    col_k = i_h * D
    col_v = i_h * D + i_v * BV
    for i_c in tl.range(0, T // BT, num_stages=STAGES, warp_specialize=WS):
        r = row0 + i_c * BT
        a = q_desc.load([r, col_k])
        b = k_desc.load([r, col_k])
        c = v_desc.load([r, col_v])
        acc = tl.dot(a, S.to(a.dtype)) * qdec[:, None]
        s = tl.dot(a, tl.trans(b)) * m_intra
        acc = tl.dot(s.to(a.dtype), c, acc)
        S = tl.dot(tl.trans(b), (c * kdec[:, None]).to(a.dtype), S * lam)
        o_desc.store([r, col_v], acc.to(a.dtype))


@triton.jit
def fwd_ptr(q, k, v, o, g, T, H, scale,
            D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, STAGES: tl.constexpr):
    """The same simplified loop with pointer loads."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_b = i_nh // H
    i_h = i_nh % H
    gam = tl.load(g + i_h).to(tl.float32)
    o_t = tl.arange(0, BT)
    pf = o_t.to(tl.float32)
    diff = pf[:, None] - pf[None, :]
    m_intra = tl.where(diff >= 0, tl.exp(gam * tl.maximum(diff, 0.0)), 0.0) * scale
    qdec = tl.exp(gam * (pf + 1.0)) * scale
    kdec = tl.exp(gam * (BT - 1.0 - pf))
    lam = tl.exp(gam * BT)
    S = tl.zeros([D, BV], dtype=tl.float32)
    HD = H * D
    o_d = tl.arange(0, D)
    o_v = i_v * BV + tl.arange(0, BV)
    base = (i_b.to(tl.int64) * T) * HD + i_h * D
    for i_c in tl.range(0, T // BT, num_stages=STAGES):
        rows = (i_c * BT + o_t).to(tl.int64) * HD
        a = tl.load(q + base + rows[:, None] + o_d[None, :])
        b = tl.load(k + base + rows[:, None] + o_d[None, :])
        c = tl.load(v + base + rows[:, None] + o_v[None, :])
        acc = tl.dot(a, S.to(a.dtype)) * qdec[:, None]
        s = tl.dot(a, tl.trans(b)) * m_intra
        acc = tl.dot(s.to(a.dtype), c, acc)
        S = tl.dot(tl.trans(b), (c * kdec[:, None]).to(a.dtype), S * lam)
        tl.store(o + base + rows[:, None] + o_v[None, :], acc.to(a.dtype))


def tma_section(n_list=(8192, 32768), cfgs=None, kinds=("tma", "ptr")):
    from triton.testing import do_bench
    from triton.tools.tensor_descriptor import TensorDescriptor

    from lattnbench.kernels.decay import alibi_decay
    from lattnbench.kernels.triton.lightning import lightning_attn_triton

    cfgs = cfgs or [(64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (64, 32, 4, 3),
                    (128, 64, 8, 2), (64, 128, 4, 2)]
    for n in n_list:
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        g = torch.as_tensor(alibi_decay(H), device="cuda", dtype=torch.float32)
        scale = D ** -0.5
        ref = lightning_attn_triton(q, k, v, gamma=g, scale=scale, output_final_state=False)[0]
        guarded("tma", f"n{n} real(autotuned)",
                lambda: round(do_bench(lambda: lightning_attn_triton(q, k, v, gamma=g, scale=scale,
                                                                     output_final_state=False),
                                       warmup=25, rep=60, return_mode="median"), 4))
        q2, k2, v2 = (x.view(B * n, H * D) for x in (q, k, v))
        for bt, bv, w, st in cfgs:
            if RUN.over_budget():
                break
            for kind in kinds:
                o = torch.full_like(q, float("nan"))
                o2 = o.view(B * n, H * D)
                grid = (D // bv, B * H)
                if kind in ("tma", "tma-ws"):
                    dq = TensorDescriptor(q2, list(q2.shape), list(q2.stride()), [bt, D])
                    dk = TensorDescriptor(k2, list(k2.shape), list(k2.stride()), [bt, D])
                    dv = TensorDescriptor(v2, list(v2.shape), list(v2.stride()), [bt, bv])
                    do_ = TensorDescriptor(o2, list(o2.shape), list(o2.stride()), [bt, bv])
                    fn = lambda ws=(kind == "tma-ws"): fwd_tma[grid](  # noqa: E731
                        dq, dk, dv, do_, g, n, H, scale, D=D, BT=bt, BV=bv, STAGES=st, WS=ws,
                        num_warps=w, num_stages=st)
                else:
                    fn = lambda: fwd_ptr[grid](q, k, v, o, g, n, H, scale, D=D, BT=bt, BV=bv,  # noqa: E731
                                               STAGES=st, num_warps=w, num_stages=st)

                def run(fn=fn, o=o):
                    fn()
                    torch.cuda.synchronize()
                    err = ((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                    ms = do_bench(fn, warmup=25, rep=60, return_mode="median")
                    return {"ms": round(ms, 4), "err": float(f"{err:.2e}")}
                guarded("tma", f"n{n} {kind} {(bt, bv, w, st)}", run)
        del q, k, v, q2, k2, v2
        torch.cuda.empty_cache()


# ---- host overhead ---------------------------------------------------------------------------------
def host_section():
    from lattnbench.kernels.decay import alibi_decay
    from lattnbench.kernels.triton.lightning import kernels as K
    from lattnbench.kernels.triton.lightning import lightning_attn_triton

    g = torch.as_tensor(alibi_decay(H), device="cuda", dtype=torch.float32)
    for n in (512, 1024):
        q, k, v = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn_like(q)
        ds = torch.randn(B, H, D, D, device="cuda")

        def fwd():
            return lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5)

        def fwdbwd():
            o, s = lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5)
            return torch.autograd.grad((o, s), (q, k, v), (do, ds))

        def fwdbwd_no_ds():
            o, s = lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5)
            return torch.autograd.grad((o,), (q, k, v), (do,))

        for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd), ("fwdbwd_no_dS", fwdbwd_no_ds)):
            guarded("host", f"n{n} {name} wall ms/call (back-to-back)", lambda fn=fn: wall_ms(fn))

            def gpu(fn=fn):
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        fn()
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn()
                graph.replay()
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(300):
                    graph.replay()
                torch.cuda.synchronize()
                return round((time.perf_counter() - t) / 300 * 1e3, 4)
            guarded("host", f"n{n} {name} cuda-graph ms/call", gpu)
        if n == 512:
            def prof():
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(200):
                    fwdbwd()
                pr.disable()
                torch.cuda.synchronize()
                sio = io.StringIO()
                pstats.Stats(pr, stream=sio).sort_stats("tottime").print_stats(30)
                text = sio.getvalue()
                with open(os.path.join(OUT, "triton_dev2_profile.txt"), "w") as f:
                    f.write(text)
                sio2 = io.StringIO()
                pstats.Stats(pr, stream=sio2).sort_stats("cumulative").print_stats(40)
                with open(os.path.join(OUT, "triton_dev2_profile_cum.txt"), "w") as f:
                    f.write(sio2.getvalue())
                return "written"
            guarded("host", "profile fwdbwd n512", prof)

    # host cost of one launch, tiny problem (GPU time ~ a few us)
    q, k, v = (torch.randn(1, 64, 1, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    g1 = g[:1].contiguous()
    args = (q, k, v, g1, g1, g1, 64, 1, 1, D ** -0.5, 0, o, o)
    kw = dict(KD=D, VD=D, BK=D, REVERSE=False, HAS_H0=False, STORE_HT=False, IS_VARLEN=False, DOT_PREC="tf32")
    grid_fn = lambda meta: (triton.cdiv(D, meta["BV"]), 1)  # noqa: E731

    def per_launch(fn, reps=2000):
        return wall_ms(fn, reps, warm=20, scale=1e6, digits=2)
    guarded("host", "launch us autotuned", lambda: per_launch(lambda: K.lightning_fwd[grid_fn](*args, **kw)))
    fixed = dict(BT=64, BV=64, num_warps=4, num_stages=2)
    guarded("host", "launch us plain jit", lambda: per_launch(
        lambda: K.lightning_fwd_kernel[(2, 1)](*args, **kw, **fixed)))

    def compiled_runner():
        ck = K.lightning_fwd_kernel.warmup(*args, **kw, **fixed, grid=(2, 1))
        runner = ck[(2, 1, 1)]
        full = list(args) + [kw[k_] for k_ in ("KD", "VD", "BK", "REVERSE", "HAS_H0", "STORE_HT", "IS_VARLEN",
                                                   "DOT_PREC")] + [64, 64, 0]
        o.fill_(float("nan"))
        runner(*full)
        torch.cuda.synchronize()
        ok = bool(torch.isfinite(o).all())
        return {"us": per_launch(lambda: runner(*full)), "finite": ok}
    guarded("host", "launch us CompiledKernel runner", compiled_runner)
    guarded("host", "torch.empty us", lambda: per_launch(lambda: torch.empty(4, 512, 32, 128, device="cuda",
                                                                             dtype=torch.bfloat16)))


def fast_section():
    """The lean launch path: bit-identical to Triton's own launch, and its host time per call."""
    from lattnbench.kernels.decay import alibi_decay
    from lattnbench.kernels.triton.lightning import lightning_attn_triton
    from lattnbench.kernels.triton.lightning import ops

    g = torch.as_tensor(alibi_decay(H), device="cuda", dtype=torch.float32)
    for n in (512, 1024, 1000):
        torch.manual_seed(n)
        q, k, v = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn_like(q)
        ds = torch.randn(B, H, D, D, device="cuda")
        h0 = torch.randn(B, H, D, D, device="cuda", requires_grad=True)

        def fwdbwd(h0_=None):
            o, s = lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5, initial_state=h0_)
            leaves = (q, k, v) if h0_ is None else (q, k, v, h0_)
            return (o, s) + torch.autograd.grad((o, s), leaves, (do, ds))

        def same():
            out = {}
            for mode in ("0", "1", "1"):
                os.environ["LIGHTNING_TRITON_FAST_LAUNCH"] = mode
                res = [fwdbwd(), fwdbwd(h0)]
                torch.cuda.synchronize()
                out.setdefault(mode, []).append(res)
            slow, fast1, fast2 = out["0"][0], out["1"][0], out["1"][1]
            ident = all(torch.equal(a, b) and torch.equal(a, c)
                        for rs, rf1, rf2 in zip(slow, fast1, fast2) for a, b, c in zip(rs, rf1, rf2))
            return {"bit_identical": ident, "fast_launches": ops._FWD_LAUNCH.fast_launches + ops._BWD_LAUNCH.fast_launches}
        guarded("fast", f"n{n} fast vs triton launch", same)
        for mode in ("0", "1"):
            def wall(mode=mode):
                os.environ["LIGHTNING_TRITON_FAST_LAUNCH"] = mode
                return wall_ms(fwdbwd)
            guarded("fast", f"n{n} fwdbwd wall ms/call FAST_LAUNCH={mode}", wall)
    os.environ["LIGHTNING_TRITON_FAST_LAUNCH"] = "1"

    # pure autograd cost on this host: an identity Function around one tiny torch op
    x = torch.randn(4, 512, 32, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    class Ident(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.view_as(a)

        @staticmethod
        def backward(ctx, ga):
            return ga

    gx = torch.randn_like(x)

    def ident_wall(reps=1000):
        return wall_ms(lambda: torch.autograd.grad(Ident.apply(x), (x,), (gx,)), reps, scale=1e6, digits=2)
    guarded("fast", "autograd identity Function us/call", ident_wall)

    def sdpa_wall(reps=300):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qs, ks, vs = (torch.randn(B, H, 512, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                      for _ in range(3))
        go = torch.randn_like(qs)

        def f():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
            return torch.autograd.grad(o, (qs, ks, vs), go)
        return wall_ms(f, reps)
    guarded("fast", "sdpa-cudnn n512 fwdbwd wall ms/call", sdpa_wall)


def prof_section():
    """Where the host time of a small fwd+bwd goes: wall per call of its parts, and torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    from lattnbench.kernels.decay import alibi_decay
    from lattnbench.kernels.triton.lightning import lightning_attn_triton
    from lattnbench.kernels.triton.lightning import ops

    g = torch.as_tensor(alibi_decay(H), device="cuda", dtype=torch.float32)
    n = 512
    q0, k0, v0 = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    q, k, v = (x.clone().requires_grad_(True) for x in (q0, k0, v0))
    do = torch.randn_like(q)
    ds = torch.randn(B, H, D, D, device="cuda")

    wall = wall_ms

    def fb():
        o, s_ = lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5)
        return torch.autograd.grad((o, s_), (q, k, v), (do, ds))

    parts = {
        "fwd no-grad inputs": lambda: lightning_attn_triton(q0, k0, v0, gamma=g, scale=D ** -0.5),
        "fwd grad inputs": lambda: lightning_attn_triton(q, k, v, gamma=g, scale=D ** -0.5),
        "bwd direct (ops.lightning_bwd)": lambda: ops.lightning_bwd(q0, k0, v0, do, g, D ** -0.5, None, ds,
                                                                    False, None, B),
        "fwd+bwd autograd": fb,
    }
    for name, fn in parts.items():
        guarded("prof", f"{name} wall ms/call", lambda fn=fn: wall(fn))
        guarded("prof", f"{name} synced ms/call", lambda fn=fn: wall(fn, 100, sync_each=True))

    def trace():
        for _ in range(5):
            fb()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fb()
            torch.cuda.synchronize()
        text = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        with open(os.path.join(OUT, "triton_dev2_torchprof.txt"), "w") as f:
            f.write(text)
        prof.export_chrome_trace(os.path.join(OUT, "triton_dev2_trace.json"))
        return "written"
    guarded("prof", "torch.profiler fwd+bwd n512", trace)


def thread_section():
    """Is Python slower inside an autograd backward (the CUDA device thread) than on the main thread?"""
    import statistics

    def pure():
        t = time.perf_counter()
        acc = 0
        for i in range(2000):
            acc += i * i
        return (time.perf_counter() - t) * 1e6

    def torchy():
        t = time.perf_counter()
        for _ in range(50):
            torch.empty(1000, device="cuda")
        return (time.perf_counter() - t) * 1e6

    for name, work in (("pure python 2000-iter loop", pure), ("50 x torch.empty", torchy)):
        times: list = []

        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a.view_as(a)

            @staticmethod
            def backward(ctx, ga, work=work):
                times.append(work())
                return ga

        x = torch.randn(10, device="cuda", requires_grad=True)
        gx = torch.randn_like(x)

        def run(work=work, F=F, x=x, gx=gx):
            times.clear()
            for _ in range(60):
                torch.autograd.grad(F.apply(x), (x,), (gx,))
            main = [work() for _ in range(60)]
            return {"main_thread_us": round(statistics.median(main), 1),
                    "autograd_backward_us": round(statistics.median(times), 1)}
        guarded("thread", name, run)


def ws_section():
    """TMA forward with Hopper warp specialization (producer warps issue the loads)."""
    tma_section(n_list=(32768,), kinds=("tma-ws", "tma"),
                cfgs=[(64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 8, 2), (64, 128, 8, 2), (64, 128, 4, 2)])


def main():
    log("env", {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name()})
    RUN.run_sections({"host": host_section, "tma": tma_section, "fast": fast_section, "prof": prof_section,
                      "ws": ws_section, "thread": thread_section}, sys.argv[1:] or ["fast"])


if __name__ == "__main__":
    main()
