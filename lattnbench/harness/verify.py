"""Agreement (check-grad): a kernel's outputs and gradients against an fp64 reference.

The kernel and the reference see the very same inputs: fresh random arrays, rounded to the
case dtype, then upcast to fp64 for the reference. Cotangents for o and S_T are random too,
so every gradient path (including the one through the final state) is exercised.
Long sequences use the fp64 chunked reference (itself tested against the quadratic one).
"""
from __future__ import annotations

import numpy as np

from lattnbench.harness.points import base_row, classify, make_problem, point_gate
from lattnbench.measure.tolerance import err_ratio, fail_reason
from lattnbench.operators import family as family_of
from lattnbench.operators.base import GRAD_NAMES
from lattnbench.operators.inputs import constants, numpy_inputs
from lattnbench.registry import KernelEntry
from lattnbench.spec import Case


def reference(family: str, case: Case, arrays: dict[str, np.ndarray], entry: KernelEntry,
              with_state_grad: bool, device: str = "cpu") -> dict[str, np.ndarray]:
    """fp64 outputs and gradients of the family's contract on the case-dtype-rounded inputs."""
    import torch

    from lattnbench.adapters.torch_problem import DTYPES

    fam = family_of(family)
    dev = torch.device(device)
    t = {}
    for name, x in arrays.items():
        rounded = torch.from_numpy(x).to(DTYPES[fam.stored_dtype(name, case)])
        t[name] = rounded.to(dev, torch.float64)
    const = constants(case, entry)
    diff = [n for n in fam.differentiable if n in t]
    for n in diff:
        t[n].requires_grad_(True)
    cu = None if const.cu_seqlens is None else [int(c) for c in const.cu_seqlens]
    gamma = torch.from_numpy(const.gamma).to(dev, torch.float64)
    outs = tuple(fam.reference(t, case, gamma, const.scale, cu))
    cots = [t["do"]] + ([t["dS"]] if len(outs) > 1 and with_state_grad else [])
    grads = torch.autograd.grad(outs[: len(cots)], [t[n] for n in diff], cots, allow_unused=True)
    got = dict(zip(fam.outputs(), outs))
    got.update({GRAD_NAMES[n]: g for n, g in zip(diff, grads)})
    return {k: v.detach().cpu().numpy() for k, v in got.items() if v is not None}


def expected_tensors(entry: KernelEntry, case: Case) -> list[str]:
    """The tensors check-grad reports for a kernel and case, in table order (its family's)."""
    return family_of(entry.family).expected_tensors(case)


def tensor_tolerance(entry: KernelEntry, case: Case, tensor: str, table: str = "lattnbench") -> float:
    """A tensor's tolerance on a case, as the kernel's family sets it (a gate's gradient also by the
    g dtype, since it is returned in that dtype)."""
    return family_of(entry.family).tolerance(case, tensor, table)


def check(entry: KernelEntry, case: Case, device: str, seed: int = 0, table: str = "lattnbench") -> list[dict]:
    """err_ratio rows, one per tensor, each with its tolerance and PASS (ok) / FAIL (fail).

    Every tensor row says whether a second call on the same inputs gave bitwise the same value
    (``deterministic``; not asked of the eager re-check). A JAX kernel whose gradient fails under ``jax.jit`` gets that failure as
    rows of their own, then the same call is checked eagerly (rows with ``exec: "eager"``), so a
    wrong value is still caught tensor by tensor.
    """
    def row(tensor: str, **kw) -> dict:
        return {**base_row(entry, case, device, "fwdbwd", "err_ratio"), "tensor": tensor,
                "tol": tensor_tolerance(entry, case, tensor, table), "tol_table": table, **kw}

    expected = expected_tensors(entry, case)
    gated = point_gate(entry, case, device)
    if gated is not None:
        return [row(t, status=gated[0], reason=gated[1]) for t in expected]
    arrays = numpy_inputs(case, entry.family, seed)
    try:
        problem = make_problem(entry, case, device, seed, arrays)
        outs = problem.fwd()  # the forward alone first: a broken backward must not hide it
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a finding, recorded
        status, reason = classify(exc, entry)
        return [row(t, status=status, reason=reason) for t in expected]
    got: dict = {"o": outs[0], "final_state": outs[1] if len(outs) > 1 else None}
    twice = problem.fwd()
    again: dict | None = {"o": twice[0], "final_state": twice[1] if len(twice) > 1 else None}
    failed: dict[str, tuple[str, str]] = {}  # tensor -> (status, reason) of a crash
    eager = None  # the eager re-check's results, after a failure under jit
    try:
        got = problem.results()
        again = problem.results()
    except Exception as exc:  # noqa: BLE001
        status, reason = classify(exc, entry)
        failed = {t: (status, f"backward: {reason}") for t in expected if t not in ("o", "final_state")}
        if entry.framework == "jax":
            try:
                eager = problem.results(eager=True)  # once: eager JAX is slow, and this is a fallback
            except Exception as exc2:  # noqa: BLE001
                status2, reason2 = classify(exc2, entry)
                eager = {"__error__": (status2, f"eager: {reason2}")}
    with_state = got.get("final_state") is not None
    ref_device = device if device == "cuda" else "cpu"
    try:
        ref = reference(entry.family, case, arrays, entry, with_state, ref_device)
    except Exception as exc:  # noqa: BLE001 - e.g. the reference itself out of memory
        status, reason = classify(exc, entry)
        return [row(t, status=status, reason=f"reference: {reason}") for t in expected]

    def compare(name: str, value, twin, **extra) -> dict:
        if value is None:
            return row(name, status="fail", reason="kernel returned no gradient", median=float("nan"), **extra)
        err = err_ratio(value, ref[name])
        tol = tensor_tolerance(entry, case, name, table)
        ok = err <= tol
        same = None if twin is None else bool(np.array_equal(_numpy(value), _numpy(twin), equal_nan=True))
        return row(name, median=err, err=err, status="ok" if ok else "fail", deterministic=same,
                   reason=None if ok else fail_reason(value, ref[name], err, tol), **extra)

    rows = []
    for name in expected:
        if name == "final_state" and not with_state:
            rows.append(row(name, status="unsupported", reason="kernel returns no final state"))
        elif name in failed:
            rows.append(row(name, status=failed[name][0], reason=failed[name][1]))
        else:
            rows.append(compare(name, got.get(name), again.get(name)))
    if eager is not None:
        for name in failed:
            if "__error__" in eager:
                status, reason = eager["__error__"]
                rows.append(row(name, status=status, reason=reason, exec="eager"))
            else:
                rows.append(compare(name, eager.get(name), None, exec="eager"))
    return rows


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def rows_to_check(batch: int) -> list[int]:
    """The first and the last batch row: the last has the largest offsets (int32 overflow shows there)."""
    return sorted({0, batch - 1})


def check_rows(entry: KernelEntry, case: Case, device: str, seed: int = 0, table: str = "lattnbench") -> list[dict]:
    """Each checked batch row, computed in the batch, against the same row computed alone.

    Catches what depends on where a row sits in memory (offsets past 2^31 elements, a grid
    mapping that mixes rows) with no fp64 reference, so it runs at sizes the reference cannot:
    ``err = RMS(in batch − alone) / RMS(alone)`` per tensor (o, final state, every gradient)
    against the dtype's tolerance, in rows with ``check: "row B"``.
    """
    expected = expected_tensors(entry, case)
    checked = rows_to_check(case.batch)

    def row(tensor: str, b: int, **kw) -> dict:
        return {**base_row(entry, case, device, "fwdbwd", "err_ratio"), "tensor": tensor,
                "tol": tensor_tolerance(entry, case, tensor, table), "tol_table": table, "check": f"row {b}", **kw}

    def every(status: str, reason: str) -> list[dict]:
        return [row(t, b, status=status, reason=reason) for b in checked for t in expected]

    if case.varlen or case.batch < 2:
        return every("unsupported", "the batch-row check needs batch >= 2 and no packed varlen")
    gated = point_gate(entry, case, device)
    if gated is not None:
        return every(*gated)
    from lattnbench.harness.memory_fit import too_big

    big = too_big(entry, case.with_(batch=case.batch + 1), "fwdbwd", device)  # the batch and a row alone
    if big is not None:
        return every("oom", big)
    try:
        problem = make_problem(entry, case, device, seed)  # drawn on the device: no host copy of GBs
        full = problem.results()
    except Exception as exc:  # noqa: BLE001
        return every(*classify(exc, entry))
    out = []
    for b in checked:
        try:
            alone = problem.row(b).results()
        except Exception as exc:  # noqa: BLE001
            status, reason = classify(exc, entry)
            out.extend(row(t, b, status=status, reason=f"alone: {reason}") for t in expected)
            continue
        for name in expected:
            mine, ref = full.get(name), alone.get(name)
            if mine is None or ref is None:
                out.append(row(name, b, status="unsupported" if name == "final_state" else "fail",
                               reason="kernel returns no " + name.replace("_", " ")))
                continue
            err = err_ratio(mine[b:b + 1], ref)
            tol = tensor_tolerance(entry, case, name, table)
            ok = err <= tol
            why = None if ok else f"row {b} in the batch differs from it alone: " + fail_reason(mine[b:b + 1], ref, err, tol)
            out.append(row(name, b, median=err, err=err, status="ok" if ok else "fail", reason=why))
        del alone
    return out
