"""Random problem inputs for a case, framework-neutral (numpy), and the per-case constants.

Check-grad draws its inputs here so that a kernel and its fp64 reference see the very same
dtype-rounded values; speed and memory runs draw on the device with the framework's RNG
(``torch_fw`` / ``jax_fw``) since shipping gigabytes from the host would dominate set-up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattnbench.kernels.decay import alibi_decay, lightning_decay
from lattnbench.registry import KernelEntry
from lattnbench.spec import Case


@dataclass(frozen=True)
class Constants:
    """What is not an input tensor: scale, decay, packed lengths."""

    scale: float
    gamma: np.ndarray          # [H] float32, ≤ 0
    cu_seqlens: np.ndarray | None  # [N+1] int32


def constants(case: Case, entry: KernelEntry | None = None, seed: int = 0) -> Constants:
    scale = entry.fixed_scale if entry is not None and entry.fixed_scale is not None else case.dim_qk**-0.5
    if case.decay == "alibi":
        gamma = alibi_decay(case.heads)
    elif case.decay == "lightning":
        gamma = lightning_decay(case.heads, 0, 1)
    elif case.decay == "strong":
        gamma = np.full(case.heads, strong_decay(case.heads), np.float32)
    elif case.decay == "zero":
        gamma = np.zeros(case.heads, np.float32)
    else:  # random, per head
        gamma = -np.random.default_rng(seed + 7).uniform(0.0, 1.0, case.heads).astype(np.float32)
    cu = None
    if case.varlen:
        cu = np.concatenate([[0], np.cumsum(case.varlen)]).astype(np.int32)
    return Constants(float(scale), gamma, cu)


def strong_decay(heads: int) -> float:
    """The strong-decay choice's γ for every head: the steepest head of the seeds' formula,
    −8(H−1)/H, and never gentler than −1, which is steeper than every ALiBi slope (2^(−8/H) < 1)."""
    return float(min(lightning_decay(heads, 0, 1).min(), -1.0))


def shapes(case: Case, family: str) -> dict[str, tuple[int, ...]]:
    """Shapes of every input and cotangent of a case (contract layout [B, T, H, D])."""
    b, t, h, hk, d, e = case.batch, case.seqlen, case.heads, case.kv_heads, case.dim_qk, case.dim_v
    s = {"q": (b, t, h, d), "k": (b, t, hk, d), "v": (b, t, hk, e), "do": (b, t, h, e)}
    if family != "softmax":
        s["dS"] = (case.num_sequences, h, d, e)
        if case.initial_state:
            s["h0"] = (case.num_sequences, h, d, e)
        if family == "gla":
            s["g"] = (b, t, h, d)
    return s


#: the inputs ``Case.input_scale`` multiplies (magnitude stress)
SCALED = ("q", "k", "v")


def numpy_inputs(case: Case, family: str, seed: int) -> dict[str, np.ndarray]:
    """Fresh random fp32 arrays for every tensor of the case (rounded to dtype by the adapter).

    q, k, v and the cotangents are standard normal; h0 normal; GLA gates g = log σ(x)/gate_norm ≤ 0
    (docs/methodology.md, "Input distributions").
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes(case, family).items():
        x = rng.standard_normal(shape, dtype=np.float32)
        if name == "g":
            x = (-np.logaddexp(0.0, -x) / np.float32(case.gate_norm)).astype(np.float32)
        elif name in SCALED and case.input_scale != 1:
            x = x * np.float32(case.input_scale)
        out[name] = x
    return out
