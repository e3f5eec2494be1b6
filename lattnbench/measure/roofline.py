"""The floor a kernel cannot beat: bytes that must move and FLOPs that must run, over ceilings.

Bytes: every input read once, every output written once. FLOPs: the chunked (Lightning-2)
form at block 64 for the linear families, causal softmax attention for softmax. Ceilings are
measured on the device (copy bandwidth, bf16 matmul rate) once per run.
"""
from __future__ import annotations

from lattnbench.spec import Case

BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2}
CHUNK = 64


def bytes_moved(case: Case, mode: str) -> float:
    """fwd: q, k, v in, o out; bwd: q, k, v, do in, dq, dk, dv out; fwdbwd: both."""
    e = BYTES[case.dtype]
    n = case.tokens
    q = n * case.heads * case.dim_qk * e
    k = n * case.kv_heads * case.dim_qk * e
    v = n * case.kv_heads * case.dim_v * e
    o = n * case.heads * case.dim_v * e
    fwd = q + k + v + o
    bwd = 2 * (q + k + v) + o
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def flops(case: Case, family: str, mode: str) -> float:
    b, t, h, d, ev = case.batch, case.seqlen, case.heads, case.dim_qk, case.dim_v
    if family == "softmax":
        fwd = 2.0 * b * h * t * t * (d + ev) / 2  # QKᵀ and PV, causal half
        bwd = 2.5 * fwd
    else:
        c = min(CHUNK, t)
        fwd = 2.0 * b * h * t * (c * (d + ev) + 2 * d * ev)  # intra-chunk + state read and update
        bwd = 2.0 * fwd
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def floor_ms(case: Case, family: str, mode: str, ceilings: dict) -> float | None:
    """max(bytes / bandwidth, flops / matmul rate) in ms; None without measured ceilings."""
    bw, rate = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops")
    if not bw or not rate:
        return None
    t_mem = bytes_moved(case, mode) / (bw * 1e9)
    t_math = flops(case, family, mode) / (rate * 1e12)
    return max(t_mem, t_math) * 1e3


def measure_ceilings(device: str) -> dict:
    """Copy bandwidth (bytes read + written) and bf16 matmul rate on a CUDA device via torch.

    Both on the device timer (back-to-back CUDA events, L2 flushed between repetitions).
    """
    import torch

    from lattnbench.measure.timing import time_device, torch_cuda_backend, warm_up

    be = torch_cuda_backend(device)

    def device_ms(call) -> float:
        _, _, est = warm_up(call, be.sync)
        return time_device(call, be, 300.0, est).median

    def copy_ms(nbytes: int) -> float:
        x = torch.empty(nbytes, dtype=torch.uint8, device=device)
        y = torch.empty_like(x)
        return device_ms(lambda: y.copy_(x))

    copy_gbps = 2 * 2**30 / (copy_ms(2**30) * 1e-3) / 1e9
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    bm = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    tflops = 2 * n**3 / (device_ms(lambda: a @ bm) * 1e-3) / 1e12
    return {"copy_gbps": round(copy_gbps, 1), "matmul_tflops": round(tflops, 1),
            "method": "torch copy_ of 1 GiB (read+write); bf16 8192³ matmul; device-timer medians"}
