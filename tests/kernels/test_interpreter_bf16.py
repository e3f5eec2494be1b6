"""bf16 in Triton's interpreter computes as on the GPU (``interpreter_bf16``, installed by this
folder's conftest): a bf16 dot multiplies the values, bf16 arithmetic and comparisons take the
values, and fp32 → bf16 rounds to nearest even. On a GPU the same kernel runs compiled."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _bf16_ops(a, b, c, d, x, y, N: tl.constexpr):
    i = tl.arange(0, N)
    ta = tl.load(a + i[:, None] * N + i[None, :])
    tb = tl.load(b + i[:, None] * N + i[None, :])
    tl.store(c + i[:, None] * N + i[None, :], tl.dot(ta, tb))
    tl.store(d + i[:, None] * N + i[None, :], (ta * tb).to(tl.float32) + tl.where(ta < tb, 1.0, 0.0))
    tl.store(y + i, tl.load(x + i).to(tl.bfloat16))


def test_bf16_dots_arithmetic_comparisons_and_rounding_match_torch():
    n = 16
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    a, b = (torch.randn(n, n, generator=gen).bfloat16().to(DEV) for _ in range(2))
    c, d = torch.empty(n, n, device=DEV), torch.empty(n, n, device=DEV)
    # ties and near-ties of the fp32 -> bf16 rounding, both signs, NaN, huge and subnormal values
    x = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-10, -1 - 2**-8 - 2**-10, float("nan"), 3e38, 1e-40,
                      0.0, *torch.randn(n - 8, generator=gen).tolist()], device=DEV)
    y = torch.empty(n, dtype=torch.bfloat16, device=DEV)
    _bf16_ops[(1,)](a, b, c, d, x, y, N=n)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(d, (a * b).float() + (a < b).float())  # one rounding of each product to bf16
    assert torch.equal(y[~x.isnan()], x[~x.isnan()].bfloat16()) and y[x.isnan()].isnan().all()
