"""The launch configs of the Triton Lightning kernels (configs.py): the autotune lists, their
pruner and key, and the global-scratch allocator the tensor-descriptor configs need. Host-side
only: no kernel runs here."""
from __future__ import annotations

import contextvars

import pytest
import torch

from lattnbench.kernels.common import arith as A
from lattnbench.kernels.lightning.triton import configs as C
from lattnbench.kernels.lightning.triton import ops as tl_ops


@pytest.fixture
def gpu_lists(monkeypatch):
    """autotune_configs as on a GPU (the interpreter gets its one fixed config)."""
    monkeypatch.setattr(C, "INTERPRET", False)


def _key(c):
    return (c.kwargs["BT"], c.kwargs["BV"], c.num_warps, c.num_stages, c.kwargs["TR"])


@pytest.mark.parametrize("table,table_t", [(C.FWD_CONFIGS, C.FWD_CONFIGS_T), (C.BWD_CONFIGS, C.BWD_CONFIGS_T)])
def test_autotune_lists_carry_the_orientation(gpu_lists, table, table_t):
    """Row-wise (TR 0) and transposed (TR 1-3) configs, each once."""
    cfgs = C.autotune_configs(table, table_t)
    got = [_key(c) for c in cfgs if not C._fp32_only(c)]
    assert sorted(got) == sorted([(*c, 0) for c in table] + list(table_t))
    assert {tr for *_, tr in got} == {0, 1, 2, 3}
    assert [_key(c) for c in cfgs if C._fp32_only(c)] == [C.FP32_CONFIG]


@pytest.mark.parametrize("table,table_t", [(C.FWD_CONFIGS, C.FWD_CONFIGS_T), (C.BWD_CONFIGS, C.BWD_CONFIGS_T)])
def test_fp32_launches_take_only_the_fp32_config_and_others_never(gpu_lists, table, table_t):
    """IEEE-dot (fp32) launches compile one small config instead of tuning the whole list; the
    16-bit launches never see it."""
    cfgs = C.autotune_configs(table, table_t)
    for args in ({"KD": 128, "VD": 128, "ROLE": 2, "SHAPE_BUCKET": 2}, {"KD": 48, "VD": 96, "SHAPE_BUCKET": 0}):
        fp32 = C.prune_configs(cfgs, {**args, "DOT_PREC": "ieee"})
        assert [_key(c) for c in fp32] == [C.FP32_CONFIG]
        half = C.prune_configs(cfgs, {**args, "DOT_PREC": "tf32"})
        assert half and not any(C._fp32_only(c) for c in half)
    # the fp32 config is recognised by identity: an equal config made elsewhere is not it
    bt, bv, w, st, tr = C.FP32_CONFIG
    import triton
    assert not C._fp32_only(triton.Config({"BT": bt, "BV": bv, "TR": tr}, num_warps=w, num_stages=st))


def test_interpreter_gets_the_fixed_config(monkeypatch):
    monkeypatch.setattr(C, "INTERPRET", True)
    assert [_key(c) for c in C.autotune_configs(C.FWD_CONFIGS, C.FWD_CONFIGS_T)] == [(*C.INTERP_CONFIG, 0)]


def test_prune_keeps_bv_within_the_split_dimension(gpu_lists, monkeypatch):
    """dq and dk split D, the forward and dv split E: no BV wider than the padded split dimension."""
    monkeypatch.setattr(C, "TMA_OK", False)
    cfgs = C.autotune_configs(C.BWD_CONFIGS, C.BWD_CONFIGS_T)
    for role, split in ((0, 48), (1, 48), (2, 40)):
        kept = C.prune_configs(cfgs, {"KD": 48, "VD": 40, "ROLE": role, "SHAPE_BUCKET": 2})
        assert kept and all(c.kwargs["BV"] <= A.pow2(split) for c in kept)
    dq = C.prune_configs(cfgs, {"KD": 128, "VD": 16, "ROLE": 0})
    assert any(c.kwargs["TR"] and c.kwargs["BV"] == 128 for c in dq)
    fwd = C.autotune_configs(C.FWD_CONFIGS, C.FWD_CONFIGS_T)
    assert all(c.kwargs["BV"] <= 64 for c in C.prune_configs(fwd, {"KD": 128, "VD": 64}))
    # no head dims known: nothing pruned but the fp32 config
    assert C.prune_configs(cfgs, {"SHAPE_BUCKET": 2}) == [c for c in cfgs if not C._fp32_only(c)]


def test_prune_drops_descriptor_configs_when_short_unaligned_or_unavailable(gpu_lists, monkeypatch):
    cfgs = C.autotune_configs(C.FWD_CONFIGS, C.FWD_CONFIGS_T)
    assert any(c.kwargs["TR"] == 3 for c in cfgs)
    base = torch.empty(64, dtype=torch.float32)
    args = {"KD": 128, "VD": 128, "SHAPE_BUCKET": 2, "q": base, "k": base[1:], "o": base}  # k 4 bytes off
    monkeypatch.setattr(C, "TMA_OK", True)
    aligned = C.prune_configs(cfgs, {**args, "k": base})
    assert any(c.kwargs["TR"] == 3 for c in aligned)
    for short in (0, 1, 3, 4):  # up to 4096 tokens (any grid): host-bound, no descriptor configs
        kept = C.prune_configs(cfgs, {**args, "k": base, "SHAPE_BUCKET": short})
        assert kept and not any(c.kwargs["TR"] == 3 for c in kept)
    assert any(c.kwargs["TR"] == 3 for c in C.prune_configs(cfgs, {**args, "k": base, "SHAPE_BUCKET": 5}))
    unaligned = C.prune_configs(cfgs, args)
    assert unaligned and not any(c.kwargs["TR"] == 3 for c in unaligned)
    monkeypatch.setattr(C, "TMA_OK", False)
    assert not any(c.kwargs["TR"] == 3 for c in C.prune_configs(cfgs, {**args, "k": base}))


def test_shape_bucket_separates_sequence_lengths_and_small_grids():
    """The autotune key: a config tuned on a small grid (a gradient check at B2 H8) must not be
    reused for a full one (B4 H32) of the same length, nor one tuned at 4096 tokens for 8192."""
    buckets = {(t, rows): A.shape_bucket(t, rows) for t in (1, 1024, 1025, 4096, 4097, 32768)
               for rows in (1, 16, A.FEW_ROWS - 1, A.FEW_ROWS, 128, 4096)}
    for (t, rows), b in buckets.items():
        same = [key for key, other in buckets.items() if other == b]
        assert all((key[0] <= 1024) == (t <= 1024) and (key[0] <= 4096) == (t <= 4096) for key in same)
        assert all((key[1] < A.FEW_ROWS) == (rows < A.FEW_ROWS) for key in same)
        assert A.long_sequence(b) == (t > 4096)
    assert len(set(buckets.values())) == 6


@pytest.mark.parametrize("x,want", [(1, 16), (16, 16), (17, 32), (48, 64), (128, 128), (129, 256)])
def test_pow2_and_cdiv(x, want):
    assert A.pow2(x) == want
    assert A.cdiv(x, 16) == -(-x // 16)


def test_ensure_allocator_sets_only_a_missing_one():
    if not C.TMA_OK:
        pytest.skip("this Triton has no tensor descriptors")
    var = C.triton_allocation._allocator

    def fresh():
        var.set(C.triton_allocation.NullAllocator())
        tl_ops.ensure_allocator()
        return var.get()

    assert contextvars.copy_context().run(fresh) is tl_ops.scratch

    def users():
        mine = lambda size, align, stream: None  # noqa: E731
        var.set(mine)
        tl_ops.ensure_allocator()
        return var.get() is mine

    assert contextvars.copy_context().run(users)


def test_the_kernels_take_the_length_unspecialized():
    """A length equal to 1 must not compile kernels of its own (tests/gpu/test_lightning_short.py
    says why); Triton specializes integer arguments equal to 1 unless told not to."""
    from lattnbench.kernels.lightning.triton import kernels as K

    for kernel in (K.lightning_fwd_kernel, K.lightning_bwd_kernel):
        if hasattr(kernel, "params"):  # compiled: the flag per parameter
            unspecialized = {p.name for p in kernel.params if p.do_not_specialize}
        else:  # interpreted: the decorator's arguments, kept as they were given
            unspecialized = set(kernel.kwargs["do_not_specialize"])
        assert unspecialized == {"T", "SHAPE_BUCKET"}
