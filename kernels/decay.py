"""Per-head decay helpers shared by every framework (plain numpy, so no framework is imported)."""
from __future__ import annotations

import math

import numpy as np


def lightning_decay(num_heads: int, layer_idx: int = 0, num_layers: int = 1) -> np.ndarray:
    """The seeds' layer-dependent decay: γ_h = −(8/H)·(1 − layer_idx/num_layers)·h, float32, ≤ 0."""
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    if num_layers <= 0 or not 0 <= layer_idx <= num_layers:
        raise ValueError(f"need 0 <= layer_idx <= num_layers and num_layers > 0, got {layer_idx}/{num_layers}")
    factor = -(8.0 / num_heads) * (1.0 - layer_idx / num_layers)
    return (factor * np.arange(num_heads, dtype=np.float64)).astype(np.float32)


def _alibi_slopes(n: int) -> list[float]:
    """ALiBi slopes as the official lightning_attn package builds them (geometric in 2^-8/n)."""
    def power_of_two(m: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + _alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi_decay(num_heads: int) -> np.ndarray:
    """Decay γ_h = −slope_h, the official package's ``_build_slope_tensor`` (used there with scale 1)."""
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    return (-np.asarray(_alibi_slopes(num_heads), dtype=np.float64)).astype(np.float32)
