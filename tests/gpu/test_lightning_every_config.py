"""Every autotune config of lightning/triton, forced one at a time, against the fp64 reference.

Autotuning picks one config per shape, so a config that is never the fastest at the shapes a
check-grad run uses would never be checked; the option-matrix suite runs with one config per
launch (``LIGHTNING_TRITON_AUTOTUNE=0``). Here each config of the forward list and of the
backward list is the only one, in bf16 at the seed's head dims, with an initial state: at a
length past one descriptor-config bucket (T > 4096, where the TR 3 configs may run), and at one
token and one short of a chunk, where a chunk loop runs once (the option matrix found dh0 wrong
at T = 1 in fp16 and bf16 with the first backward config on the H200, right in the interpreter).
The tensor-descriptor configs (TR 3) run only at the long length: the pruner never picks them up
to 4096 tokens (configs.descriptors_pay).
"""
from __future__ import annotations

import functools

import pytest
import torch

from lattnbench.kernels.decay import alibi_decay
from lattnbench.kernels.naive.torch_ref import lightning_naive
from lattnbench.kernels.lightning.triton import kernels as K
from lattnbench.kernels.lightning.triton import lightning_attn_triton
from lattnbench.kernels.common.arith import long_sequence, shape_bucket
from lattnbench.kernels.common.launch import forget_tuning
from lattnbench.kernels.lightning.triton.configs import FP32_CONFIG
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

pytestmark = pytest.mark.gpu

B, H, D, E = 1, 2, 128, 128
LENGTHS = (1, 63, 4160)


def _labels(tuner) -> list[str]:
    return [f"{c.kwargs['BT']}-{c.kwargs['BV']}-TR{c.kwargs['TR']}-w{c.num_warps}-s{c.num_stages}"
            for c in tuner.configs] if tuner is not None else []


def _cases():
    for T in LENGTHS:
        for name in ("lightning_fwd", "lightning_bwd"):
            tuner = getattr(K, name)
            for i, label in enumerate(_labels(tuner)):
                c = tuner.configs[i]
                key = (c.kwargs["BT"], c.kwargs["BV"], c.num_warps, c.num_stages, c.kwargs["TR"])
                if key == FP32_CONFIG:  # the fp32 config takes only IEEE-dot (fp32) launches
                    continue
                if c.kwargs["TR"] == 3 and not long_sequence(shape_bucket(T, B * H)):
                    continue
                yield pytest.param(T, name, i, id=f"T{T}-{name}-{label}")


@functools.lru_cache(maxsize=1)
def problem(T: int):
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device="cuda")

    x = dict(q=rnd(B, T, H, D), k=rnd(B, T, H, D), v=rnd(B, T, H, E), h0=rnd(B, H, D, E),
             do=rnd(B, T, H, E), ds=rnd(B, H, D, E))
    x = {k: (v.bfloat16().float() if k in ("q", "k", "v", "do") else v) for k, v in x.items()}
    gamma = torch.from_numpy(alibi_decay(H)).cuda()
    leaves = [x[k].double().requires_grad_() for k in ("q", "k", "v", "h0")]
    o, s = lightning_naive(*leaves[:3], gamma.double(), D**-0.5, leaves[3])
    grads = torch.autograd.grad((o * x["do"].double()).sum() + (s * x["ds"].double()).sum(), leaves)
    return x, gamma, (o.detach(), s.detach(), *grads)


@pytest.mark.parametrize("T, name, index", list(_cases()))
def test_a_forced_config_agrees_with_fp64(monkeypatch, T, name, index):
    tuner = getattr(K, name)
    monkeypatch.setattr(tuner, "configs", [tuner.configs[index]])
    tuner.cache.clear()
    forget_tuning()
    x, gamma, ref = problem(T)
    leaves = [x[k].bfloat16().requires_grad_() for k in ("q", "k", "v")] + [x["h0"].clone().requires_grad_()]
    o, s = lightning_attn_triton(*leaves[:3], gamma=gamma, initial_state=leaves[3], output_final_state=True)
    grads = torch.autograd.grad((o.float() * x["do"]).sum() + (s * x["ds"]).sum(), leaves)
    got = dict(zip(("o", "final_state", "dq", "dk", "dv", "dh0"), (o, s, *grads)))
    errors = {k: err_ratio(v, r) for (k, v), r in zip(got.items(), ref)}
    assert all(e <= TOLERANCE["bf16"] for e in errors.values()), errors
    tuner.cache.clear()
    forget_tuning()
