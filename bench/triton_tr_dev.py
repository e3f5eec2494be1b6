"""GPU probe of the transposed chunk pass (kernels.py::_chunk_pass_t, config key TR=1) against the
row-wise one, per explicit config, forward and each backward pass, side by side in one process.

    timeout 540 bash -c 'source bench/gpu_setup.sh; python3 bench/triton_tr_dev.py'
    python3 bench/triton_tr_dev.py --smoke      (CPU, interpreter, tiny fp32 shapes: checks only)

OUT=dir for the log + JSON (rewritten after every measurement); TR_BUDGET_S (default 400) stops
starting new measurements after that many seconds; TR_SIZES (default 8192,32768).
1. check: at n=1024 (B2 H4, bf16, h0, reverse and forward), o / S_T of every fwd config and the
   output of every bwd config against the fp64 reference (err ratio as lattnbench's check-grad);
2. fwd: do_bench median (L2 flushed by do_bench) of each (BT, BV, warps, stages, TR) at B4 H32
   D=E=128 bf16, ALiBi decay; ms, TB/s of the 4 streams and the rel diff to the row-wise default;
3. bwd: the same for each backward pass (ROLE 0 dq, 1 dk, 2 dv) and the one-launch kernel;
4. dkdv: the fused dk+dv pass per (BT, warps, stages, TRANS) against the split dk and dv passes.
"""
from __future__ import annotations

import os
import sys

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devrun import DevRun  # noqa: E402

from lattnbench.kernels.triton.lightning import kernels as K  # noqa: E402

RUN = DevRun("triton_tr_dev", float(os.environ.get("TR_BUDGET_S", "400")), ("env", "check", "fwd", "bwd", "dkdv"))
R, log = RUN.results, RUN.log
DEV = "cuda" if torch.cuda.is_available() and not SMOKE else "cpu"
if SMOKE:
    B, H, D = 1, 2, 32
    DTYPE = torch.float32
    FWD = [(32, 32, 4, 1, 0), (32, 32, 4, 1, 1), (16, 16, 4, 1, 1)]
    BWD = FWD
    CHECK = dict(b=1, h=2, n=70)
    SIZES = ()
else:
    B, H, D = 4, 32, 128
    DTYPE = torch.bfloat16
    # (BT, BV, warps, stages, TR); sm_90 AOT (triton 3.9, bf16 D=E=128, fwd): TR (64,128,8,2) 242
    # regs, 96 KB smem; (64,128,8,3) 254, 144 KB; (64,128,8,4) 255, 192 KB; (32,128,8,2) 255, 32 KB;
    # (32,128,8,3) 248, 56 KB; (64,64,4,2) 255, 80 KB; (64,64,4,3) 255, 120 KB; (64,128,16,2) 128 regs
    # + 408 B spill; row-wise (64,64,4,2) 255, 88 KB. No spill unless said.
    # TR_SET=2 (session 4, second call): the decay-on-b variant (TR=2) beside TR=1 and the row-wise default
    if os.environ.get("TR_SET") == "5b":  # session 5, second call: the default's backward passes compute-only
        FWD = [(64, 128, 8, 3, 3)]
        BWD = [(64, 128, 8, 3, 3)]
    elif os.environ.get("TR_SET") == "5w":  # with LIGHTNING_TRITON_WS=1: Triton's warp specialization
        FWD = [(64, 128, 8, 3, 3), (64, 128, 8, 3, 1), (64, 64, 4, 2, 3), (64, 64, 4, 2, 1)]
        BWD = [(64, 128, 8, 3, 3), (64, 64, 4, 2, 3)]
    elif os.environ.get("TR_SET") == "5":  # session 5: two 4-warp programs per SM, BT=128, with descriptors
        # sm_90 AOT: (64,64,4,2,3) 226 regs, 88 KB (two programs per SM); (64,64,4,3,3) 228, 128 KB;
        # (128,128,8,2,3) 255 + 520 B stack, 224 KB
        FWD = [(64, 128, 8, 3, 1), (64, 128, 8, 3, 3), (64, 128, 8, 4, 3), (64, 64, 4, 2, 3), (128, 128, 8, 2, 3)]
        BWD = [(64, 128, 8, 3, 3), (64, 64, 4, 2, 3)]
    elif os.environ.get("TR_SET") == "3":  # session 4, last call: tensor-descriptor loads / stores (TR=3)
        FWD = [(64, 128, 8, 3, 1), (64, 128, 8, 3, 3), (64, 128, 8, 4, 3), (64, 128, 8, 2, 3)]
        BWD = [(64, 128, 8, 3, 1), (64, 128, 8, 3, 3)]
    elif os.environ.get("TR_SET") == "2":
        FWD = [(64, 64, 4, 2, 0), (64, 128, 8, 3, 1), (64, 128, 8, 3, 2), (64, 128, 8, 4, 2), (64, 128, 8, 2, 2)]
        BWD = [(64, 64, 4, 2, 0), (64, 128, 8, 3, 1), (64, 128, 8, 3, 2)]
    else:
        FWD = [(64, 64, 4, 2, 0), (64, 64, 4, 3, 0), (64, 128, 8, 2, 1), (64, 128, 8, 3, 1), (64, 128, 8, 4, 1),
               (32, 128, 8, 2, 1), (32, 128, 8, 3, 1), (64, 64, 4, 2, 1), (64, 64, 4, 3, 1), (64, 128, 16, 2, 1)]
        BWD = [(64, 64, 4, 2, 0), (64, 128, 8, 2, 1), (64, 128, 8, 3, 1), (32, 128, 8, 3, 1), (64, 64, 4, 2, 1)]
    CHECK = dict(b=2, h=4, n=1024)
    SIZES = tuple(int(x) for x in os.environ.get("TR_SIZES", "8192,32768").split(","))
PREC = "ieee" if DTYPE == torch.float32 else "tf32"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def inputs(b, n, h, seed, h0=False):
    from lattnbench.kernels.decay import alibi_decay

    gen = torch.Generator(device=DEV).manual_seed(seed)
    q, k, v, do = (torch.randn(b, n, h, D, device=DEV, generator=gen).to(DTYPE) for _ in range(4))
    g = torch.as_tensor(alibi_decay(h), device=DEV, dtype=torch.float32).contiguous()
    s0 = torch.randn(b, h, D, D, device=DEV, generator=gen) if h0 else None
    ds = torch.randn(b, h, D, D, device=DEV, generator=gen) if h0 else None
    return q, k, v, do, g, s0, ds


def fwd(cfg, q, k, v, g, s0=None, reverse=False, store_ht=False, probe=0):
    bt, bv, w, s, tr = cfg
    b, t, h, d = q.shape
    o = torch.full_like(q, float("nan"))
    ht = torch.full((b, h, d, d), float("nan"), device=q.device) if store_ht else o
    K.lightning_fwd_kernel[(triton.cdiv(d, bv), b * h)](
        q, k, v, s0 if s0 is not None else g, g, g, t, h, h, d ** -0.5, K.shape_bucket(t, b * h), o, ht,
        KD=d, VD=d, BK=K.pow2(d), REVERSE=reverse, HAS_H0=s0 is not None, STORE_HT=store_ht, IS_VARLEN=False,
        DOT_PREC=PREC, BT=bt, BV=bv, TR=tr, PROBE=probe, num_warps=w, num_stages=s)
    return o, (ht if store_ht else None)


def bwd(cfg, role, q, k, v, do, g, s0=None, ds=None, reverse=False, probe=0):
    bt, bv, w, s, tr = cfg
    b, t, h, d = q.shape
    dx = torch.full_like(q, float("nan"))
    dh0 = torch.full((b, h, d, d), float("nan"), device=q.device) if s0 is not None else g
    K.lightning_bwd_kernel[(triton.cdiv(d, bv), b * h)](
        q, k, v, do, s0 if s0 is not None else g, ds if ds is not None else g, g, g, t, h, h, d ** -0.5,
        K.shape_bucket(t, b * h), dx, dh0, KD=d, VD=d, BKD=K.pow2(d), BVD=K.pow2(d), ROLE=role, REVERSE=reverse,
        HAS_H0=s0 is not None, HAS_DHT=ds is not None, IS_VARLEN=False, DOT_PREC=PREC, BT=bt, BV=bv, TR=tr,
        PROBE=probe, num_warps=w, num_stages=s)
    return dx, (dh0 if s0 is not None and role == 2 else None)


def bwd_one(cfg, q, k, v, do, g):
    bt, bv, w, s, tr = cfg
    b, t, h, d = q.shape
    outs = [torch.full_like(q, float("nan")) for _ in range(3)]
    K.lightning_bwd_one_kernel[(triton.cdiv(d, bv), b * h, 3)](
        q, k, v, do, g, g, g, g, t, h, h, d ** -0.5, K.shape_bucket(t, b * h), *outs, g,
        KD=d, VD=d, BKD=K.pow2(d), BVD=K.pow2(d), ROLE=3, REVERSE=False, HAS_H0=False, HAS_DHT=False,
        IS_VARLEN=False, DOT_PREC=PREC, BT=bt, BV=bv, TR=tr, num_warps=w, num_stages=s)
    return outs


def err(x, ref):
    from lattnbench.tolerance import err_ratio

    return float(f"{err_ratio(x, ref):.2e}")


def check_section():
    from lattnbench.kernels.naive.torch_ref import lightning_naive

    b, h, n = CHECK["b"], CHECK["h"], CHECK["n"]
    q, k, v, do, g, s0, ds = inputs(b, n, h, seed=1, h0=True)
    for reverse in (False, True):
        leaves = [x.double().requires_grad_(True) for x in (q, k, v, s0)]
        ro, rs = lightning_naive(*leaves[:3], gamma=g.double(), scale=D ** -0.5, initial_state=leaves[3],
                                 reverse=reverse)
        ref_grads = torch.autograd.grad((ro * do.double()).sum() + (rs * ds.double()).sum(), leaves)
        for cfg in FWD:
            def one(cfg=cfg, reverse=reverse, ro=ro, rs=rs):
                o, ht = fwd(cfg, q, k, v, g, s0, reverse, True)
                sync()
                return {"o": err(o, ro), "ht": err(ht, rs)}
            RUN.guarded("check", f"fwd rev={int(reverse)} {cfg}", one)
        for cfg in BWD:
            def grads(cfg=cfg, reverse=reverse, ref_grads=ref_grads):
                res = {}
                for role, name in ((0, "dq"), (1, "dk"), (2, "dv")):
                    dx, dh0 = bwd(cfg, role, q, k, v, do, g, s0, ds, reverse)
                    res[name] = err(dx, ref_grads[role])
                    if dh0 is not None:
                        res["dh0"] = err(dh0, ref_grads[3])
                sync()
                return res
            RUN.guarded("check", f"bwd rev={int(reverse)} {cfg}", grads)


def bench(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel(x, ref):
    x, ref = x.float(), ref.float()
    return float(f"{((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item():.2e}")


def fwd_section():
    for n in SIZES:
        q, k, v, _, g, _, _ = inputs(B, n, H, seed=3)
        stream = 4 * B * n * H * D * 2
        ref = fwd(FWD[0], q, k, v, g)[0]
        for cfg in FWD:
            def one(cfg=cfg):
                o = fwd(cfg, q, k, v, g)[0]
                sync()
                ms = bench(lambda: fwd(cfg, q, k, v, g))
                return {"ms": round(ms, 4), "TB/s": round(stream / ms / 1e9, 3), "diff": rel(o, ref)}
            RUN.guarded("fwd", f"n{n} {cfg}", one)
        # bound analysis: the same transposed pass with every chunk re-reading chunk 0 (L2-resident,
        # so next to no DRAM traffic) and one output store: the time of its compute chain alone
        for cfg in [c for c in FWD if c[4]][:2]:
            RUN.guarded("fwd", f"n{n} {cfg} COMPUTE_ONLY", lambda cfg=cfg: {"ms": round(bench(
                lambda: fwd(cfg, q, k, v, g, probe=5)), 4)})
        del q, k, v
        torch.cuda.empty_cache()


def bwd_section():
    for n in SIZES:
        q, k, v, do, g, _, _ = inputs(B, n, H, seed=4)
        refs = [bwd(BWD[0], role, q, k, v, do, g)[0] for role in range(3)]
        for cfg in BWD:
            for role in range(3):
                def one(cfg=cfg, role=role):
                    dx = bwd(cfg, role, q, k, v, do, g)[0]
                    sync()
                    ms = bench(lambda: bwd(cfg, role, q, k, v, do, g))
                    return {"ms": round(ms, 4), "diff": rel(dx, refs[role])}
                RUN.guarded("bwd", f"n{n} role{role} {cfg}", one)
                if cfg[4]:  # the pass's compute chain alone (every chunk re-reads chunk 0), as in fwd
                    RUN.guarded("bwd", f"n{n} role{role} {cfg} COMPUTE_ONLY", lambda cfg=cfg, role=role: {
                        "ms": round(bench(lambda: bwd(cfg, role, q, k, v, do, g, probe=5)), 4)})
            if n <= 8192:
                def one_launch(cfg=cfg):
                    outs = bwd_one(cfg, q, k, v, do, g)
                    sync()
                    ms = bench(lambda: bwd_one(cfg, q, k, v, do, g))
                    return {"ms": round(ms, 4), "diff": max(rel(x, r) for x, r in zip(outs, refs))}
                RUN.guarded("bwd", f"n{n} one-launch {cfg}", one_launch)
        del q, k, v, do
        torch.cuda.empty_cache()


def dkdv(cfg, q, k, v, do, g):
    """The fused dk+dv pass (lightning_bwd_dkdv_kernel) at (BT, warps, stages, TRANS[, TMA]), BV = E."""
    bt, w, s, trans = cfg[:4]
    tma = bool(cfg[4]) if len(cfg) > 4 else False
    b, t, h, d = q.shape
    dk, dv = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    K.lightning_bwd_dkdv_kernel[(1, b * h)](
        q, k, v, do, g, g, g, t, h, h, d ** -0.5, K.shape_bucket(t, b * h), 0, dk, dv, g,
        KD=d, VD=d, BKD=K.pow2(d), REVERSE=False, HAS_H0=False, HAS_DHT=False, IS_VARLEN=False, DOT_PREC=PREC,
        BV=K.pow2(d), BT=bt, TRANS=trans, TMA=tma, num_warps=w, num_stages=s)
    return dk, dv


def dkdv_section():
    """The fused dk+dv pass with transposed products (TRANS=1) against the split dk and dv passes (TR=1 / TR=3):
    agreement and do_bench at each size. TR_DKDV lists the fused configs as BT:W:S:TRANS[:TMA]."""
    cfgs = [tuple(int(x) for x in c.split(":")) for c in
            os.environ.get("TR_DKDV", "64:8:3:1,64:8:2:1,64:8:2:1:1,64:8:3:1:1").split(",")]
    split = [c for c in BWD if c[4]]
    for n in SIZES:
        q, k, v, do, g, _, _ = inputs(B, n, H, seed=5)
        ref = [bwd(split[0], role, q, k, v, do, g)[0] for role in (1, 2)]
        for cfg in split:
            RUN.guarded("dkdv", f"n{n} split dk+dv {cfg}", lambda cfg=cfg: {"ms": round(
                bench(lambda: (bwd(cfg, 1, q, k, v, do, g), bwd(cfg, 2, q, k, v, do, g))), 4)})
        for cfg in cfgs:
            def one(cfg=cfg):
                dk, dv = dkdv(cfg, q, k, v, do, g)
                sync()
                ms = bench(lambda: dkdv(cfg, q, k, v, do, g))
                return {"ms": round(ms, 4), "diff_dk": rel(dk, ref[0]), "diff_dv": rel(dv, ref[1])}
            RUN.guarded("dkdv", f"n{n} fused {cfg}", one)
        del q, k, v, do
        torch.cuda.empty_cache()


def main():
    from lattnbench.kernels.triton.lightning import ops

    ops.ensure_allocator()  # the TR=3 configs' device-side tensor descriptors need global scratch
    R["env"] = {"torch": torch.__version__, "triton": triton.__version__, "smoke": SMOKE,
                "commit": os.environ.get("LATTNBENCH_COMMIT", "?"),
                "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"}
    log("env", R["env"])
    sections = [a for a in sys.argv[1:] if not a.startswith("--")] or (["check"] if SMOKE else ["check", "fwd", "bwd"])
    RUN.run_sections({"check": check_section, "fwd": fwd_section, "bwd": bwd_section, "dkdv": dkdv_section},
                     sections)


if __name__ == "__main__":
    main()
