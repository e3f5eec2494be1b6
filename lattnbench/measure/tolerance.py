"""The one tolerance table and the error measure every agreement check uses.

err = RMS(x − ref) / RMS(ref), reference in fp64 from the same dtype-rounded inputs.
The bounds are set from what each dtype's rounding allows (output rounding plus low-precision
matmul operands), never loosened to make a kernel pass. NaN or Inf always fails.
"""
from __future__ import annotations

import math

import numpy as np

#: largest accepted err_ratio per input dtype
TOLERANCE: dict[str, float] = {
    "fp64": 1e-9,
    "fp32": 1e-5,   # needs IEEE fp32 matmuls: TF32 lands near 3e-4 and fails, as it should
    "fp16": 2e-3,
    "bf16": 1.5e-2,
}

#: fla's own tests judge the same measure (their ``get_err_ratio``) at 0.005 for every tensor of the
#: GLA, simple-GLA and Lightning ops, in fp16, bf16 and fp32 alike (``assert_close(..., 0.005)`` in
#: tests/ops/test_gla.py, test_simple_gla.py, test_lightning_attn.py), so a row can be read in their terms
FLA_TOLERANCE = 5e-3

#: the tables ``check-grad --tolerance`` chooses from; rows record theirs as ``tol_table``
TOLERANCE_TABLES = ("lattnbench", "fla")


def tolerance(dtype: str, table: str = "lattnbench") -> float:
    """The largest accepted err_ratio of a tensor in ``dtype`` by ``table`` (TOLERANCE_TABLES)."""
    if table == "fla":
        return FLA_TOLERANCE
    if table != "lattnbench":
        raise ValueError(f"unknown tolerance table {table!r}: choose {', '.join(TOLERANCE_TABLES)}")
    return TOLERANCE[dtype]


def to_numpy64(x) -> np.ndarray:
    """Any torch / JAX / numpy array as a float64 numpy array (host copy)."""
    if hasattr(x, "detach"):  # torch
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def why_infinite(x, ref) -> str:
    """Why err_ratio(x, ref) is inf: the shapes, or how many values are NaN / Inf."""
    a, b = to_numpy64(x), to_numpy64(ref)
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} where the reference has {tuple(b.shape)}"
    nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
    return f"not finite: {nan} NaN and {inf} Inf of {a.size} values"


def fail_reason(x, ref, err: float, tol: float) -> str:
    """What a failing agreement row says: why err is inf, else err against the tolerance."""
    return why_infinite(x, ref) if math.isinf(err) else f"err {err:.3g} > tol {tol:g}"


def err_ratio(x, ref) -> float:
    """RMS(x − ref) / RMS(ref); inf when x has NaN/Inf or the shapes differ."""
    a, b = to_numpy64(x), to_numpy64(ref)
    if a.shape != b.shape or not np.isfinite(a).all():
        return math.inf
    denom = math.sqrt(float(np.mean(b * b))) or 1.0
    return math.sqrt(float(np.mean((a - b) ** 2))) / denom
