"""Where a rank's contiguous shard sits in the sequence, and which packed sequences cross it.

Pure Python (no framework): the torch and JAX sequence-parallel kernels both read it. The scan
order is the order in which the state travels: rank order forward, reversed with ``reverse``.
A *piece* is the part of one packed sequence that lies in the shard; the shard's *entry* piece
is the one the state enters first (it may continue a sequence begun on an earlier rank) and its
*exit* piece the one it leaves by (it may go on into the next rank).
"""
from __future__ import annotations

from dataclasses import dataclass


def shard_bounds(seqlen: int, world: int) -> list[int]:
    """Start of every shard and the end: shard r is ``[b[r], b[r+1])``, lengths differ by at most 1."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if seqlen < world:
        raise ValueError(f"a sequence of {seqlen} tokens cannot give each of {world} ranks a token")
    return [r * seqlen // world for r in range(world + 1)]


@dataclass(frozen=True)
class ShardPlan:
    """One rank's shard ``[start, stop)`` of a length-``seqlen`` sequence split over ``world`` ranks.

    Dense (no packing): one piece per batch row, ``seq_ids`` None. Packed: ``local_cu`` are the
    pieces' edges relative to ``start`` and ``seq_ids`` their global sequence numbers.
    ``starts[p]`` / ``ends[p]``: piece p holds its sequence's first / last token in scan order.
    """

    rank: int
    world: int
    start: int
    stop: int
    reverse: bool
    starts: tuple[bool, ...]
    ends: tuple[bool, ...]
    local_cu: tuple[int, ...] | None = None
    seq_ids: tuple[int, ...] | None = None

    @property
    def length(self) -> int:
        return self.stop - self.start

    @property
    def pieces(self) -> int:
        return len(self.starts)

    @property
    def position(self) -> int:
        """This rank's place in the scan order."""
        return self.world - 1 - self.rank if self.reverse else self.rank

    @property
    def order(self) -> list[int]:
        """Ranks in scan order."""
        ranks = list(range(self.world))
        return ranks[::-1] if self.reverse else ranks

    @property
    def entry(self) -> int:
        return self.pieces - 1 if self.reverse else 0

    @property
    def exit(self) -> int:
        return 0 if self.reverse else self.pieces - 1

    @property
    def carried(self) -> bool:
        """The entry piece continues a sequence from the previous rank in scan order."""
        return not self.starts[self.entry]

    @property
    def passes_through(self) -> bool:
        """One sequence enters and leaves the shard: the carried state decays by λ^length across it."""
        return self.carried and self.pieces == 1

    def piece_span(self, p: int) -> tuple[int, int]:
        """Local token range of piece p."""
        if self.local_cu is None:
            return 0, self.length
        return self.local_cu[p], self.local_cu[p + 1]


def plan_shard(seqlen: int, world: int, rank: int, cu_seqlens=None, reverse: bool = False) -> ShardPlan:
    """The plan of ``rank``'s shard; ``cu_seqlens`` are the global packed edges (None: dense)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world size {world}")
    bounds = shard_bounds(seqlen, world)
    start, stop = bounds[rank], bounds[rank + 1]
    first = rank == (world - 1 if reverse else 0)
    last = rank == (0 if reverse else world - 1)
    if cu_seqlens is None:
        return ShardPlan(rank, world, start, stop, reverse, (first,), (last,))
    cu = [int(x) for x in cu_seqlens]
    if cu[0] != 0 or cu[-1] != seqlen or any(a >= b for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must rise strictly from 0 to T={seqlen} (no empty sequence), got {cu}")
    edges, ids, starts, ends = [0], [], [], []
    for i, (bos, eos) in enumerate(zip(cu, cu[1:])):
        if eos <= start or bos >= stop:
            continue
        edges.append(min(eos, stop) - start)
        ids.append(i)
        head, tail = bos >= start, eos <= stop  # the sequence's first / last token is in the shard
        starts.append(tail if reverse else head)
        ends.append(head if reverse else tail)
    return ShardPlan(rank, world, start, stop, reverse, tuple(starts), tuple(ends), tuple(edges), tuple(ids))
