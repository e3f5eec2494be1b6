"""GPU probe of the look-back forward (kernels/triton/lightning/lookback.py) against the chunk pass.

    timeout 540 bash -c 'source bench/gpu_setup.sh; python3 bench/triton_lookback_dev.py'
    python3 bench/triton_lookback_dev.py --smoke      (CPU, interpreter, tiny shapes: checks only)

OUT=dir for the log + JSON (rewritten after every measurement, so a hang leaves what was done);
LOOKBACK_BUDGET_S (default 420) stops starting new measurements after that many seconds.
1. check: every config at n=1024 (a hang or a wrong scan shows here first, at small cost), then
   one config at n=8192 with h0, reverse, final state; max rel err of o (and S_T) against the
   chunk pass (bf16) and a repeat test: 20 launches must give bit-identical o (a memory-ordering
   race would make results vary);
2. speed: triton.testing.do_bench medians of the chunk pass (autotuned, as lightning_attn_triton
   runs it) and the look-back pass per (SEG, BT, BV, warps, stages), B4 H32 D=E=128 bf16,
   n = 8192 and 32768; ms and TB/s of the 4 tensor streams (q, k, v, o: 4·B·T·H·128·2 bytes), and
   the look-back's state traffic (scratch write + read, fp32; with the default ring of two slots,
   16 MB, it should mostly stay in L2; ring=0, one slot per segment, is timed for the first config).
Every measurement is wrapped: a failure logs one line and the rest goes on.
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

RUN = DevRun("triton_lookback_dev", float(os.environ.get("LOOKBACK_BUDGET_S", "420")), ("env", "check", "speed"))
R, log = RUN.results, RUN.log
DEV = "cuda" if torch.cuda.is_available() and not SMOKE else "cpu"
if SMOKE:
    B, H, D = 1, 2, 32
    DTYPE = torch.float32
    CONFIGS = [(32, 16, 16, 4, 1), (64, 16, 32, 4, 1)]
    CHECK_N, BIG_N, SPEED_N = 70, 100, ()
else:
    B, H, D = 4, 32, 128
    DTYPE = torch.bfloat16
    # (SEG, BT, BV, num_warps, num_stages). sm_90 AOT (triton 3.9, bf16 D=E=128): BV 64 at 4 warps
    # 255 regs + 56 B stack, 88 KB smem (stages 2) / 128 KB (stages 3, 208 B stack); BV 32 195
    # regs, no stack, 76 KB; BV 128 at 8 warps 255 regs + 88 B, 112 KB. SEG does not change them.
    CONFIGS = [(256, 64, 64, 4, 2), (512, 64, 64, 4, 2), (1024, 64, 64, 4, 2), (128, 64, 64, 4, 2),
               (256, 64, 32, 4, 2), (512, 64, 32, 4, 3), (256, 64, 64, 4, 3), (2048, 64, 64, 4, 2),
               (256, 64, 128, 8, 2)]
    CHECK_N, BIG_N, SPEED_N = 1024, 8192, (8192, 32768)


def guarded(section, key, fn):
    return RUN.guarded(section, key, fn, width=44)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def inputs(n, seed=0, h0=False):
    from lattnbench.kernels.decay import alibi_decay

    gen = torch.Generator(device=DEV).manual_seed(seed)
    q, k, v = (torch.randn(B, n, H, D, device=DEV, generator=gen).to(DTYPE) for _ in range(3))
    g = torch.as_tensor(alibi_decay(H), device=DEV, dtype=torch.float32).contiguous()
    s0 = torch.randn(B, H, D, D, device=DEV, generator=gen) if h0 else None
    return q, k, v, g, s0


def chunk_fwd(q, k, v, g, s0, reverse, store_ht):
    """The existing chunk pass (autotuned on the GPU), as lightning_attn_triton's forward runs it."""
    from lattnbench.kernels.triton.lightning import ops

    return ops.lightning_fwd(q, k, v, g, D ** -0.5, s0, reverse, None, store_ht, q.shape[0])


def lookback_fwd(q, k, v, g, s0, reverse, store_ht, cfg, ring=2):
    from lattnbench.kernels.triton.lightning.lookback import lightning_fwd_lookback

    return lightning_fwd_lookback(q, k, v, g, D ** -0.5, s0, reverse, store_ht, config=cfg, ring=ring)


def rel(x, ref):
    x, ref = x.float(), ref.float()
    return float(f"{((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item():.2e}")


def check_section():
    os.environ["LIGHTNING_TRITON_FWD"] = "chunk"
    q, k, v, g, _ = inputs(CHECK_N, seed=1)
    ref, ref_ht = chunk_fwd(q, k, v, g, None, False, True)
    for cfg in CONFIGS:
        def one(cfg=cfg):
            o, ht = lookback_fwd(q, k, v, g, None, False, True, cfg)
            sync()
            return {"o": rel(o, ref), "ht": rel(ht, ref_ht), "finite": bool(torch.isfinite(o).all())}
        guarded("check", f"n{CHECK_N} {cfg}", one)
    if SMOKE:  # against the fp64 reference too
        from lattnbench.kernels.naive.torch_ref import lightning_naive

        def naive():
            o, ht = lookback_fwd(q, k, v, g, None, False, True, CONFIGS[0])
            ro, rs = lightning_naive(q.double(), k.double(), v.double(), gamma=g.double(), scale=D ** -0.5)
            return {"o": rel(o, ro), "ht": rel(ht, rs)}
        guarded("check", f"n{CHECK_N} vs fp64 reference", naive)

    q, k, v, g, s0 = inputs(BIG_N, seed=2, h0=True)
    for reverse in (False, True):
        ref, ref_ht = chunk_fwd(q, k, v, g, s0, reverse, True)
        cfg = CONFIGS[0]

        def big(cfg=cfg, reverse=reverse, ref=ref, ref_ht=ref_ht):
            o, ht = lookback_fwd(q, k, v, g, s0, reverse, True, cfg)
            sync()
            res = {"o": rel(o, ref), "ht": rel(ht, ref_ht)}
            same = 0
            for _ in range(3 if SMOKE else 20):
                o2, ht2 = lookback_fwd(q, k, v, g, s0, reverse, True, cfg)
                same += int(torch.equal(o2, o) and torch.equal(ht2, ht))
            sync()
            res["bit_identical_repeats"] = f"{same}/{3 if SMOKE else 20}"
            o0, ht0 = lookback_fwd(q, k, v, g, s0, reverse, True, cfg, ring=0)  # one slot per segment
            res["ring0_bit_identical"] = bool(torch.equal(o0, o) and torch.equal(ht0, ht))
            return res
        guarded("check", f"n{BIG_N} h0 reverse={reverse} {cfg}", big)

    def routed():  # the env var routes lightning_attn_triton's forward (and its backward still runs)
        from lattnbench.kernels.triton.lightning import lightning_attn_triton

        qs, ks, vs = (x[:, :CHECK_N].detach().clone().requires_grad_(True) for x in (q, k, v))
        out = {}
        for path in ("chunk", "lookback"):
            os.environ["LIGHTNING_TRITON_FWD"] = path
            o, st = lightning_attn_triton(qs, ks, vs, gamma=g, initial_state=s0)
            grads = torch.autograd.grad((o.float().sum() + st.sum()), (qs, ks, vs))
            out[path] = (o, st) + grads
        os.environ["LIGHTNING_TRITON_FWD"] = "chunk"
        return {name: rel(a, b) for name, a, b in zip(("o", "ht", "dq", "dk", "dv"), out["lookback"], out["chunk"])}
    guarded("check", f"n{CHECK_N} env-var route fwd+bwd", routed)


def speed_section():
    from triton.testing import do_bench

    os.environ["LIGHTNING_TRITON_FWD"] = "chunk"
    for n in SPEED_N:
        q, k, v, g, _ = inputs(n, seed=3)
        stream_bytes = 4 * B * n * H * D * 2

        def bench(fn):
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            return ms

        def chunk():
            ms = bench(lambda: chunk_fwd(q, k, v, g, None, False, False))
            return {"ms": round(ms, 4), "TB/s": round(stream_bytes / ms / 1e9, 3)}
        guarded("speed", f"n{n} chunk pass (autotuned)", chunk)
        for cfg in CONFIGS:
            def lb(cfg=cfg):
                ref = chunk_fwd(q, k, v, g, None, False, False)[0]
                o = lookback_fwd(q, k, v, g, None, False, False, cfg)[0]
                sync()
                err = rel(o, ref)
                ms = bench(lambda: lookback_fwd(q, k, v, g, None, False, False, cfg))
                n_seg = triton.cdiv(n, cfg[0])
                state_bytes = 2 * (n_seg - 1) * B * H * D * D * 4  # to L2 at least
                return {"ms": round(ms, 4), "TB/s": round(stream_bytes / ms / 1e9, 3), "err": err,
                        "state_GB": round(state_bytes / 1e9, 3)}
            guarded("speed", f"n{n} lookback {cfg}", lb)
            if cfg == CONFIGS[0]:  # the same with one scratch slot per segment (state hops via DRAM)
                guarded("speed", f"n{n} lookback {cfg} ring=0", lambda cfg=cfg: {"ms": round(do_bench(
                    lambda: lookback_fwd(q, k, v, g, None, False, False, cfg, ring=0), warmup=25, rep=100,
                    return_mode="median"), 4)})
        del q, k, v
        if DEV == "cuda":
            torch.cuda.empty_cache()


def main():
    R["env"] = {"torch": torch.__version__, "triton": triton.__version__, "smoke": SMOKE,
                "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"}
    log("env", R["env"])
    sections = [a for a in sys.argv[1:] if not a.startswith("--")] or (["check"] if SMOKE else ["check", "speed"])
    RUN.run_sections({"check": check_section, "speed": speed_section}, sections)


if __name__ == "__main__":
    main()
