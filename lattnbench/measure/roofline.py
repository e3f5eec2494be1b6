"""The floor a kernel cannot beat: bytes that must move and FLOPs that must run, over ceilings.

How many bytes and FLOPs a point needs is its operator family's cost model
(``lattnbench.operators``); here are the ceilings, measured on the device (copy bandwidth,
bf16 matmul rate) once per run, and the floor they give.
"""
from __future__ import annotations


def floor_ms(nbytes: float, nflops: float, ceilings: dict) -> float | None:
    """max(bytes / bandwidth, flops / matmul rate) in ms; None without measured ceilings."""
    bw, rate = ceilings.get("copy_gbps"), ceilings.get("matmul_tflops")
    if not bw or not rate:
        return None
    return max(nbytes / (bw * 1e9), nflops / (rate * 1e12)) * 1e3


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
