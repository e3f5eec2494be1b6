"""Triton's global scratch for the tensor-descriptor configs (TR 3), kept between launches.

A TR 3 launch writes its tensor descriptors into a global scratch buffer that Triton's launcher
asks the allocator for on every launch. A fresh ``torch.empty`` per launch, four per fwd+bwd,
made those launches the costliest part of a long-sequence call's host path. The buffer only has
to outlive the kernel that uses it, and launches on one stream run in order, so one buffer per
(device, stream, size) serves every launch there. The launcher gets its address as an int, which
it takes without asking the driver about the pointer.

While the stream is being captured into a CUDA graph, each launch gets a buffer of its own, as
before: a graph keeps its allocations in its own pool, and a buffer shared with eager launches
could be used by a replay on another stream at the same time.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

Tensor = torch.Tensor


def _current_device() -> int:
    return torch._C._cuda_getDevice()


def _capturing() -> bool:
    return torch.cuda.is_current_stream_capturing()


def _device_bytes(size: int, device: int) -> Tensor:
    return torch.empty(size, dtype=torch.int8, device=device)


class ScratchCache:
    """The allocator ``triton.set_allocator`` takes: ``(size, alignment, stream) -> buffer``.

    Keeps the ``limit`` most recently used buffers; an evicted one is freed through torch's caching
    allocator, which reuses it only after the work queued on its stream.
    """

    def __init__(self, limit: int = 16, device: Callable[[], int] = _current_device,
                 capturing: Callable[[], bool] = _capturing,
                 allocate: Callable[[int, int], Tensor] = _device_bytes) -> None:
        self.limit, self.device, self.capturing, self.allocate = limit, device, capturing, allocate
        self.buffers: OrderedDict[tuple, tuple[Tensor, int]] = OrderedDict()

    def __call__(self, size: int, alignment: int, stream) -> Tensor | int:
        device = self.device()
        if self.capturing():
            return self.allocate(size, device)
        key = (device, stream, size)
        hit = self.buffers.get(key)
        if hit is not None:
            self.buffers.move_to_end(key)
            return hit[1]
        buf = self.allocate(size, device)
        if buf.data_ptr() % alignment:  # torch's blocks are 512-byte aligned; say so if one is not
            raise RuntimeError(f"scratch buffer at {buf.data_ptr():#x} is not {alignment}-byte aligned")
        self.buffers[key] = (buf, buf.data_ptr())
        if len(self.buffers) > self.limit:
            self.buffers.popitem(last=False)
        return buf.data_ptr()


scratch = ScratchCache()
