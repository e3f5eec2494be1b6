"""Input checks of the torch entry point, and the small device tensors it derives (γ, cu_seqlens).

Every check reads shapes, dtypes and devices only, never the contents of a tensor on the GPU:
reading one is a device sync, which would stall the host on every call and break CUDA-graph
capture. Values are checked where they are on the host anyway (Python lists, numpy arrays, CPU
tensors). A CUDA ``cu_seqlens`` is checked for its shape and dtype; the kernels clamp every
sequence to [0, T], so bad offsets give wrong numbers, never an out-of-bounds access.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import torch

Tensor = torch.Tensor

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CU_DTYPES = (torch.int32, torch.int64)
# γ and cu_seqlens given as Python / numpy values: one device copy per distinct value, not per call
_VALUE_CACHE_SIZE = 64
_VALUE_TENSORS: OrderedDict[tuple, Tensor] = OrderedDict()


def validate(q, k, v, initial_state, cu_seqlens) -> tuple[int, int, int]:
    """Check the contract's shapes; return (N, kv heads, E). Raises ValueError."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must be [B, T, H, D] (rank 4), got rank {x.dim()}")
    dtype = q.dtype
    if k.dtype != dtype or v.dtype != dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {q.dtype}")
    device = q.device
    if k.device != device or v.device != device:
        raise ValueError("q, k, v must be on one device")
    b, t, h, d = q.shape
    kb, kt, hkv, kd = k.shape
    vb, vt, vh, e = v.shape
    if kb != b or vb != b or kt != t or vt != t or kd != d or vh != hkv:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if hkv == 0 or h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of kv heads ({hkv})")
    if d == 0 or e == 0:
        raise ValueError("head dims must be positive")
    n = b
    if cu_seqlens is not None:
        if b != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1, got {b}")
        n = _cu_count(cu_seqlens)
    if initial_state is not None:
        want = (n, h, d, e)
        if not isinstance(initial_state, torch.Tensor) or tuple(initial_state.shape) != want:
            got = tuple(initial_state.shape) if hasattr(initial_state, "shape") else type(initial_state).__name__
            raise ValueError(f"initial_state must be [N, H, D, E] = {want}, got {got}")
    return n, hkv, e


class HostArgs(NamedTuple):
    """A call's arguments as the launches take them (``host_args``): ``empty`` is the whole result
    of a call with no tokens, which launches nothing."""

    scale: float
    h0: Tensor | None
    cu: Tensor | None
    empty: tuple | None


def host_args(q: Tensor, v: Tensor, n: int, scale, initial_state, cu_seqlens,
              output_final_state: bool) -> HostArgs:
    """The scale (D^-1/2 by default; ValueError unless finite), cu_seqlens as an int32 device
    tensor, the initial state in fp32 on q's device, and the result of a call with T = 0: no
    tokens, the final state is the initial one (or zeros)."""
    b, t, h, d = q.shape
    scale = d**-0.5 if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    cu = None if cu_seqlens is None else cu_tensor(cu_seqlens, t, q.device)
    h0 = initial_state
    # no copy, not even a no-op .to(), for the usual fp32 state: short calls are host-bound
    if h0 is not None and (h0.dtype != torch.float32 or h0.device != q.device or not h0.is_contiguous()):
        h0 = h0.to(device=q.device, dtype=torch.float32).contiguous()
    if t == 0:
        ht = h0.clone() if h0 is not None else torch.zeros(n, h, d, v.shape[3], device=q.device)
        return HostArgs(scale, h0, cu, (q.new_zeros(b, 0, h, v.shape[3]), ht if output_final_state else None))
    return HostArgs(scale, h0, cu, None)


def values_on_host(x) -> bool:
    """Whether the values of ``x`` can be read without a device sync (and outside a trace)."""
    if isinstance(x, torch.Tensor):
        return x.device.type == "cpu" and not torch.compiler.is_compiling()
    return True


def _cu_count(cu_seqlens) -> int:
    """N, the number of sequences of ``cu_seqlens``, from its length (known on the host)."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype not in CU_DTYPES:
            raise ValueError(f"cu_seqlens must be a 1-D int32 / int64 tensor, got {cu_seqlens.dtype} "
                             f"of rank {cu_seqlens.dim()}")
        count = cu_seqlens.shape[0]
    else:
        count = len(cu_seqlens)
    if count < 2:
        raise ValueError(f"cu_seqlens must hold at least two offsets, got {count}")
    return count - 1


def cu_tensor(cu_seqlens, t: int, device: torch.device) -> Tensor:
    """cu_seqlens as a contiguous int32 / int64 tensor on ``device``; its values are checked
    (they must rise from 0 to T) wherever they are on the host."""
    if not values_on_host(cu_seqlens):
        if cu_seqlens.device != device:
            raise ValueError(f"cu_seqlens is on {cu_seqlens.device}, q on {device}")
        return cu_seqlens if cu_seqlens.is_contiguous() else cu_seqlens.contiguous()
    is_tensor = isinstance(cu_seqlens, torch.Tensor)
    cu = [int(x) for x in (cu_seqlens.tolist() if is_tensor else np.asarray(cu_seqlens).reshape(-1))]
    if cu[0] != 0 or cu[-1] != t or any(x > y for x, y in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {cu}")
    if is_tensor and cu_seqlens.device == device:
        return cu_seqlens if cu_seqlens.is_contiguous() else cu_seqlens.contiguous()
    return _value_tensor(("cu", device, tuple(cu)), lambda: torch.tensor(cu, dtype=torch.int32, device=device))


def gamma_tensor(gamma, h: int, device: torch.device) -> Tensor:
    """The log decay per query head as a contiguous fp32 [H] tensor on ``device`` (zeros for None)."""
    if isinstance(gamma, torch.Tensor):
        if (gamma.dtype == torch.float32 and gamma.device == device and gamma.dim() == 1
                and gamma.shape[0] == h and not gamma.requires_grad and gamma.is_contiguous()):
            return gamma  # the common case, as the harness and lightning_attn pass it: no torch calls
        g = gamma.detach().to(device=device, dtype=torch.float32).reshape(-1)
        if g.shape[0] != h:
            raise ValueError(f"gamma must have one value per query head ({h}), got {g.shape[0]}")
        return g.contiguous()
    if gamma is None:
        if torch.compiler.is_compiling():
            return torch.zeros(h, dtype=torch.float32, device=device)
        return _value_tensor(("zeros", device, h), lambda: torch.zeros(h, dtype=torch.float32, device=device))
    arr = np.asarray(gamma, dtype=np.float32).reshape(-1)
    if arr.size != h:
        raise ValueError(f"gamma must have one value per query head ({h}), got {arr.size}")
    if (arr > 0).any():
        raise ValueError("gamma must be <= 0 (a decay)")
    if torch.compiler.is_compiling():
        return torch.tensor(arr.tolist(), dtype=torch.float32, device=device)
    return _value_tensor(("gamma", device, arr.tobytes()), lambda: torch.as_tensor(arr, device=device))


def _value_tensor(key: tuple, make) -> Tensor:
    """A device tensor made from host values, one per distinct key (least recently used dropped).
    Nothing is kept while a CUDA graph is being captured: a tensor made then is filled only when
    the graph replays."""
    x = _VALUE_TENSORS.get(key)
    if x is not None:
        _VALUE_TENSORS.move_to_end(key)
        return x
    x = make()
    if not (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        _VALUE_TENSORS[key] = x
        if len(_VALUE_TENSORS) > _VALUE_CACHE_SIZE:
            _VALUE_TENSORS.popitem(last=False)
    return x
