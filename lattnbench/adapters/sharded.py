"""Sequence-parallel torch problems: one rank leads, the others follow.

Every rank holds its contiguous shard of the inputs. Rank 0 runs the ordinary measurement code
(timers, memory, check-grad); each call it makes on a sharded problem is first announced to
the other ranks over a gloo control group, and they make the same call on their shard. So the
ranks always enter the same collectives in the same order, whatever the timers decide
(warm-up length, repetition counts), and no measurement code knows about ranks.

Ranks find each other through the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT); NCCL on a GPU, gloo on a CPU. A collective that waits longer than
LATTNBENCH_RANK_TIMEOUT_S (default 300) ends the process, so a hung rank cannot hang a run, and
so does any failure inside a call made on every rank (the others may be waiting in a collective
for this one): the runner then records the point with the rank that failed first.
"""
from __future__ import annotations

import datetime as dt
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from lattnbench.adapters.torch_problem import DTYPES, TorchProblem, draw
from lattnbench.errors import PEER_LOST_EXIT, Unsupported
from lattnbench.operators.inputs import numpy_inputs
from lattnbench.registry.entry import KernelEntry
from lattnbench.spec import Case

TIMEOUT_ENV = "LATTNBENCH_RANK_TIMEOUT_S"
#: tensors laid out [B, T, ...]: split along T; the others (h0, dS) are the same on every rank
SHARDED = ("q", "k", "v", "do", "g")
_CONTROL: dict = {}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def join(device: str) -> None:
    """Join the process group of the ranks (from the torchrun variables) and make the control group."""
    if dist.is_initialized():
        return
    timeout = dt.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "300")))
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=timeout)
    _CONTROL["group"] = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _broadcast(message=None):
    """Rank 0's message to every rank (a collective: every rank calls it once per message)."""
    box = [message]
    try:
        dist.broadcast_object_list(box, src=0, group=_CONTROL.get("group"))
    except Exception as exc:  # noqa: BLE001 - a rank that stopped answering ends this process
        _fatal(f"the ranks stopped answering ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    return box[0]


def _gather(value) -> list | None:
    """Every rank's ``value`` at rank 0 (None elsewhere)."""
    out = [None] * world_size() if rank() == 0 else None
    try:
        dist.gather_object(value, out, dst=0, group=_CONTROL.get("group"))
    except Exception as exc:  # noqa: BLE001
        _fatal(f"the ranks stopped answering ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    return out


def _fatal(why: str) -> None:
    print(f"rank {rank()}: {why}", file=sys.stderr, flush=True)
    os._exit(PEER_LOST_EXIT)


def stop_followers() -> None:
    if dist.is_initialized() and rank() == 0 and world_size() > 1:
        _broadcast(("stop",))


def follow(registry, device: str) -> None:
    """A follower's life: build the problems rank 0 announces, make the calls it makes, until told to stop."""
    problem = None
    while True:
        message = _broadcast()
        if message[0] == "stop":
            return
        if message[0] == "new":
            _, kernel, case, seed, with_arrays = message
            problem = None
            if device == "cuda":
                torch.cuda.empty_cache()
            entry = registry[kernel]
            try:  # failing here too, rank 0 records the point and makes no call on it
                arrays = numpy_inputs(case, entry.family, seed) if with_arrays else None
                problem = ShardedTorchProblem(entry, case, device, seed, arrays, leader=False)
            except Exception as exc:  # noqa: BLE001
                print(f"rank {rank()}: building {kernel} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        _, method, args = message
        if problem is None:
            _fatal(f"rank 0 made a call ({method}) on a problem this rank could not build")
        try:
            getattr(problem, method)(*args)
        except Unsupported:  # rank 0 records it; nothing waits on this rank
            continue


def _announced(method):
    """Make ``method`` on every rank: rank 0 announces it (once, however deep the call nests)."""
    import functools

    @functools.wraps(method)
    def call(self, *args):
        self._announce(method.__name__, *args)
        outer, self._inside = self._inside, True
        try:
            return method(self, *args)
        except Unsupported:  # raised alike on every rank before any collective
            raise
        except Exception as exc:  # noqa: BLE001 - the other ranks may be inside a collective now
            if world_size() > 1:
                _fatal(f"{method.__name__} failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
            raise
        finally:
            self._inside = outer
    return call


class ShardedTorchProblem(TorchProblem):
    """This rank's shard of a case; on rank 0 every call is first announced to the followers."""

    graph_timer = False  # a CUDA-graph replay would skip the followers' part of every collective

    def __init__(self, entry: KernelEntry, case: Case, device: str, seed: int = 0,
                 arrays: dict[str, np.ndarray] | None = None, tensors=None, leader: bool = True) -> None:
        if case.world_size != world_size():
            raise Unsupported(f"world size {case.world_size} asked for, but {world_size()} ranks run")
        from lattnbench.kernels.lightning.parallel import shard_bounds

        self.leader = leader and world_size() > 1
        if self.leader:
            _broadcast(("new", entry.name, case, seed, arrays is not None))
        self.lo, self.hi = shard_bounds(case.seqlen, case.world_size)[rank():rank() + 2]
        if arrays is not None:
            arrays = {n: (x[:, self.lo:self.hi] if n in SHARDED else x) for n, x in arrays.items()}
        super().__init__(entry, case, device, seed, arrays)
        self._bwd = None
        self._inside = False
        self.comm: dict = {}

    def _build(self, arrays, seed) -> dict[str, torch.Tensor]:
        if arrays is not None:
            return super()._build(arrays, seed)
        gen = torch.Generator(device=self.device).manual_seed(seed * 1009 + rank())  # each shard its own draw
        out = {}
        for name, shape in self.fam.shapes(self.case).items():
            if name in SHARDED:
                shape = (shape[0], self.hi - self.lo, *shape[2:])
            x = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32)
            out[name] = draw(x, self.fam.draw(name), self.case).to(DTYPES[self.stored_dtype(name)])
        return out

    def row(self, b: int):
        raise Unsupported("the batch-row check runs at world size 1")

    def _announce(self, method: str, *args) -> None:
        """Tell the followers to make this call, unless it is made from inside another announced
        call (``results`` calls ``fwdbwd``): the followers' own outer call makes the inner one."""
        if self.leader and not self._inside:
            _broadcast(("call", method, args))

    # -- the calls, made on every rank ---------------------------------------------------------
    @_announced
    def fwd(self):
        return super().fwd()

    @_announced
    def fwdbwd(self):
        return super().fwdbwd()

    @_announced
    def bwd_callable(self):
        self._bwd = super().bwd_callable()
        return self.bwd_run

    @_announced
    def bwd_run(self):
        return self._bwd()

    @_announced
    def results(self) -> dict:
        """Outputs and gradients of the whole sequence at rank 0 (shards gathered along T)."""
        named = super().results()
        host = {n: (None if x is None else x.detach().cpu()) for n, x in named.items()}
        shards = _gather({n: x for n, x in host.items() if n in ("o", "dq", "dk", "dv")}) if world_size() > 1 \
            else [host]
        if shards is None:
            return named
        for n in ("o", "dq", "dk", "dv"):
            if host.get(n) is not None:
                host[n] = torch.cat([s[n] for s in shards], dim=1)
        return host

    @_announced
    def peak_mb(self, mode: str) -> tuple[float, str]:
        """The largest peak of any rank (every rank's is in the row's ``peak_mb_ranks``)."""
        peak, method = super().peak_mb(mode)
        peaks = _gather(peak) if world_size() > 1 else [peak]
        if peaks is None:
            return peak, method
        self.comm["peak_mb_ranks"] = [round(p, 3) for p in peaks]
        return max(peaks), f"{method}, largest of {len(peaks)} ranks"

    @_announced
    def measure_comm(self, mode: str) -> None:
        """One call of ``mode`` with the collectives timed: time in them and bytes sent, per rank."""
        from lattnbench.kernels.lightning.parallel.comm import STATS

        calls = {"fwd": super().fwd, "fwdbwd": super().fwdbwd}
        call = calls.get(mode) or self._bwd or TorchProblem.bwd_callable(self)
        self.sync()
        STATS.reset()
        STATS.enabled = True
        try:
            call()
            self.sync()
        finally:
            STATS.enabled = False
        mine = (STATS.total_ms(), STATS.bytes_sent, STATS.calls)
        every = _gather(mine) if world_size() > 1 else [mine]
        if every is not None:
            self.comm[mode] = every

    def row_fields(self, mode: str, metric: str) -> dict:
        """Time in collectives and bytes sent per step (speed), per-rank peaks (memory)."""
        fields: dict = {}
        if metric == "peak_mb" and "peak_mb_ranks" in self.comm:
            fields["peak_mb_ranks"] = self.comm["peak_mb_ranks"]
        if metric == "time_ms":
            self.measure_comm(mode)
            every = self.comm.get(mode)
            if every:
                fields.update(comm_ms=max(ms for ms, _, _ in every), comm_bytes=max(b for _, b, _ in every),
                              comm_calls=every[0][2], comm_ms_ranks=[round(ms, 4) for ms, _, _ in every])
        return fields
