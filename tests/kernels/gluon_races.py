"""Races between the threads of a Gluon program, found on the CPU by the Gluon emulator.

Why: the emulator runs a program's body over whole tiles, so an unordered hand-off between threads
leaves its numbers right there. On the GPU, Triton's barrier pass adds a CTA barrier wherever its
analysis of a program's shared-memory accesses finds a hazard with none between (it does not know
layouts, so it also adds some a same-layout round trip does not need); the rest is the program's
own: a wgmma's operands held until its wait, a copy landing at its wait, the proxy fence before
the tensor cores read what threads wrote. A kernel that hands tiles between layouts by hand (the
GLA prep and in-chunk launches) places its barriers itself, and every one it places that orders
nothing is a barrier the compiled loop passes for nothing. This checks, on every emulated run, that
the program's own barriers, fences and waits order every hand-off, so that each barrier's job is
known and none is spare.

The model. Every emulated value carries its distributed layout: which thread holds which element.
Two accesses to one element of a shared buffer (or of a global one the program wrote) from
different layouts are ordered only by a CTA barrier between them. So these are races:

- a read of an element written since the last barrier in another layout (RAW);
- a write of an element read or written since the last barrier in another layout (WAR, WAW);
- a wgmma reading a shared operand written since the last barrier, or not fenced
  (``fence_async_shared``) after its write and before that barrier: the tensor cores read through
  the async proxy, as no thread's layout;
- a write to an operand of an asynchronous wgmma before the ``warpgroup_mma_wait`` that retires it;
- any access to an element a ``copy_to_shared`` writes before the ``copy_wait`` that retires its
  group, after which the copy counts as a write in its pointers' layout.

Equal layouts hand each element to the same thread, so a round trip through shared memory in one
layout needs no barrier. Layouts equal in placement but built differently count as different: a
false race, never a missed one. Elements are tracked one by one, so the slots of a ring are
independent. Warp-specialized programs are not checked past ``warp_specialize``: their partitions
order their accesses by mbarriers, which this does not follow.
"""
from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import torch


class Race(AssertionError):
    """Two accesses to one element by different threads with nothing ordering them."""


ASYNC = 0       # reads by the tensor cores (async proxy): no thread's layout
MIXED = -1      # elements read in several layouts since the last barrier
_NONE = -2      # "no access yet"
_count = itertools.count(1)
_ids: dict[Any, int] = {}
_layouts: dict[int, Any] = {}


def ident(layout: Any) -> int:
    """A positive id per distinct layout (equal layouts share it), a fresh negative one (below every
    special value) for an unknown layout, which then equals no other."""
    if layout is None:
        return -2 - next(_count)
    found = _ids.get(layout)
    if found is None:
        found = _ids.setdefault(layout, next(_count))
        _layouts[found] = layout
    return found


def layout_of(lay: int | None) -> Any:
    """The layout an id stands for (None: unknown)."""
    return _layouts.get(lay) if lay is not None else None


class Track:
    """What happened to each element of one buffer since the program began: its last write (the
    barrier epoch, layout and event), its reads since then, whether the write is fenced, and the
    asynchronous accesses still in flight."""

    def __init__(self, numel: int, name: str):
        def full(v: int) -> torch.Tensor:
            return torch.full((numel,), v, dtype=torch.int64)
        self.name = name
        self.w_epoch, self.w_lay, self.w_at = full(_NONE), full(_NONE), full(-1)
        self.r_epoch, self.r_lay, self.r_at = full(_NONE), full(_NONE), full(-1)
        self.fenced = torch.ones(numel, dtype=torch.bool)
        self.pend_r, self.pend_w = full(0), full(0)


class _State:
    active = False
    epoch = 0
    events: list[tuple[str, int]] = []     # (file, line) of each access, formatted on failure
    shared: list[Track] = []
    written: dict[int, Track] = {}          # global buffers the program wrote, by address
    mma_groups: list[list[tuple[Track, torch.Tensor]]] = []
    copies_open: list[tuple[Track, torch.Tensor, int]] = []
    copy_groups: list[list[tuple[Track, torch.Tensor, int]]] = []


def begin(active: bool) -> None:
    """A program starts: nothing has happened to any buffer yet."""
    _State.active = active
    _State.epoch = 0
    _State.events, _State.shared, _State.written = [], [], {}
    _State.mma_groups, _State.copies_open, _State.copy_groups = [], [], []


def stop() -> None:
    """The rest of the program is not checked (warp specialization)."""
    _State.active = False


def active() -> bool:
    return _State.active


def _where(frame) -> tuple[str, int]:
    """The innermost frame outside the emulator (the kernel's line of an access)."""
    while frame is not None and frame.f_code.co_filename in _OWN:
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("?", 0)


_OWN = {_where.__code__.co_filename, os.path.join(os.path.dirname(_where.__code__.co_filename), "gluon_emulator.py")}


def _named(site: tuple[str, int]) -> str:
    """A site as a path from kernels/ (the bundled kernels) or a file name, and its line."""
    path, marker = site[0], os.sep + "kernels" + os.sep
    if marker in path and os.sep + "tests" + os.sep not in path:
        return f"{path[path.rindex(marker) + 1:]}:{site[1]}"
    return f"{os.path.basename(path)}:{site[1]}"


def _event() -> int:
    _State.events.append(_where(sys._getframe(2)))
    return len(_State.events) - 1


def _fail(track: Track, ids: torch.Tensor, bad: torch.Tensor, what: str, then: str, at: torch.Tensor) -> None:
    if bool(bad.any()):
        first = int(at[ids[bad]][0])
        earlier = _named(_State.events[first]) if first >= 0 else "?"
        here = _named(_where(sys._getframe(1)))
        raise Race(f"{here} {what} {int(bad.sum())} elements of {track.name} that {earlier} {then}")


def shared_track(numel: int, shape: list[int], dtype: Any) -> Track | None:
    if not _State.active:
        return None
    track = Track(numel, f"a shared {list(shape)} {dtype} buffer")
    _State.shared.append(track)
    return track


def global_track(buf: torch.Tensor, dtype: Any, create: bool) -> Track | None:
    """The tracker of a global buffer the program wrote (made at its first write)."""
    if not _State.active:
        return None
    key = buf.data_ptr()
    track = _State.written.get(key)
    if track is None and create:
        track = _State.written[key] = Track(buf.numel(), f"a global {dtype} buffer of {buf.numel()} elements")
    return track


def barrier() -> None:
    _State.epoch += 1


def fence() -> None:
    """``fence.proxy.async``: every write of this epoch becomes visible to the async proxy."""
    if not _State.active:
        return
    for track in _State.shared:
        track.fenced |= track.w_epoch == _State.epoch


def read(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    if track is None or not _State.active or ids.numel() == 0:
        return
    e = _State.epoch
    _fail(track, ids, track.pend_w[ids] > 0, "reads", "is still copying into", track.w_at)
    w_lay = track.w_lay[ids]
    _fail(track, ids, (track.w_epoch[ids] == e) & (w_lay != lay), "reads", "wrote in another layout with no barrier "
          "between", track.w_at)
    ev = _event()
    same = track.r_epoch[ids] == e
    r_lay = track.r_lay[ids]
    track.r_lay[ids] = torch.where(same & (r_lay != lay), torch.full_like(r_lay, MIXED), torch.full_like(r_lay, lay))
    track.r_epoch[ids] = e
    track.r_at[ids] = ev


def write(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    if track is None or not _State.active or ids.numel() == 0:
        return
    e = _State.epoch
    _fail(track, ids, track.pend_r[ids] > 0, "writes", "gave an asynchronous wgmma not yet waited on", track.r_at)
    _fail(track, ids, track.pend_w[ids] > 0, "writes", "is still copying into", track.w_at)
    _fail(track, ids, (track.r_epoch[ids] == e) & (track.r_lay[ids] != lay), "writes",
          "read in another layout with no barrier between", track.r_at)
    _fail(track, ids, (track.w_epoch[ids] == e) & (track.w_lay[ids] != lay), "writes",
          "wrote in another layout with no barrier between", track.w_at)
    _record_write(track, ids, lay, _event())


def _record_write(track: Track, ids: torch.Tensor, lay: int, ev: int) -> None:
    track.w_epoch[ids] = _State.epoch
    track.w_lay[ids] = lay
    track.w_at[ids] = ev
    track.fenced[ids] = False
    track.r_epoch[ids] = _NONE


def tma_write(track: Track | None, ids: torch.Tensor) -> None:
    """A TMA load lands through the async proxy and is awaited on an mbarrier, which this does not
    follow: its elements count as written before the program's current epoch and fenced."""
    if track is None or not _State.active:
        return
    track.w_epoch[ids] = _NONE
    track.r_epoch[ids] = _NONE
    track.fenced[ids] = True


def mma_read(track: Track | None, ids: torch.Tensor, pending: bool) -> None:
    """A wgmma's shared operand: written before the last barrier and fenced; held until retired."""
    if track is None or not _State.active:
        return
    _fail(track, ids, track.pend_w[ids] > 0, "gives a wgmma", "is still copying into", track.w_at)
    _fail(track, ids, track.w_epoch[ids] == _State.epoch, "gives a wgmma", "wrote with no barrier between",
          track.w_at)
    _fail(track, ids, ~track.fenced[ids], "gives a wgmma", "wrote with no fence_async_shared before the barrier",
          track.w_at)
    if pending:
        track.pend_r[ids] += 1
        _State.mma_groups[-1].append((track, ids))
    else:
        _retire_read(track, ids, _event())


def mma_issue(pending: bool) -> None:
    if _State.active and pending:
        _State.mma_groups.append([])


def _retire_read(track: Track, ids: torch.Tensor, ev: int) -> None:
    e = _State.epoch
    same = track.r_epoch[ids] == e
    r_lay = track.r_lay[ids]
    track.r_lay[ids] = torch.where(same & (r_lay != ASYNC), torch.full_like(r_lay, MIXED), torch.full_like(r_lay, ASYNC))
    track.r_epoch[ids] = e
    track.r_at[ids] = ev


def mma_wait(outstanding: int) -> None:
    """``warpgroup_mma_wait``: every asynchronous wgmma but the newest ``outstanding`` is retired."""
    if not _State.active:
        return
    keep = max(int(outstanding), 0)
    done = _State.mma_groups[:len(_State.mma_groups) - keep] if keep else _State.mma_groups
    _State.mma_groups = _State.mma_groups[len(done):]
    ev = _event()
    for group in done:
        for track, ids in group:
            track.pend_r[ids] -= 1
            _retire_read(track, ids, ev)


def copy_write(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    """A ``copy_to_shared``: its elements are in flight until the wait that retires its group."""
    if track is None or not _State.active:
        return
    e = _State.epoch
    _fail(track, ids, track.pend_r[ids] > 0, "copies into", "gave an asynchronous wgmma not yet waited on",
          track.r_at)
    _fail(track, ids, (track.r_epoch[ids] == e) & (track.r_lay[ids] != lay), "copies into",
          "read in another layout with no barrier between", track.r_at)
    track.pend_w[ids] += 1
    track.w_at[ids] = _event()
    _State.copies_open.append((track, ids, lay))


def copy_commit() -> None:
    if _State.active:
        _State.copy_groups.append(_State.copies_open)
        _State.copies_open = []


def copy_wait(outstanding: int) -> None:
    if not _State.active:
        return
    keep = max(int(outstanding), 0)
    done = _State.copy_groups[:len(_State.copy_groups) - keep] if keep else _State.copy_groups
    _State.copy_groups = _State.copy_groups[len(done):]
    ev = _event()
    for group in done:
        for track, ids, lay in group:
            track.pend_w[ids] -= 1
            _record_write(track, ids, lay, ev)
