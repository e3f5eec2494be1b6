"""Runs a Gluon kernel on the CPU for its numerics: each program's body as Python over whole tiles.

Why: Triton's interpreter refuses Gluon, so a Gluon kernel's arithmetic would meet its first test on
the GPU. A Gluon kernel is block-level code: every value is a whole tile, so its body runs as
Python over torch CPU tensors once the ``gl`` names it calls are bound to tile operations here.
A shared buffer is a tensor, and a wgmma a product of its operands as the tensor cores read them
(fp32 ones truncated to tf32, 16-bit ones exact) accumulated in fp64 and rounded to fp32. Layouts
only place the tiles' elements on threads, so the arithmetic ignores them; each value carries its
layout for the race tracker (``gluon_races``), which fails a run whose hand-offs between threads
through shared memory lack a barrier, a proxy fence or a wait.
The arithmetic follows Triton's: its dtype promotion (a Python number of a kind no higher than the
tensor's does not widen it), C integer division, int32 wrap-around, bit casts, ``exp2`` flushing
results below fp32's normal range. Loads and stores check every unmasked address against the
buffer, and a shared buffer takes only its own dtype.

Warp-specialized kernels run their partitions as threads of one program: mbarriers keep phases,
arrival counts and expected bytes as the hardware does, a TMA copy moves its box at once (zeros
read past the tensor, nothing written past it) and completes its bytes on the barrier, and a
partition that waits past ``DEADLOCK_S`` fails the run, naming the barrier, instead of hanging.
The race tracker follows each partition as an agent of its own, ordered by the mbarriers.

What it cannot see: register or shared-memory limits and anything else of the compile. The sm_90
compile tests and the GPU tests cover those.
"""
from __future__ import annotations

import itertools
import math
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
from triton.experimental.gluon import language as _gl

import gluon_races as races
from triton.runtime.jit import ConstexprFunction, JITFunction

try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _HostDescriptor
except ImportError:  # a Triton without Gluon's Hopper host API: no descriptor arguments
    _HostDescriptor = None

_TORCH = {
    _gl.float64: torch.float64, _gl.float32: torch.float32, _gl.float16: torch.float16,
    _gl.bfloat16: torch.bfloat16, _gl.int64: torch.int64, _gl.int32: torch.int32, _gl.int16: torch.int16,
    _gl.int8: torch.int8, _gl.int1: torch.bool, _gl.uint32: torch.int64,  # uint32 held in int64, masked
}
_FROM_TORCH = {torch.float64: _gl.float64, torch.float32: _gl.float32, torch.float16: _gl.float16,
               torch.bfloat16: _gl.bfloat16, torch.int64: _gl.int64, torch.int32: _gl.int32,
               torch.int16: _gl.int16, torch.int8: _gl.int8, torch.bool: _gl.int1}
_KIND = {"bool": 0, "uint": 1, "int": 2, "float": 3}


def _kind(dt) -> int:
    if dt == _gl.int1:
        return _KIND["bool"]
    if dt.is_floating():
        return _KIND["float"]
    return _KIND["uint"] if dt.is_int_unsigned() else _KIND["int"]


def _literal_type(x):
    if isinstance(x, bool):
        return _gl.int1
    if isinstance(x, int):
        if -2**31 <= x < 2**31:
            return _gl.int32
        if 2**31 <= x < 2**32:
            return _gl.uint32
        return _gl.int64
    if isinstance(x, float):
        return _gl.float32
    raise TypeError(f"no Gluon type for {x!r}")


def _promote(a, b, div_or_mod: bool = False):
    """Triton's computation type of a binary operation (``semantic.computation_type_impl``)."""
    a_lit, b_lit = not isinstance(a, Tensor), not isinstance(b, Tensor)
    at = _literal_type(a) if a_lit else a.dt
    bt = _literal_type(b) if b_lit else b.dt
    if a_lit != b_lit:
        lit, ten = (at, bt) if a_lit else (bt, at)
        if _kind(lit) <= _kind(ten):
            at = bt = ten
    if at == _gl.float64 or bt == _gl.float64:
        return _gl.float64
    if div_or_mod and (at.is_floating() or bt.is_floating()):
        return _gl.float32
    if at == _gl.float32 or bt == _gl.float32:
        return _gl.float32
    if at == _gl.float16 or bt == _gl.float16:
        return _gl.float16
    if at == _gl.bfloat16 and bt == _gl.bfloat16:
        return _gl.bfloat16
    if at == _gl.bfloat16 or bt == _gl.bfloat16:
        return _gl.float32
    if at == bt:
        return at
    if at == _gl.int1:
        return bt
    if bt == _gl.int1:
        return at
    width = max(at.int_bitwidth, bt.int_bitwidth)
    unsigned = (at.is_int_unsigned() and at.int_bitwidth == width) or (bt.is_int_unsigned() and bt.int_bitwidth == width)
    return {(32, False): _gl.int32, (32, True): _gl.uint32, (64, False): _gl.int64}[(width, unsigned)]


def _wrap(v: torch.Tensor, dt) -> torch.Tensor:
    """Keep a uint32 (held in int64) in range after arithmetic."""
    return v & 0xFFFFFFFF if dt == _gl.uint32 else v


def _cast(x, dt) -> torch.Tensor:
    """x (a Tensor or a Python number) as a torch tensor of dtype ``dt``'s storage."""
    if isinstance(x, Tensor):
        if x.dt == dt:
            return x.v
        v = x.v
        if dt == _gl.uint32:
            return v.to(torch.int64) & 0xFFFFFFFF
        if x.dt == _gl.uint32:
            v = v & 0xFFFFFFFF
        return v.to(_TORCH[dt])
    return torch.tensor(x, dtype=_TORCH[dt])


class _Type:
    def __init__(self, shape, dt):
        self.shape, self.scalar, self.layout = shape, dt, None


class Tensor:
    """A tile (or a 0-d scalar) of Gluon dtype ``dt``, held as a torch CPU tensor."""

    __slots__ = ("v", "dt", "lay")

    def __init__(self, v: torch.Tensor, dt=None, lay: int | None = None):
        self.v = v
        self.dt = dt if dt is not None else _FROM_TORCH[v.dtype]
        self.lay = lay  # the layout's id (``gluon_races.ident``); None: a scalar, or not known

    # -- what kernels ask of a tensor ------------------------------------------------------------
    @property
    def shape(self) -> list[int]:
        return list(self.v.shape)

    @property
    def dtype(self):
        return self.dt

    @property
    def type(self) -> _Type:
        return _Type(self.shape, self.dt)

    def to(self, dt, bitcast: bool = False) -> Tensor:
        if not bitcast:
            if self.dt.is_floating() and not dt.is_floating():
                return Tensor(_wrap(self.v.to(torch.float64).trunc().to(torch.int64), dt).to(_TORCH[dt]), dt, self.lay)
            return Tensor(_cast(self, dt), dt, self.lay)
        if dt.primitive_bitwidth != self.dt.primitive_bitwidth:
            raise TypeError(f"bitcast {self.dt} -> {dt}: widths differ")
        v = self.v
        if self.dt == _gl.uint32:
            v = v.to(torch.int32)  # the low 32 bits
        if dt == _gl.uint32:
            return Tensor(v.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF, dt, self.lay)
        return Tensor(v.contiguous().view(_TORCH[dt]), dt, self.lay)

    def __getitem__(self, idx) -> Tensor:
        return Tensor(self.v[idx], self.dt, _indexed_layout(self, idx))

    def __index__(self) -> int:
        return int(self.v)

    __int__ = __index__

    def __bool__(self) -> bool:
        raise TypeError("a Gluon tensor has no truth value on the host (a branch on data)")

    def __repr__(self) -> str:
        return f"Tensor({self.dt}, {self.shape})"

    # -- arithmetic ------------------------------------------------------------------------------
    def _bin(self, other, fn: Callable, *, swap: bool = False, div_or_mod: bool = False, out=None) -> Any:
        if isinstance(other, Pointer):
            return NotImplemented
        a, b = (other, self) if swap else (self, other)
        dt = _promote(a, b, div_or_mod)
        res = fn(_cast(a, dt), _cast(b, dt), dt)
        return Tensor(res, out if out is not None else dt, _common_layout(a, b))

    def __add__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a + b, dt))
    def __radd__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a + b, dt), swap=True)
    def __sub__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a - b, dt))
    def __rsub__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a - b, dt), swap=True)
    def __mul__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a * b, dt))
    def __rmul__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a * b, dt), swap=True)

    def __truediv__(self, o):
        def div(a, b, dt):
            return a / b if dt.is_floating() else (a.to(torch.float32) / b.to(torch.float32))
        res = self._bin(o, div, div_or_mod=True)
        return res if res.dt.is_floating() else Tensor(res.v, _gl.float32, res.lay)

    def __rtruediv__(self, o):
        return Tensor(_cast(o, _gl.float32), _gl.float32) / self

    def __floordiv__(self, o): return self._bin(o, _int_div, div_or_mod=True)
    def __rfloordiv__(self, o): return self._bin(o, _int_div, swap=True, div_or_mod=True)
    def __mod__(self, o): return self._bin(o, _int_mod, div_or_mod=True)
    def __rmod__(self, o): return self._bin(o, _int_mod, swap=True, div_or_mod=True)
    def __and__(self, o): return self._bin(o, lambda a, b, dt: a & b)
    def __rand__(self, o): return self._bin(o, lambda a, b, dt: a & b, swap=True)
    def __or__(self, o): return self._bin(o, lambda a, b, dt: a | b)
    def __ror__(self, o): return self._bin(o, lambda a, b, dt: a | b, swap=True)
    def __xor__(self, o): return self._bin(o, lambda a, b, dt: a ^ b)
    def __lshift__(self, o): return self._bin(o, lambda a, b, dt: _wrap(a << b, dt))
    def __rshift__(self, o): return self._bin(o, lambda a, b, dt: a >> b)

    def _cmp(self, o, fn): return self._bin(o, lambda a, b, dt: fn(a, b), out=_gl.int1)
    def __lt__(self, o): return self._cmp(o, torch.lt)
    def __le__(self, o): return self._cmp(o, torch.le)
    def __gt__(self, o): return self._cmp(o, torch.gt)
    def __ge__(self, o): return self._cmp(o, torch.ge)
    def __eq__(self, o): return self._cmp(o, torch.eq)  # type: ignore[override]
    def __ne__(self, o): return self._cmp(o, torch.ne)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __neg__(self): return Tensor(_wrap(-self.v, self.dt), self.dt, self.lay)
    def __invert__(self): return Tensor(~self.v, self.dt, self.lay)


def _common_layout(*xs) -> int | None:
    """The layout of an elementwise result: that of its tile operands (scalars aside), which Gluon
    requires equal; None where one is unknown or they differ."""
    common = None
    for x in xs:
        if isinstance(x, Tensor):
            tile, lay = x.v, x.lay
        elif isinstance(x, Pointer):
            tile, lay = x.off, x.lay
        else:
            continue
        if tile.dim() == 0:
            continue
        if lay is None or (common is not None and lay != common):
            return None
        common = lay
    return common


def _expanded_layout(lay: int | None, axis: int) -> int | None:
    """The layout of a tile given a new axis: the parent of a slice layout along that axis."""
    layout = races.layout_of(lay)
    if isinstance(layout, _gl.SliceLayout) and layout.dim == axis:
        return races.ident(layout.parent)
    return None


def _indexed_layout(x, idx) -> int | None:
    """The layout of ``x[idx]`` where idx only adds axes (``x[:, None]``), else None (not known)."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if not all(i is None or i == slice(None) for i in idx):
        return None
    lay = x.lay
    for axis, i in enumerate(idx):
        if i is None:
            lay = _expanded_layout(lay, axis)
    return lay


def _int_div(a, b, dt):
    if dt.is_floating():
        return torch.floor(a / b)
    return torch.div(a, b, rounding_mode="trunc")  # C semantics, as the GPU's sdiv


def _int_mod(a, b, dt):
    return torch.fmod(a, b)  # the sign of the dividend, as the GPU's srem


class _PointerType:
    def __init__(self, dt):
        self.element_ty = dt


class Pointer:
    """A pointer, or a tile of them, into a flat CPU buffer: element offsets (int64) and the type."""

    __slots__ = ("buf", "off", "dt", "lay")

    def __init__(self, buf: torch.Tensor, off: torch.Tensor, dt, lay: int | None = None):
        self.buf, self.off, self.dt, self.lay = buf, off, dt, lay

    @property
    def dtype(self) -> _PointerType:
        return _PointerType(self.dt)

    def __add__(self, o):
        step = o.v.to(torch.int64) if isinstance(o, Tensor) else torch.tensor(int(o), dtype=torch.int64)
        return Pointer(self.buf, self.off + step, self.dt, _common_layout(self, o))

    __radd__ = __add__

    def __getitem__(self, idx) -> Pointer:
        return Pointer(self.buf, self.off[idx], self.dt, _indexed_layout(self, idx))


def _addresses(ptr: Pointer, mask) -> tuple[torch.Tensor, torch.Tensor]:
    off = ptr.off
    m = torch.ones((), dtype=torch.bool) if mask is None else (mask.v if isinstance(mask, Tensor) else torch.tensor(bool(mask)))
    off, m = torch.broadcast_tensors(off, m)
    bad = m & ((off < 0) | (off >= ptr.buf.numel()))
    if bool(bad.any()):
        raise IndexError(f"{int(bad.sum())} unmasked addresses outside a buffer of {ptr.buf.numel()} elements "
                         f"(offsets {int(off[bad].min())} .. {int(off[bad].max())})")
    return off, m


def _tile_layout(ptr: Pointer) -> int:
    """The layout of a global access: its pointers' (a fresh unknown one where not known)."""
    return ptr.lay if ptr.lay is not None else races.ident(None)


def load(ptr: Pointer, mask=None, other=None, **_kw) -> Tensor:
    off, m = _addresses(ptr, mask)
    track = races.global_track(ptr.buf, ptr.dt, create=False)
    if track is not None:  # only buffers the program wrote
        races.read(track, off[m], _tile_layout(ptr))
    vals = ptr.buf[torch.where(m, off, torch.zeros_like(off))]
    if ptr.dt == _gl.uint32:
        vals = vals.to(torch.int64) & 0xFFFFFFFF
    fill = _cast(other if other is not None else 0, ptr.dt)
    return Tensor(torch.where(m, vals, fill), ptr.dt, ptr.lay)


def store(ptr: Pointer, value, mask=None, **_kw) -> None:
    off, m = _addresses(ptr, mask)
    races.write(races.global_track(ptr.buf, ptr.dt, create=True), off[m], _tile_layout(ptr))
    val = _cast(value, ptr.dt) if isinstance(value, Tensor) else torch.tensor(value, dtype=_TORCH[ptr.dt])
    val = torch.broadcast_to(val, off.shape)
    ptr.buf[off[m]] = val[m].to(ptr.buf.dtype)


class SharedMemory:
    """A shared-memory buffer (or a permuted view of one): a tensor that takes only its own dtype.
    ``ids`` numbers the elements of the allocation the same way, for the race tracker ``track``."""

    def __init__(self, data: torch.Tensor, dt, ids: torch.Tensor | None = None, track=None):
        self.data, self.dt = data, dt
        self.ids = ids if ids is not None else torch.arange(data.numel()).view(data.shape)
        self.track = track

    @property
    def shape(self) -> list[int]:
        return list(self.data.shape)

    @property
    def dtype(self):
        return self.dt

    def fill(self, value: Tensor, tracked: Callable[[Any, torch.Tensor], None]) -> None:
        """``value`` into the buffer (its own dtype and shape only), after ``tracked(track, element
        ids)`` tells the race tracker how it was written."""
        if value.dt != self.dt:
            raise TypeError(f"a {self.dt} shared buffer stored a {value.dt} tensor")
        if list(value.v.shape) != self.shape:
            raise ValueError(f"a {self.shape} shared buffer stored a {value.shape} tensor")
        tracked(self.track, self.ids.reshape(-1))
        self.data.copy_(value.v)

    def store(self, value: Tensor) -> None:
        lay = value.lay if value.lay is not None else races.ident(None)
        self.fill(value, lambda track, ids: races.write(track, ids, lay))

    def load(self, layout=None) -> Tensor:
        lay = races.ident(_real_layout(layout))
        races.read(self.track, self.ids.reshape(-1), lay)
        return Tensor(self.data.clone(), self.dt, lay)

    def permute(self, dims) -> SharedMemory:
        return SharedMemory(self.data.permute(*dims), self.dt, self.ids.permute(*dims), self.track)

    def index(self, i) -> SharedMemory:
        return SharedMemory(self.data[int(i)], self.dt, self.ids[int(i)], self.track)

    def reshape(self, shape) -> SharedMemory:
        shape = [int(x) for x in shape]
        return SharedMemory(self.data.view(*shape), self.dt, self.ids.reshape(*shape), self.track)

    @property
    def type(self) -> _Type:
        return _Type(self.shape, self.dt)


def copy_to_shared(smem: SharedMemory, pointer: Pointer, mask=None, **_kw) -> None:
    """An asynchronous copy global → shared, done at once; masked elements are zero-filled. For the
    race tracker its elements land at the ``copy_wait`` that retires its group."""
    lay = _tile_layout(pointer)
    smem.fill(load(pointer, mask=mask, other=0), lambda track, ids: races.copy_write(track, ids, lay))


def _operand(x) -> torch.Tensor:
    """A wgmma operand as the tensor cores read it, in fp64: fp32 truncated to tf32 (10 mantissa
    bits), 16-bit values exact."""
    dt = x.dt
    v = x.data if isinstance(x, SharedMemory) else x.v
    if dt == _gl.float32:
        v = (v.contiguous().view(torch.int32) & -8192).view(torch.float32)
    elif dt not in (_gl.float16, _gl.bfloat16):
        raise TypeError(f"no wgmma takes {dt} operands here")
    return v.to(torch.float64)


def warpgroup_mma(a, b, acc: Tensor, *, use_acc: bool = True, is_async: bool = False, **_kw) -> Tensor:
    races.mma_issue(is_async)
    for x in (a, b):
        if isinstance(x, SharedMemory):
            races.mma_read(x.track, x.ids.reshape(-1), pending=is_async)
    prod = _operand(a) @ _operand(b)
    if use_acc:
        prod = prod + acc.v.to(torch.float64)
    return Tensor(prod.to(torch.float32), _gl.float32, acc.lay)


def warpgroup_mma_wait(num_outstanding: int = 0, deps=None):
    if deps is None:
        raise ValueError("warpgroup_mma_wait deps must be given")
    races.mma_wait(int(num_outstanding))
    return deps[0] if len(deps) == 1 else tuple(deps)


def _nothing(*_a, **_k) -> None:
    return None


def _barrier(*_a, **_k) -> None:
    races.barrier()


def _fence(*_a, **_k) -> None:
    races.fence()


def _copy_commit(*_a, **_k) -> None:
    races.copy_commit()


def _copy_wait(outstanding=0, *_a, **_k) -> None:
    races.copy_wait(int(outstanding))


# -- TMA, mbarriers, warp specialization -------------------------------------------------------------

#: whether each program's accesses to shared memory (and to the global buffers it writes) are checked
#: for races between its threads and, in a warp-specialized one, between its partitions (``gluon_races``)
CHECK_RACES = True

#: seconds a partition may wait on one barrier before the run fails as a deadlock
DEADLOCK_S = 30.0


class Deadlock(RuntimeError):
    pass


class _Abort:
    """Set when a partition of the running program fails: the others stop waiting."""
    event = threading.Event()


class MBarrier:
    """One mbarrier: a phase counter, the arrivals and transaction bytes its current phase awaits."""

    def __init__(self, name: str = "mbarrier"):
        self.name, self.cv = name, threading.Condition()
        self.count = self.pending = self.tx = self.phase = 0
        self.clock: dict[int, int] | None = None  # what arrivals published (the race tracker's)

    def init(self, count: int) -> None:
        with self.cv:
            self.count = self.pending = int(count)
            self.tx = self.phase = 0
            self.clock = None

    def _settle(self) -> None:
        if self.pending <= 0 and self.tx <= 0:
            if self.pending < 0 or self.tx < 0:
                raise RuntimeError(f"{self.name}: more arrivals or bytes than its phase awaited")
            self.phase += 1
            self.pending, self.tx = self.count, 0
            self.cv.notify_all()

    def arrive(self, count: int = 1) -> None:
        races.release(self)
        with self.cv:
            self.pending -= int(count)
            self._settle()

    def expect(self, nbytes: int) -> None:
        """``mbarrier.arrive.expect_tx``: await nbytes more, and arrive once."""
        races.release(self)
        with self.cv:
            self.tx += int(nbytes)
            self.pending -= 1
            self._settle()

    def complete_tx(self, nbytes: int) -> None:
        with self.cv:
            self.tx -= int(nbytes)
            self._settle()

    def wait(self, parity: int) -> None:
        """Return once the phase of this parity has completed (at once for parity 1 on a fresh one)."""
        with self.cv:
            waited = 0.0
            while self.phase % 2 == int(parity) % 2:
                if _Abort.event.is_set():
                    raise Deadlock(f"{self.name}: another partition failed")
                self.cv.wait(0.05)
                waited += 0.05
                if waited > DEADLOCK_S:
                    raise Deadlock(f"{self.name}: waited {DEADLOCK_S:g} s for parity {parity} "
                                   f"(phase {self.phase}, {self.pending} arrivals and {self.tx} bytes awaited)")
        races.acquire(self)


class _MBarriers:
    """A shared array of mbarriers ([N, 1] int64 in MBarrierLayout), named by the order of their
    allocation in the program (the kernel's first array is "mbarriers 0")."""

    made = 0  # arrays allocated by the running program

    def __init__(self, n: int):
        self.bars = [MBarrier(f"mbarriers {_MBarriers.made}[{i}]") for i in range(n)]
        _MBarriers.made += 1

    def index(self, i) -> MBarrier:
        return self.bars[int(i)]


def _mbar_init(bar: MBarrier, count) -> None:
    bar.init(int(count))


def _mbar_wait(bar: MBarrier, phase, pred=True, deps=(), **_kw) -> None:
    if pred:
        bar.wait(int(phase))


def _mbar_arrive(bar: MBarrier, *, count=1, pred=True, **_kw) -> None:
    if pred:
        bar.arrive(int(count))


def _mbar_expect(bar: MBarrier, nbytes=None, pred=True, **_kw) -> None:
    if pred:
        bar.expect(int(nbytes))


class _BlockType:
    def __init__(self, shape: list[int], dt):
        self.shape, self.dt = list(shape), dt
        self.nbytes = math.prod(self.shape) * dt.primitive_bitwidth // 8


class Descriptor:
    """A host TensorDescriptor's view of its tensor: shape, strides and the box a TMA copy moves."""

    def __init__(self, desc: Any):
        self.view = torch.as_strided(desc.base, [int(x) for x in desc.shape], [int(x) for x in desc.strides])
        self.shape, self.block_shape, self.layout = list(self.view.shape), [int(x) for x in desc.block_shape], desc.layout
        self.dt = _FROM_TORCH[desc.base.dtype]

    @property
    def block_type(self) -> _BlockType:
        return _BlockType(self.block_shape, self.dt)

    @property
    def dtype(self):
        return self.dt

    def _boxes(self, coord):
        """(the box's part inside the tensor, the same part inside the box) as slices."""
        inner, outer = [], []
        for c, n, b in zip((int(x) for x in coord), self.shape, self.block_shape):
            lo, hi = max(c, 0), min(c + b, n)
            hi = max(hi, lo)
            inner.append(slice(lo, hi))
            outer.append(slice(lo - c, hi - c))
        return tuple(inner), tuple(outer)


def _tma_load(desc: Descriptor, coord, bar: MBarrier, smem: SharedMemory, pred=True, **_kw) -> None:
    if not pred:
        return
    inner, outer = desc._boxes(coord)
    box = torch.zeros(desc.block_shape, dtype=desc.view.dtype)
    box[outer] = desc.view[inner]
    smem.fill(Tensor(box.view(smem.data.shape), desc.dt), races.tma_write)
    races.landed(bar)
    bar.complete_tx(desc.block_type.nbytes)


def _tma_store(desc: Descriptor, coord, smem: SharedMemory, **_kw) -> None:
    inner, outer = desc._boxes(coord)
    if smem.dt != desc.dt:
        raise TypeError(f"a TMA store of a {smem.dt} buffer through a {desc.dt} descriptor")
    races.tma_store(smem.track, smem.ids.reshape(-1))
    desc.view[inner] = smem.data.reshape(desc.block_shape)[outer]


def _store_wait(outstanding=0, *_a, **_k) -> None:
    races.store_wait(int(outstanding))


def _warp_specialize(*args, **_kw) -> None:
    """Run the partitions of one program as threads (the list form: [(fn, args), ...], the
    default first; the older form: default args, default fn, worker args, worker fns). The race
    tracker follows each partition as an agent of its own, ordered by the mbarriers."""
    if isinstance(args[0], list):
        parts = [(_python(fn), tuple(a)) for fn, a in args[0]]
    else:
        default_args, default_fn, worker_args, worker_fns = args[:4]
        parts = [(_python(default_fn), tuple(default_args))] + [(_python(f), tuple(worker_args)) for f in worker_fns]
    errors: list[BaseException] = []
    agents = races.fork(len(parts))

    def body(agent, fn, fargs):
        races.enter(agent)
        try:
            with torch.no_grad():  # grad mode is per thread; a kernel's writes are never recorded
                fn(*fargs)
        except BaseException as exc:  # noqa: BLE001 — re-raised by the program
            errors.append(exc)
            _Abort.event.set()

    threads = [threading.Thread(target=body, args=(agent, *part), daemon=True) for agent, part in zip(agents, parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    races.join(agents)
    if errors:
        real = [e for e in errors if not isinstance(e, Deadlock) or "another partition" not in str(e)]
        raise (real or errors)[0]


# -- the gl namespace ------------------------------------------------------------------------------

class _Layout:
    """A layout: it places elements on threads, not their values, so the arithmetic ignores it; the
    race tracker compares the Gluon layouts these stand for (``_real_layout``)."""

    real: Any = None  # the Gluon class this one stands for

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        self._made: Any = None

    @classmethod
    def get_default_for(cls, *args, **kwargs) -> _Layout:
        return cls(*args, **kwargs)

    def made(self) -> Any:
        """The Gluon layout object (compared and hashed by value), or None where it cannot be built."""
        if self._made is None and self.real is not None:
            try:
                self._made = self.real(*[_real_layout(a) for a in self.args],
                                       **{k: _real_layout(v) for k, v in self.kwargs.items()})
            except Exception:  # noqa: BLE001 — an argument only the emulator has: not known
                self._made = False
        return self._made or None


def _real_layout(x: Any) -> Any:
    """A layout argument as Gluon has it: emulated layouts built, constexprs unwrapped."""
    if isinstance(x, _Layout):
        return x.made()
    if isinstance(x, _gl.constexpr):
        return x.value
    return x


def _layout_class(name: str) -> type[_Layout]:
    return type(name, (_Layout,), {"real": getattr(_gl, name, None)})


class _MBarrierLayout(_Layout):
    """An mbarrier array's layout: the allocation is barriers, not a tensor."""


def _given(layout) -> int | None:
    return races.ident(_real_layout(layout)) if layout is not None else None


def _arange(start, end, layout=None) -> Tensor:
    return Tensor(torch.arange(int(start), int(end), dtype=torch.int32), _gl.int32, _given(layout))


def _zeros(shape, dtype, layout=None) -> Tensor:
    return Tensor(torch.zeros(*[int(s) for s in shape], dtype=_TORCH[dtype]), dtype, _given(layout))


def _full(shape, value, dtype, layout=None) -> Tensor:
    return Tensor(torch.full([int(s) for s in shape], value, dtype=_TORCH[dtype]), dtype, _given(layout))


def _where(cond, a, b) -> Tensor:
    dt = _promote(a, b)
    c = cond.v if isinstance(cond, Tensor) else torch.tensor(bool(cond))
    return Tensor(torch.where(c.to(torch.bool), _cast(a, dt), _cast(b, dt)), dt, _common_layout(cond, a, b))


def _reduce(x: Tensor, axis, fn, keep_dims: bool = False) -> Tensor:
    lay = None
    if axis is None:
        v = fn(x.v.reshape(-1), 0)
    else:
        v = fn(x.v, int(axis))
        parent = races.layout_of(x.lay)
        if keep_dims:
            v = v.unsqueeze(int(axis))
            lay = x.lay
        elif parent is not None:
            lay = races.ident(_gl.SliceLayout(int(axis) % x.v.dim(), parent))
    return Tensor(v.to(x.v.dtype), x.dt, lay)


def _sum(x: Tensor, axis=None, keep_dims: bool = False, **_kw) -> Tensor:
    return _reduce(x, axis, lambda v, d: v.sum(d, dtype=v.dtype), keep_dims)


def _max(x: Tensor, axis=None, keep_dims: bool = False, **_kw) -> Tensor:
    return _reduce(x, axis, lambda v, d: v.amax(d), keep_dims)


def _min(x: Tensor, axis=None, keep_dims: bool = False, **_kw) -> Tensor:
    return _reduce(x, axis, lambda v, d: v.amin(d), keep_dims)


def _associative_scan(x: Tensor, axis, combine_fn, reverse: bool = False) -> Tensor:
    """An inclusive scan along ``axis``, in order (reversed: from the end), by the kernel's own
    combine function on the slices."""
    axis = int(axis) % x.v.dim()
    n = x.v.shape[axis]
    order = range(n - 1, -1, -1) if reverse else range(n)
    out, acc = [None] * n, None
    for i in order:
        item = Tensor(x.v.select(axis, i), x.dt)
        acc = item if acc is None else combine_fn(acc, item)
        out[i] = acc.v
    return Tensor(torch.stack(out, axis), acc.dt, x.lay)


def _exp2(x: Tensor) -> Tensor:
    """ex2.approx.ftz.f32: results below fp32's normal range flush to 0."""
    y = torch.exp2(x.v)
    return Tensor(torch.where(y.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(y), y), x.dt, x.lay)


def _elementwise(fn) -> Callable:
    return lambda x: Tensor(fn(x.v), x.dt, x.lay)


def _binary(fn) -> Callable:
    def op(a, b, **_kw):
        dt = _promote(a, b)
        return Tensor(fn(_cast(a, dt), _cast(b, dt)), dt, _common_layout(a, b))
    return op


def _static_assert(cond, msg: str = "") -> None:
    if not cond:
        raise AssertionError(f"gl.static_assert: {msg}")


class _Program:
    pid: tuple[int, int, int] = (0, 0, 0)
    grid: tuple[int, int, int] = (1, 1, 1)


def _program_id(axis) -> Tensor:
    return Tensor(torch.tensor(_Program.pid[int(axis)], dtype=torch.int32), _gl.int32)


def _num_programs(axis) -> Tensor:
    return Tensor(torch.tensor(_Program.grid[int(axis)], dtype=torch.int32), _gl.int32)


def _allocate_shared_memory(dtype, shape, layout=None, value=None) -> SharedMemory | _MBarriers:
    if isinstance(layout, _MBarrierLayout):
        return _MBarriers(int(shape[0]))
    data = torch.full([int(s) for s in shape], float("nan") if dtype.is_floating() else -1, dtype=_TORCH[dtype])
    smem = SharedMemory(data, dtype, track=races.shared_track(data.numel(), list(data.shape), dtype))
    if value is not None:
        smem.store(value)
    return smem


def _namespace() -> types.SimpleNamespace:
    ns = types.SimpleNamespace()
    for name in dir(_gl):
        obj = getattr(_gl, name)
        if isinstance(obj, _gl.dtype):
            setattr(ns, name, obj)
    for name in ("BlockedLayout", "SliceLayout", "NVMMADistributedLayout", "NVMMASharedLayout",
                 "SwizzledSharedLayout", "DistributedLinearLayout", "AutoLayout", "DotOperandLayout"):
        setattr(ns, name, _layout_class(name))
    ns.dtype = _gl.dtype
    ns.constexpr = lambda x=None: x
    ns.static_range = lambda *args: range(*[int(a) for a in args])
    ns.static_assert = _static_assert
    ns.program_id, ns.num_programs = _program_id, _num_programs
    ns.arange, ns.zeros, ns.full = _arange, _zeros, _full
    ns.load, ns.store, ns.where = load, store, _where
    ns.sum, ns.max, ns.min = _sum, _max, _min
    ns.associative_scan = _associative_scan
    ns.reshape = lambda x, shape, **_kw: Tensor(x.v.reshape(*[int(s) for s in shape]), x.dt)
    ns.permute = lambda x, dims: Tensor(x.v.permute(*dims).contiguous(), x.dt)
    ns.expand_dims = lambda x, axis: Tensor(x.v.unsqueeze(int(axis)), x.dt, _expanded_layout(x.lay, int(axis)))
    ns.convert_layout = lambda x, layout, **_kw: Tensor(x.v, x.dt, _given(layout))
    ns.abs = _elementwise(torch.abs)
    ns.exp = _elementwise(torch.exp)
    ns.exp2 = _exp2
    ns.log = _elementwise(torch.log)
    ns.sqrt = _elementwise(torch.sqrt)
    ns.minimum, ns.maximum = _binary(torch.minimum), _binary(torch.maximum)
    ns.allocate_shared_memory = _allocate_shared_memory
    ns.thread_barrier = ns.barrier = _barrier
    ns.warp_specialize = _warp_specialize
    ns.cdiv = lambda a, b: (a + b - 1) // b
    return ns


_GL = _namespace()
# the names the kernels import from ``common.gluon_compat`` besides ``gl``
_MBARRIER = types.SimpleNamespace(init=_mbar_init, wait=_mbar_wait, arrive=_mbar_arrive, expect=_mbar_expect,
                                  MBarrierLayout=_MBarrierLayout,
                                  allocate_mbarrier=lambda *a, **k: _MBarriers(1).index(0))
_TMA = types.SimpleNamespace(store_wait=_store_wait, async_copy_global_to_shared=_tma_load, async_load=_tma_load,
                             async_copy_shared_to_global=_tma_store, async_store=_tma_store)
_COMPAT = {"gl": _GL, "cta_barrier": _barrier, "fence_async_shared": _fence,
           "warpgroup_mma": warpgroup_mma, "warpgroup_mma_wait": warpgroup_mma_wait,
           "copy_to_shared": copy_to_shared, "copy_commit": _copy_commit, "copy_wait": _copy_wait,
           "mbarrier": _MBARRIER, "tma": _TMA, "tma_load": _tma_load, "tma_store": _tma_store, "WS_LIST_FORM": True,
           # grid dependency control orders kernels on the GPU; here each launch runs to its end in turn
           "grid_dependents": _nothing, "grid_dependency_wait": _nothing}

_GLOBALS: dict[int, dict] = {}
_FUNCS: dict[int, Callable] = {}


def _python(fn: Any) -> Any:
    """The Python function that runs a jitted function's body here (its module's globals rebound)."""
    if isinstance(fn, ConstexprFunction):
        return fn.fn
    if not isinstance(fn, JITFunction):
        return fn
    raw = fn.fn
    made = _FUNCS.get(id(raw))
    if made is None:
        made = types.FunctionType(raw.__code__, _module_globals(raw.__globals__), raw.__name__, raw.__defaults__,
                                  raw.__closure__)
        _FUNCS[id(raw)] = made
    return made


class _Rebound(dict):
    """A module's globals with its jitted functions and Gluon names rebound, looked up lazily (so that
    tests' patches of a module show)."""

    def __init__(self, original: dict):
        super().__init__()
        self.original = original

    def __missing__(self, name: str):
        if name in _COMPAT:
            return _COMPAT[name]
        value = self.original[name]
        if isinstance(value, _gl.constexpr):
            return value.value
        return _python(value)


def _module_globals(original: dict) -> dict:
    made = _GLOBALS.get(id(original))
    if made is None:
        made = _GLOBALS[id(original)] = _Rebound(original)
        made["__builtins__"] = original.get("__builtins__", __builtins__)
    return made


def _argument(x: Any) -> Any:
    if _HostDescriptor is not None and isinstance(x, _HostDescriptor):
        return Descriptor(x)
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError("the Gluon emulator takes CPU tensors")
        flat = x.view(-1) if x.is_contiguous() else x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
        dt = _FROM_TORCH[x.dtype]
        return Pointer(flat, torch.tensor(0, dtype=torch.int64), dt)
    if isinstance(x, bool):
        return Tensor(torch.tensor(x), _gl.int1)
    if isinstance(x, int):
        dt = _literal_type(x)
        return Tensor(torch.tensor(x, dtype=_TORCH[dt]), dt)
    if isinstance(x, float):
        return Tensor(torch.tensor(x, dtype=torch.float32), _gl.float32)
    return x


# launch options a kernel call takes besides its parameters
_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "warps_per_cta", "grid", "launch_pdl"}


def run(kernel: JITFunction, grid: Iterable[int], *args: Any, **kwargs: Any) -> None:
    """Run ``kernel[grid](*args, **kwargs)`` here: every program of the grid in turn, in order."""
    params = kernel.params
    values = list(args)
    for p in params[len(args):]:
        if p.name in kwargs:
            values.append(kwargs[p.name])
        elif p.has_default:
            values.append(p.default)
        else:
            raise TypeError(f"{kernel.fn.__name__}: no value for {p.name}")
    unknown = set(kwargs) - {p.name for p in params} - _LAUNCH_OPTIONS
    if unknown:
        raise TypeError(f"{kernel.fn.__name__}: unknown arguments {sorted(unknown)}")
    bound = [v if p.is_constexpr else _argument(v) for p, v in zip(params, values)]
    body = _python(kernel)
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(tuple(grid)))
    _Program.grid = g
    try:
        with torch.no_grad():
            for pid in itertools.product(range(g[0]), range(g[1]), range(g[2])):
                _Program.pid = pid
                races.begin(CHECK_RACES)
                _Abort.event.clear()
                _MBarriers.made = 0
                body(*bound)
    finally:
        _Program.pid, _Program.grid = (0, 0, 0), (1, 1, 1)
        races.stop()


class Launcher:
    """Stands in for a kernel's ``LazyLauncher`` (``launcher(key, args, spec, stream)``): each call
    runs ``kernel`` here on the grid and keywords of its spec, and is counted, its keywords kept."""

    def __init__(self, kernel: JITFunction):
        self.kernel, self.keywords = kernel, []

    @property
    def launches(self) -> int:
        return len(self.keywords)

    def __call__(self, key, args: tuple, spec: Callable, stream=None) -> None:
        grid, kw = spec()
        run(self.kernel, grid({}), *args, **kw)
        self.keywords.append(kw)
