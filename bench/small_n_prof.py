"""Where does fwd+bwd time go at small n? (issue 3: at n=512 fwd+bwd ≫ fwd + bwd alone, for every kernel)

    OUT=dir python3 bench/small_n_prof.py [kernel ...]      (GPU; default lightning/triton softmax/sdpa-cudnn)

Per kernel, through the harness's own TorchProblem at B4 H32 D=E=128 bf16, n = 512 and 1024:
- `enqueue_us`: host time of one fwd / fwd+bwd / bwd call without a sync (median of 50);
- `events_ms`: the harness's measurement (L2 flush, CUDA events around the call);
- `gpu_ms`: the same with the host given a head start (`torch.cuda._sleep` before the start event),
  so the events bracket device work only: the gap to `events_ms` is host-bound time;
- a torch.profiler table (self CPU time per op, fwd+bwd, 20 steps) in the log and a Chrome trace under $OUT.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devrun import DevRun  # noqa: E402

from lattnbench.registry import default_registry  # noqa: E402
from lattnbench.spec import Case  # noqa: E402
from lattnbench.torch_fw import TorchProblem, l2_flusher  # noqa: E402

RUN = DevRun("small_n_prof", float(os.environ.get("SMALLN_BUDGET_S", "150")), ("time", "prof"))
KERNELS = [a for a in sys.argv[1:] if not a.startswith("-")] or ["lightning/triton", "softmax/sdpa-cudnn"]


def enqueue_us(fn, reps=50):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(out), 1)


def events_ms(fn, head_start: bool, reps=50):
    flush = l2_flusher("cuda")
    out = []
    for _ in range(reps):
        flush()
        if head_start:
            torch.cuda._sleep(2_000_000)  # ~1 ms of spinning: the host enqueues the call meanwhile
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return round(statistics.median(out), 4)


def main():
    reg = default_registry()
    for name in KERNELS:
        entry = reg[name]
        for n in (512, 1024):
            case = Case(batch=4, seqlen=n, heads=32, kv_heads=32, dim_qk=128, dim_v=128, dtype="bf16")
            prob = TorchProblem(entry, case, "cuda")
            bwd = prob.bwd_callable()
            modes = {"fwd": prob.fwd, "fwdbwd": prob.fwdbwd, "bwd": bwd}
            for mode, fn in modes.items():
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
                RUN.guarded("time", f"{name} n{n} {mode}", lambda fn=fn: {
                    "enqueue_us": enqueue_us(fn), "events_ms": events_ms(fn, False),
                    "gpu_ms": events_ms(fn, True)})

            def prof(prob=prob, name=name, n=n):
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                    for _ in range(20):
                        prob.fwdbwd()
                    torch.cuda.synchronize()
                tag = name.replace("/", "_")
                p.export_chrome_trace(os.path.join(RUN.out, f"trace_{tag}_n{n}.json"))
                table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
                RUN.log(table)
                return "ok"
            RUN.guarded("prof", f"{name} n{n} fwdbwd", prof)
            del prob, bwd
    RUN.dump()


if __name__ == "__main__":
    main()
