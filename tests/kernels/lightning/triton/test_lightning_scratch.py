"""The kept global scratch of the tensor-descriptor launches: one buffer per (device, stream, size),
a fresh one per launch while a CUDA graph is captured, the oldest dropped past the limit."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.lightning.triton.scratch import ScratchCache


class Fake:
    """Stands in for the CUDA device: which device is current, whether a capture runs, allocations."""

    def __init__(self):
        self.device, self.capturing, self.made = 0, False, []

    def allocate(self, size, device):
        buf = torch.empty(size + 512, dtype=torch.int8)
        off = -buf.data_ptr() % 512  # as torch's CUDA blocks: 512-byte aligned
        view = buf[off:off + size]
        self.made.append((size, device))
        return view

    def cache(self, limit=16):
        return ScratchCache(limit, device=lambda: self.device, capturing=lambda: self.capturing,
                            allocate=self.allocate)


def test_a_stream_reuses_its_buffer_and_gets_it_as_an_address():
    fake = Fake()
    alloc = fake.cache()
    first = alloc(1024, 128, 7)
    assert isinstance(first, int) and first % 128 == 0
    assert alloc(1024, 128, 7) == first and len(fake.made) == 1


@pytest.mark.parametrize("change", ["stream", "size", "device"])
def test_another_stream_size_or_device_gets_a_buffer_of_its_own(change):
    fake = Fake()
    alloc = fake.cache()
    first = alloc(1024, 128, 7)
    if change == "device":
        fake.device = 1  # stream handles repeat across devices (the default stream is 0 on each)
    second = alloc(2048 if change == "size" else 1024, 128, 8 if change == "stream" else 7)
    assert second != first and len(fake.made) == 2
    assert fake.made[-1] == (2048 if change == "size" else 1024, 1 if change == "device" else 0)


def test_a_capture_gets_a_fresh_buffer_per_launch_and_keeps_none():
    fake = Fake()
    alloc = fake.cache()
    kept = alloc(1024, 128, 7)
    fake.capturing = True
    during = [alloc(1024, 128, 7) for _ in range(2)]
    assert all(isinstance(b, torch.Tensor) for b in during) and during[0] is not during[1]
    assert len(fake.made) == 3
    fake.capturing = False
    assert alloc(1024, 128, 7) == kept and len(alloc.buffers) == 1


def test_past_the_limit_the_least_recently_used_buffer_goes():
    fake = Fake()
    alloc = fake.cache(limit=2)
    a = alloc(512, 128, 1)
    alloc(512, 128, 2)
    assert alloc(512, 128, 1) == a  # 1 is now the most recent
    alloc(512, 128, 3)  # evicts 2
    assert [k[1] for k in alloc.buffers] == [1, 3]
    alloc(512, 128, 2)
    assert len(fake.made) == 4


def test_a_misaligned_buffer_is_refused():
    fake = Fake()
    alloc = ScratchCache(device=lambda: 0, capturing=lambda: False,
                         allocate=lambda size, device: fake.allocate(size + 1, device)[1:])  # 512·k + 1
    with pytest.raises(RuntimeError, match="not 128-byte aligned"):
        alloc(1024, 128, 0)
