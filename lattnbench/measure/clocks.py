"""GPU clocks, power and temperature through NVML (nvidia-ml-py), sampled around each point.

A GPU's SM clock moves with the duty cycle, so every timed point records what the clock
was doing, and a point measured while the GPU slowed itself down (thermal or power limits) is
flagged ``throttled``. Without nvidia-ml-py or a GPU, ``sample`` returns None and rows say so.
"""
from __future__ import annotations

import time
from functools import cache

#: NVML clocks-event reason bits (nvml.h, nvmlClocksEventReason*) and their names
REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
#: reasons that mean the GPU ran below the clock it would otherwise hold
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


@cache
def _nvml():
    """The initialised pynvml module, or None (not installed, no driver)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver or no GPU: no clocks
        return None
    return pynvml


def unavailable_reason() -> str | None:
    """Why clocks are not recorded here, or None when they are."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "nvidia-ml-py is not installed"
    return None if _nvml() is not None else "NVML found no GPU driver"


def decode(bits: int) -> list[str]:
    return [name for bit, name in REASONS.items() if bits & bit]


def sample(index: int = 0) -> dict | None:
    """SM / memory clock (MHz), power (W), temperature (C) and the active clock-event reasons."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        reasons = decode(int(reasons_fn(h)))
        return {
            "sm_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            "sm_max_mhz": int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            "power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000.0, 1),
            "temp_c": int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "reasons": reasons,
            "throttled": bool(THROTTLING.intersection(reasons)),
        }
    except Exception as exc:  # noqa: BLE001 - a partial NVML: say so in the row, never fail a point
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


#: the longest a point waits for the GPU to cool (``settle``)
SETTLE_MAX_S = 120.0


def settle(target_c: float, max_s: float = SETTLE_MAX_S, read=sample, sleep=time.sleep,
           clock=time.monotonic) -> dict | None:
    """Wait until the GPU is at or below ``target_c`` degrees, at most ``max_s`` seconds; what the
    wait took and the temperature it ended at, or None without NVML.

    Why: the points a worker ran before heat the GPU, and a hot GPU runs below its clock under
    its power cap; a point measured after them is slower than the same point measured alone, with
    nothing of the process to blame. Waiting for one temperature before each point starts every
    point from the same thermal state."""
    t0 = clock()
    s = read()
    if not s or "temp_c" not in s:
        return None
    while s["temp_c"] > target_c and clock() - t0 < max_s:
        sleep(0.5)
        s = read() or s
    return {"settle_s": round(clock() - t0, 1), "settle_temp_c": s.get("temp_c"),
            "settle_reached": s.get("temp_c", target_c + 1) <= target_c}


def throttled(*samples: dict | None) -> bool | None:
    """True when any sample shows a throttling reason; None when no sample was taken."""
    seen = [s for s in samples if s and "throttled" in s]
    if not seen:
        return None
    return any(s["throttled"] for s in seen)
