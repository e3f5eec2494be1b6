"""The inter-rank step of sequence-parallel Lightning Attention over torch.distributed.

Both strategies compute the same linear scan of fp32 states in scan order,
``carry(p+1) = a_p · carry(p) + b_p`` (``a_p`` a per-head factor, 0 or λ^{T_p}; ``b_p`` a
``[rows, H, D, E]`` state), and its reverse for the gradients:

- ``AllGatherScan`` (LASP-2): one all-gather of every rank's ``(b, a)``, then each rank combines
  the prefix it needs locally. One collective per direction; its volume is P·rows·H·D·E
  floats whatever the sequence length.
- ``RingScan`` (LASP-1): the running state hops rank to rank by send/recv, P−1 hops in a row.

``CommStats`` times every collective (CUDA events on a GPU, the host clock otherwise) and counts
the bytes each rank sends, when enabled; the harness reads it per step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .shards import ShardPlan

Tensor = torch.Tensor


@dataclass
class CommStats:
    """Per-collective timings and bytes sent by this rank while ``enabled``."""

    enabled: bool = False
    calls: int = 0
    bytes_sent: int = 0
    host_ms: float = 0.0
    _events: list = field(default_factory=list)

    def reset(self) -> None:
        self.calls, self.bytes_sent, self.host_ms, self._events = 0, 0, 0.0, []

    def run(self, fn, nbytes: int, device: torch.device):
        """Run the collective ``fn``; when enabled, time it and count ``nbytes`` as sent."""
        if not self.enabled:
            return fn()
        self.calls += 1
        self.bytes_sent += nbytes
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            self._events.append((start, end))
            return out
        t0 = time.perf_counter()
        out = fn()
        self.host_ms += (time.perf_counter() - t0) * 1e3
        return out

    def total_ms(self) -> float:
        """Milliseconds spent in collectives since the last reset (syncs the GPU once)."""
        if self._events:
            torch.cuda.synchronize()
        return self.host_ms + sum(s.elapsed_time(e) for s, e in self._events)


STATS = CommStats()


def _nbytes(x: Tensor) -> int:
    return x.numel() * x.element_size()


class AllGatherScan:
    """LASP-2: every rank's (b, a) in one all-gather; the prefix combined locally."""

    name = "allgather"

    def __init__(self, group=None) -> None:
        self.group = group

    def _gather(self, packed: Tensor, world: int) -> list[Tensor]:
        if world == 1:
            return [packed]
        parts = [torch.empty_like(packed) for _ in range(world)]
        STATS.run(lambda: dist.all_gather(parts, packed, group=self.group), _nbytes(packed), packed.device)
        return parts

    def scan(self, a: Tensor, b: Tensor, plan: ShardPlan, need_total: bool = True) -> tuple[Tensor, Tensor | None]:
        """(carry into this rank, carry out of the last rank in scan order, or None unless needed)."""
        packed = torch.cat([b.reshape(-1), a.reshape(-1)])
        parts = self._gather(packed, plan.world)
        n = b.numel()
        carry, into = torch.zeros_like(b), None
        for pos, r in enumerate(plan.order):
            if pos == plan.position:
                into = carry
            a_r = parts[r][n:].view(1, -1, 1, 1)
            carry = a_r * carry + parts[r][:n].view_as(b)
        return into, carry if need_total else None

    def reverse_scan(self, a: Tensor, d: Tensor, plan: ShardPlan) -> Tensor:
        """Gradient reaching this rank's carry-out: ``G(p) = d_p + a_p · G(p+1)`` from the end."""
        packed = torch.cat([d.reshape(-1), a.reshape(-1)])
        parts = self._gather(packed, plan.world)
        n = d.numel()
        grad = torch.zeros_like(d)
        for pos, r in reversed(list(enumerate(plan.order))):
            if pos == plan.position:
                return grad
            grad = parts[r][:n].view_as(d) + parts[r][n:].view(1, -1, 1, 1) * grad
        raise AssertionError("this rank is not in the scan order")

    def all_reduce(self, x: Tensor) -> Tensor:
        if not dist.is_initialized() or dist.get_world_size(self.group) == 1:
            return x
        STATS.run(lambda: dist.all_reduce(x, group=self.group), _nbytes(x), x.device)
        return x


class RingScan(AllGatherScan):
    """LASP-1: the running state passed along the scan order by point-to-point send/recv."""

    name = "ring"

    def _peer(self, plan: ShardPlan, step: int) -> int:
        rank = plan.order[plan.position + step]
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def _recv(self, like: Tensor, plan: ShardPlan, step: int) -> Tensor:
        buf = torch.empty_like(like)
        STATS.run(lambda: dist.recv(buf, self._peer(plan, step), group=self.group), 0, like.device)
        return buf

    def _send(self, x: Tensor, plan: ShardPlan, step: int) -> None:
        STATS.run(lambda: dist.send(x.contiguous(), self._peer(plan, step), group=self.group), _nbytes(x), x.device)

    def scan(self, a: Tensor, b: Tensor, plan: ShardPlan, need_total: bool = True) -> tuple[Tensor, Tensor | None]:
        first, last = plan.position == 0, plan.position == plan.world - 1
        into = torch.zeros_like(b) if first else self._recv(b, plan, -1)
        out = a.view(1, -1, 1, 1) * into + b
        if not last:
            self._send(out, plan, +1)
        if not need_total or plan.world == 1:
            return into, (out if need_total else None)
        total = out.clone()  # the last rank's carry-out, broadcast to every rank
        root = plan.order[-1] if self.group is None else dist.get_global_rank(self.group, plan.order[-1])
        STATS.run(lambda: dist.broadcast(total, root, group=self.group), _nbytes(total) if last else 0, b.device)
        return into, total

    def reverse_scan(self, a: Tensor, d: Tensor, plan: ShardPlan) -> Tensor:
        first, last = plan.position == 0, plan.position == plan.world - 1
        grad = torch.zeros_like(d) if last else self._recv(d, plan, +1)
        if not first:
            self._send(d + a.view(1, -1, 1, 1) * grad, plan, -1)
        return grad


STRATEGIES = {"allgather": AllGatherScan, "ring": RingScan}
