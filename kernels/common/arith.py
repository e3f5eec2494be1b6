"""Host arithmetic of the Triton launches: ceil division, padded head widths, per-chunk slots, the
autotune-key bucket of a shape, pruning configs wider than a dimension, and the switch that turns
autotuning off (``LIGHTNING_TRITON_AUTOTUNE``)."""
from __future__ import annotations

import os

# LIGHTNING_TRITON_AUTOTUNE=0 (read at import): each launch compiles the first config of its list
# instead of tuning them all, for correctness sweeps over many shapes and flags, where every new
# combination would otherwise compile and time the whole list. Timings made so are not tuned.
AUTOTUNE = os.environ.get("LIGHTNING_TRITON_AUTOTUNE", "1").strip() != "0"

FEW_ROWS = 64  # fewer (sequence, head) rows than this: a grid that leaves most SMs idle


def cdiv(a: int, b: int) -> int:
    """ceil(a / b). Plain Python: triton.cdiv is a ConstexprFunction, several µs a call on the
    host, and a small fwd+bwd is host-bound."""
    return -(-a // b)


def pow2(x: int) -> int:
    """max(16, next power of two >= x): the padded width of a head dim."""
    return max(16, 1 << (int(x) - 1).bit_length())


def chunk_slots(b: int, t: int, n: int, bt: int) -> int:
    """Slots of a per-chunk buffer (``tiles.chunk_slot``) for b·t rows of n sequences at chunk bt:
    (total rows) // bt + n."""
    return b * t // bt + n


def narrow_configs(configs: list, args: dict, block: str, dim: str) -> list:
    """The configs whose ``block`` slice is no wider than the launch argument ``dim`` needs (wider
    ones duplicate one of them); all of them when the launch does not name ``dim``."""
    if dim not in args:
        return configs
    keep = [c for c in configs if c.kwargs[block] <= pow2(args[dim])]
    return keep or configs[:1]


def shape_bucket(t: int, rows: int = 128) -> int:
    """Autotune key bucket of a launch: the sequence length (0 short ≤ 1024, 1 medium ≤ 4096,
    2 long), plus 3 when the grid has few (sequence, head) rows (N·H < FEW_ROWS). Why both: a tuned
    config is reused for every launch with the same key, and one tuned on a small grid (a gradient
    check at B2 H8) is up to 2x slower on a full one (B4 H32) of the same length."""
    return (0 if t <= 1024 else (1 if t <= 4096 else 2)) + (3 if rows < FEW_ROWS else 0)


def long_sequence(bucket: int) -> bool:
    """Whether a shape bucket is of the long sequences (> 4096 tokens)."""
    return bucket % 3 == 2
