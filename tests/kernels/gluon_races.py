"""Races between the threads of a Gluon program, found on the CPU by the Gluon emulator.

Why: the emulator runs a program's body over whole tiles, so an unordered hand-off between threads
leaves its numbers right there. On the GPU, Triton's barrier pass adds a CTA barrier wherever its
analysis of a program's shared-memory accesses finds a hazard with none between (it does not know
layouts, so it also adds some a same-layout round trip does not need); the rest is the program's
own: a wgmma's operands held until its wait, a copy landing at its wait, the proxy fence before
the tensor cores or a TMA store read what threads wrote, and every hand-off between the partitions
of a warp-specialized program, which only its mbarriers order. A kernel that hands tiles between
layouts by hand (the GLA prep and in-chunk launches) places its barriers itself, and every one it
places that orders nothing is a barrier the compiled loop passes for nothing. This checks, on every
emulated run, that the program's own barriers, fences, waits and mbarriers order every hand-off,
so that each one's job is known and none is spare.

The model. Every emulated value carries its distributed layout: which thread holds which element.
Accesses come from agents: the program's threads before ``warp_specialize``, then each partition.

- Within the program's threads, two accesses to one element of a shared buffer (or of a global one
  the program wrote) from different layouts are ordered only by a CTA barrier between them; equal
  layouts hand the element to the same thread, so a round trip in one layout needs none. Layouts
  equal in placement but built differently count as different: a false race, never a missed one.
  Within a partition, program order (and the compiler's barrier pass) orders its warps' accesses.
- Between agents, an access is ordered after another only through an mbarrier: an arrival
  publishes what its agent did before it, a completed wait takes it in (vector clocks), and a TMA
  load's bytes count as published on the mbarrier it completes.
- So these are races: a read of an element another agent wrote, or a write of one another agent
  read or wrote, with no such chain between (RAW, WAR, WAW), and within the program's threads the
  same with no barrier between two layouts; a wgmma or TMA store reading an element written by
  threads and not fenced (``fence_async_shared``) since, or (within the program's threads) with no
  barrier since; any write to an element that an asynchronous wgmma or TMA store still reads
  (before its ``warpgroup_mma_wait`` or ``tma.store_wait``); any access to an element a
  ``copy_to_shared`` writes before the ``copy_wait`` that retires its group; a read of shared
  memory nothing wrote (a consumer that did not wait may read before the producer writes).

Elements are tracked one by one, so the slots of a ring are independent.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
from typing import Any

import torch


class Race(AssertionError):
    """Two accesses to one element by different threads with nothing ordering them."""


ASYNC = 0       # reads by the tensor cores or the TMA unit (async proxy): no thread's layout
MIXED = -1      # elements read in several layouts since the last barrier
_NONE = -2      # "no access yet"
_count = itertools.count(1)
_ids: dict[Any, int] = {}
_layouts: dict[int, Any] = {}
_LOCK = threading.RLock()   # partitions run as threads: one access is tracked at a time
_TLS = threading.local()    # the running thread's agent


def ident(layout: Any) -> int:
    """A positive id per distinct layout (equal layouts share it), a fresh negative one (below every
    special value) for an unknown layout, which then equals no other."""
    if layout is None:
        return -2 - next(_count)
    found = _ids.get(layout)
    if found is None:
        with _LOCK:
            found = _ids.setdefault(layout, next(_count))
            _layouts[found] = layout
    return found


def layout_of(lay: int | None) -> Any:
    """The layout an id stands for (None: unknown)."""
    return _layouts.get(lay) if lay is not None else None


class _Reads:
    """One agent's reads of a buffer's elements since their last write: barrier epoch, layout,
    event and the agent's clock at the read."""

    def __init__(self, numel: int):
        self.epoch = torch.full((numel,), _NONE, dtype=torch.int64)
        self.lay = torch.full((numel,), _NONE, dtype=torch.int64)
        self.at = torch.full((numel,), -1, dtype=torch.int64)
        self.tick = torch.full((numel,), -1, dtype=torch.int64)


class Track:
    """What happened to each element of one buffer since the program began: its last write (agent,
    barrier epoch, layout, event, the agent's clock), each agent's reads since, whether the write
    is fenced, and the asynchronous accesses still in flight."""

    def __init__(self, numel: int, name: str, shared: bool):
        def full(v: int) -> torch.Tensor:
            return torch.full((numel,), v, dtype=torch.int64)
        self.name, self.numel, self.shared = name, numel, shared
        self.w_agent, self.w_epoch, self.w_lay, self.w_at, self.w_tick = full(-1), full(_NONE), full(_NONE), full(-1), full(-1)
        self.fenced = torch.ones(numel, dtype=torch.bool)
        self.pend_r, self.pend_w, self.pend_at = full(0), full(0), full(-1)
        self.reads: dict[int, _Reads] = {}

    def reads_of(self, agent: int) -> _Reads:
        r = self.reads.get(agent)
        if r is None:
            r = self.reads[agent] = _Reads(self.numel)
        return r


class _State:
    active = False
    epoch = 0                               # the program threads' CTA barriers so far
    events: list[tuple[str, int]] = []      # (file, line) of each access, formatted on failure
    shared: list[Track] = []
    written: dict[int, Track] = {}          # global buffers the program wrote, by address
    clocks: dict[int, dict[int, int]] = {}  # each agent's vector clock
    mma_groups: dict[int, list] = {}        # per agent: asynchronous wgmmas' operand reads in flight
    store_groups: dict[int, list] = {}      # per agent: TMA stores' reads in flight
    copies_open: dict[int, list] = {}
    copy_groups: dict[int, list] = {}


def _agent() -> int:
    return getattr(_TLS, "agent", 0)


def begin(active: bool) -> None:
    """A program starts: nothing has happened to any buffer yet; its threads are agent 0."""
    with _LOCK:
        _State.active = active
        _State.epoch = 0
        _State.events, _State.shared, _State.written = [], [], {}
        _State.clocks = {0: {0: 0}}
        _State.mma_groups, _State.store_groups, _State.copies_open, _State.copy_groups = {}, {}, {}, {}
        _TLS.agent = 0


def stop() -> None:
    """The rest of the program is not checked."""
    _State.active = False


def fork(n: int) -> list[int]:
    """``warp_specialize``: n partitions, each an agent that starts from everything the program's
    threads did before it."""
    with _LOCK:
        base = dict(_State.clocks[0])
        agents = list(range(1, n + 1))
        for a in agents:
            _State.clocks[a] = {**base, a: 0}
        _State.clocks[0][0] += 1
        return agents


def enter(agent: int) -> None:
    """The running thread is partition ``agent`` from here on."""
    _TLS.agent = agent


def join(agents: list[int]) -> None:
    """The partitions are done: the program's threads go on after all they did."""
    with _LOCK:
        mine = _State.clocks[0]
        for a in agents:
            for k, v in _State.clocks.get(a, {}).items():
                mine[k] = max(mine.get(k, -1), v)
        _TLS.agent = 0


def release(bar: Any) -> None:
    """An mbarrier arrival: the arriving agent's accesses so far are published on ``bar``."""
    if not _State.active:
        return
    with _LOCK:
        me = _agent()
        clock = _State.clocks[me]
        published = getattr(bar, "clock", None) or {}
        for k, v in clock.items():
            published[k] = max(published.get(k, -1), v)
        bar.clock = published
        clock[me] += 1


def landed(bar: Any) -> None:
    """A TMA load completed its bytes on ``bar``: its writes (the issuing agent's, at its current
    clock) are published there, not the rest of what that agent did since its last arrival."""
    if not _State.active:
        return
    with _LOCK:
        me = _agent()
        published = getattr(bar, "clock", None) or {}
        published[me] = max(published.get(me, -1), _State.clocks[me][me])
        bar.clock = published
        _State.clocks[me][me] += 1


def acquire(bar: Any) -> None:
    """A completed mbarrier wait: the waiting agent takes in what was published on ``bar``."""
    if not _State.active:
        return
    with _LOCK:
        clock = _State.clocks[_agent()]
        for k, v in (getattr(bar, "clock", None) or {}).items():
            clock[k] = max(clock.get(k, -1), v)


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


def _known(track: Track, ids: torch.Tensor, me: int) -> torch.Tensor | None:
    """Per element: whether its last write is ordered before now for agent ``me`` by mbarriers (no
    write, or ``me``'s own, count as ordered); None where the program has no partitions (all are)."""
    if len(_State.clocks) == 1:
        return None
    agents = track.w_agent[ids]
    clock = _State.clocks[me]
    seen = torch.tensor([clock.get(a, -1) for a in range(max(_State.clocks) + 1)], dtype=torch.int64)
    return (agents < 0) | (agents == me) | (track.w_tick[ids] <= seen[agents.clamp(min=0)])


def _unwritten(track: Track, ids: torch.Tensor, what: str) -> None:
    """A read of shared memory nothing wrote (a global buffer's unwritten elements are its input)."""
    if track.shared:
        bad = track.w_agent[ids] < 0
        if bool(bad.any()):
            raise Race(f"{_named(_where(sys._getframe(2)))} {what} {int(bad.sum())} elements of {track.name} "
                       f"that nothing wrote")


def _unordered_write(track: Track, ids: torch.Tensor, me: int, what: str) -> None:
    known = _known(track, ids, me)
    if known is not None:
        _fail(track, ids, ~known, what, "wrote in another partition with no mbarrier between", track.w_at)


def _unordered_reads(track: Track, ids: torch.Tensor, me: int, lay: int) -> list[tuple[torch.Tensor, _Reads, str]]:
    """The reads a write by ``me`` in layout ``lay`` would race with: another agent's not published
    to ``me``, or (agent 0) the program threads' in another layout since the last barrier."""
    out = []
    for agent, r in track.reads.items():
        if agent == me:
            if me == 0:
                bad = (r.epoch[ids] == _State.epoch) & (r.lay[ids] != lay)
                out.append((bad, r, "read in another layout with no barrier between"))
        else:
            bad = r.tick[ids] > _State.clocks[me].get(agent, -1)
            out.append((bad, r, "read in another partition with no mbarrier between"))
    return out


def shared_track(numel: int, shape: list[int], dtype: Any) -> Track | None:
    if not _State.active:
        return None
    track = Track(numel, f"a shared {list(shape)} {dtype} buffer", shared=True)
    with _LOCK:
        _State.shared.append(track)
    return track


def global_track(buf: torch.Tensor, dtype: Any, create: bool) -> Track | None:
    """The tracker of a global buffer the program wrote (made at its first write)."""
    if not _State.active:
        return None
    key = buf.data_ptr()
    track = _State.written.get(key)
    if track is None and create:
        with _LOCK:
            track = _State.written.setdefault(
                key, Track(buf.numel(), f"a global {dtype} buffer of {buf.numel()} elements", shared=False))
    return track


def barrier() -> None:
    """A CTA barrier of the program's threads (inside a partition: program order already)."""
    if _agent() == 0:
        _State.epoch += 1


def fence() -> None:
    """``fence.proxy.async``: every write of the fencing agent so far becomes visible to the async
    proxy."""
    if not _State.active:
        return
    with _LOCK:
        me = _agent()
        for track in _State.shared:
            track.fenced |= track.w_agent == me


def read(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    if track is None or not _State.active or ids.numel() == 0:
        return
    with _LOCK:
        me, e = _agent(), _State.epoch
        _fail(track, ids, track.pend_w[ids] > 0, "reads", "is still copying into", track.w_at)
        _unwritten(track, ids, "reads")
        _unordered_write(track, ids, me, "reads")
        if me == 0:
            mine = track.w_agent[ids] == 0
            _fail(track, ids, mine & (track.w_epoch[ids] == e) & (track.w_lay[ids] != lay), "reads",
                  "wrote in another layout with no barrier between", track.w_at)
        _record_read(track, ids, lay, _event())


def write(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    if track is None or not _State.active or ids.numel() == 0:
        return
    with _LOCK:
        me, e = _agent(), _State.epoch
        _check_write(track, ids, me, lay, "writes")
        if me == 0:
            mine = track.w_agent[ids] == 0
            _fail(track, ids, mine & (track.w_epoch[ids] == e) & (track.w_lay[ids] != lay), "writes",
                  "wrote in another layout with no barrier between", track.w_at)
        _record_write(track, ids, lay, _event(), me)


def _check_write(track: Track, ids: torch.Tensor, me: int, lay: int, what: str) -> None:
    _fail(track, ids, track.pend_r[ids] > 0, what, "gave an asynchronous read not yet waited on", track.pend_at)
    _fail(track, ids, track.pend_w[ids] > 0, what, "is still copying into", track.w_at)
    _unordered_write(track, ids, me, what)
    for bad, r, then in _unordered_reads(track, ids, me, lay):
        _fail(track, ids, bad, what, then, r.at)


def _record_write(track: Track, ids: torch.Tensor, lay: int, ev: int, me: int) -> None:
    track.w_agent[ids] = me
    track.w_epoch[ids] = _State.epoch
    track.w_lay[ids] = lay
    track.w_at[ids] = ev
    track.w_tick[ids] = _State.clocks[me][me]
    track.fenced[ids] = False
    for r in track.reads.values():
        r.epoch[ids] = _NONE
        r.tick[ids] = -1


def tma_write(track: Track | None, ids: torch.Tensor) -> None:
    """A TMA load: written through the async proxy (no fence needed before async reads), published
    on the mbarrier it completes (``landed``)."""
    if track is None or not _State.active:
        return
    with _LOCK:
        me = _agent()
        _check_write(track, ids, me, ASYNC, "loads by TMA into")
        _record_write(track, ids, ASYNC, _event(), me)
        track.w_epoch[ids] = _NONE
        track.fenced[ids] = True


def _async_read(track: Track, ids: torch.Tensor, what: str) -> None:
    """A read by the tensor cores or the TMA unit: the elements' writes fenced and ordered before it
    (by a CTA barrier within the program's threads, by mbarriers across partitions)."""
    me = _agent()
    _fail(track, ids, track.pend_w[ids] > 0, what, "is still copying into", track.w_at)
    _unwritten(track, ids, what)
    _unordered_write(track, ids, me, what)
    if me == 0:
        _fail(track, ids, (track.w_agent[ids] == 0) & (track.w_epoch[ids] == _State.epoch), what,
              "wrote with no barrier between", track.w_at)
    _fail(track, ids, ~track.fenced[ids], what, "wrote with no fence_async_shared before it", track.w_at)


def mma_issue(pending: bool) -> None:
    if _State.active and pending:
        with _LOCK:
            _State.mma_groups.setdefault(_agent(), []).append([])


def mma_read(track: Track | None, ids: torch.Tensor, pending: bool) -> None:
    """A wgmma's shared operand: held until the wait that retires it when asynchronous."""
    if track is None or not _State.active:
        return
    with _LOCK:
        _async_read(track, ids, "gives a wgmma")
        if pending:
            track.pend_r[ids] += 1
            track.pend_at[ids] = _event()
            _State.mma_groups[_agent()][-1].append((track, ids))
        else:
            _record_read(track, ids, ASYNC, _event())


def _record_read(track: Track, ids: torch.Tensor, lay: int, ev: int) -> None:
    """The running agent read ``ids`` in layout ``lay`` (ASYNC: the async proxy) at event ``ev``."""
    me = _agent()
    r = track.reads_of(me)
    same = r.epoch[ids] == _State.epoch
    r_lay = r.lay[ids]
    r.lay[ids] = torch.where(same & (r_lay != lay), torch.full_like(r_lay, MIXED), torch.full_like(r_lay, lay))
    r.epoch[ids] = _State.epoch
    r.at[ids] = ev
    r.tick[ids] = _State.clocks[me][me]


def _retired(groups: dict[int, list], outstanding: int) -> list:
    """The running agent's groups of ``groups`` that a wait leaving ``outstanding`` of them in
    flight retires (taken out of ``groups``), oldest first."""
    me = _agent()
    mine = groups.get(me, [])
    keep = max(int(outstanding), 0)
    done = mine[:len(mine) - keep] if keep else mine
    groups[me] = mine[len(done):]
    return done


def _retire(groups: dict[int, list], outstanding: int) -> None:
    ev = _event()
    for group in _retired(groups, outstanding):
        for track, ids in group:
            track.pend_r[ids] -= 1
            _record_read(track, ids, ASYNC, ev)


def mma_wait(outstanding: int) -> None:
    """``warpgroup_mma_wait``: every asynchronous wgmma of the agent but the newest ``outstanding``
    is retired."""
    if _State.active:
        with _LOCK:
            _retire(_State.mma_groups, outstanding)


def tma_store(track: Track | None, ids: torch.Tensor) -> None:
    """A TMA store reads its shared tile until a ``tma.store_wait`` retires it."""
    if track is None or not _State.active:
        return
    with _LOCK:
        _async_read(track, ids, "gives a TMA store")
        track.pend_r[ids] += 1
        track.pend_at[ids] = _event()
        _State.store_groups.setdefault(_agent(), []).append([(track, ids)])


def store_wait(outstanding: int) -> None:
    if _State.active:
        with _LOCK:
            _retire(_State.store_groups, outstanding)


def copy_write(track: Track | None, ids: torch.Tensor, lay: int) -> None:
    """A ``copy_to_shared``: its elements are in flight until the wait that retires its group."""
    if track is None or not _State.active:
        return
    with _LOCK:
        me = _agent()
        _fail(track, ids, track.pend_r[ids] > 0, "copies into", "gave an asynchronous read not yet waited on",
              track.pend_at)
        for bad, r, then in _unordered_reads(track, ids, me, lay):
            _fail(track, ids, bad, "copies into", then, r.at)
        track.pend_w[ids] += 1
        track.w_at[ids] = _event()
        _State.copies_open.setdefault(me, []).append((track, ids, lay))


def copy_commit() -> None:
    if _State.active:
        with _LOCK:
            me = _agent()
            _State.copy_groups.setdefault(me, []).append(_State.copies_open.pop(me, []))


def copy_wait(outstanding: int) -> None:
    if not _State.active:
        return
    with _LOCK:
        ev = _event()
        for group in _retired(_State.copy_groups, outstanding):
            for track, ids, lay in group:
                track.pend_w[ids] -= 1
                _record_write(track, ids, lay, ev, _agent())
