"""Random problem inputs for a case, framework-neutral (numpy), and the per-case constants.

Check-grad draws its inputs here so that a kernel and its fp64 reference see the very same
dtype-rounded values; speed and memory runs draw on the device with the framework's RNG
(the adapters) since shipping gigabytes from the host would dominate set-up. Which tensors
exist and how each is drawn is the family's answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattnbench.kernels.decay import alibi_decay, lightning_decay
from lattnbench.operators import family
from lattnbench.spec import Case


#: the ε of the ``unit`` draw's x / sqrt(Σx² + ε), fla's l2norm's (the same in every adapter)
UNIT_EPS = 1e-6


@dataclass(frozen=True)
class Constants:
    """What is not an input tensor: scale, decay, packed lengths."""

    scale: float
    gamma: np.ndarray          # [H] float32, ≤ 0
    cu_seqlens: np.ndarray | None  # [N+1] int32


def constants(case: Case, entry=None, seed: int = 0) -> Constants:
    """Scale (the entry's fixed one, else D^-1/2), γ per ``case.decay``, and packed offsets."""
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


def shapes(case: Case, family_name: str) -> dict[str, tuple[int, ...]]:
    """Shapes of every input and cotangent of a case for a family."""
    return family(family_name).shapes(case)


def numpy_inputs(case: Case, family_name: str, seed: int) -> dict[str, np.ndarray]:
    """Fresh random fp32 arrays for every tensor of the case (rounded to dtype by the adapter).

    q, k, v and the cotangents are standard normal; h0 normal; gates g = log σ(x)/gate_norm ≤ 0;
    a ``unit`` tensor (GDN's keys) L2-normalised over its last axis, a ``sigmoid`` one (GDN's β)
    σ(x) ∈ (0, 1) (docs/methodology.md, "Input distributions").
    """
    fam = family(family_name)
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in fam.shapes(case).items():
        x = rng.standard_normal(shape, dtype=np.float32)
        how = fam.draw(name)
        if how == "gate":
            x = (-np.logaddexp(0.0, -x) / np.float32(case.gate_norm)).astype(np.float32)
        elif how == "scaled" and case.input_scale != 1:
            x = x * np.float32(case.input_scale)
        elif how == "unit":
            x = (x / np.sqrt((x * x).sum(-1, keepdims=True) + np.float32(UNIT_EPS))).astype(np.float32)
        elif how == "sigmoid":
            x = (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
        out[name] = x
    return out
