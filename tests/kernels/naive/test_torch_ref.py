"""The PyTorch references against a brute-force fp64 loop, option by option (chain of trust)."""
import numpy as np
import pytest
import torch

from lattnbench.kernels.decay import alibi_decay, lightning_decay
from lattnbench.kernels.naive import torch_ref


def brute_force(q, k, v, gamma, scale, h0=None, reverse=False, g=None):
    """Scalar-loop fp64 recurrence in numpy: S = decay·S + k vᵀ; o = scale·Sᵀq, per (b, h)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, t, h, d = q.shape
    e = v.shape[3]
    group = h // k.shape[2]
    o = np.zeros((b, t, h, e))
    final = np.zeros((b, h, d, e))
    for bi in range(b):
        for hi in range(h):
            s = np.zeros((d, e)) if h0 is None else np.array(h0[bi, hi], dtype=np.float64)
            steps = range(t - 1, -1, -1) if reverse else range(t)
            for ti in steps:
                decay = np.exp(gamma[hi] + (0.0 if g is None else np.asarray(g[bi, ti, hi], np.float64)))
                kk, vv = k[bi, ti, hi // group], v[bi, ti, hi // group]
                s = (decay * s.T).T if g is not None else decay * s
                s = s + np.outer(kk, vv)
                o[bi, ti, hi] = scale * s.T @ q[bi, ti, hi]
            final[bi, hi] = s
    return o, final


def rand(*shape, rng):
    return torch.from_numpy(rng.standard_normal(shape)).double()


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("impl", ["quadratic", "recurrent", "chunked"])
def test_references_match_brute_force(impl, with_h0, reverse, rng):
    b, t, h, hk, d, e = 2, 19, 4, 2, 5, 3  # GQA, D != E, T not a multiple of the chunk
    q, k, v = rand(b, t, h, d, rng=rng), rand(b, t, hk, d, rng=rng), rand(b, t, hk, e, rng=rng)
    gamma = -rng.uniform(0, 1.5, h)
    h0 = rand(b, h, d, e, rng=rng) if with_h0 else None
    scale = float(rng.uniform(0.2, 2.0))
    g_t = torch.from_numpy(gamma)
    if impl == "quadratic":
        o, s = torch_ref.lightning_naive(q, k, v, g_t, scale, h0, reverse)
    elif impl == "recurrent":
        o, s = torch_ref.recurrent_naive(q, k, v, g_gamma=g_t, scale=scale, initial_state=h0, reverse=reverse)
    else:
        o, s = torch_ref.lightning_chunked(q, k, v, g_t, scale, h0, reverse, chunk=4)
    want_o, want_s = brute_force(q, k, v, gamma, scale, None if h0 is None else h0.numpy(), reverse)
    np.testing.assert_allclose(o.numpy(), want_o, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-10, atol=1e-10)


def test_gla_recurrence_matches_brute_force(rng):
    b, t, h, d, e = 1, 11, 2, 4, 6
    q, k, v = rand(b, t, h, d, rng=rng), rand(b, t, h, d, rng=rng), rand(b, t, h, e, rng=rng)
    g = torch.nn.functional.logsigmoid(rand(b, t, h, d, rng=rng))
    o, s = torch_ref.recurrent_naive(q, k, v, g=g, scale=0.5)
    want_o, want_s = brute_force(q, k, v, np.zeros(h), 0.5, g=g.numpy())
    np.testing.assert_allclose(o.numpy(), want_o, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-10, atol=1e-10)


def test_default_scale_is_inverse_sqrt_dim(rng):
    q, k, v = rand(1, 7, 2, 9, rng=rng), rand(1, 7, 2, 9, rng=rng), rand(1, 7, 2, 4, rng=rng)
    o, _ = torch_ref.lightning_naive(q, k, v)
    want, _ = brute_force(q, k, v, np.zeros(2), 9**-0.5)
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", [torch_ref.lightning_naive, torch_ref.lightning_chunked])
def test_varlen_equals_separate_sequences(impl, rng):
    lengths = [9, 1, 14]
    t, h, d, e = sum(lengths), 3, 4, 5
    q, k, v = rand(1, t, h, d, rng=rng), rand(1, t, h, d, rng=rng), rand(1, t, h, e, rng=rng)
    h0 = rand(len(lengths), h, d, e, rng=rng)
    gamma = torch.from_numpy(-rng.uniform(0, 1, h))
    cu = np.concatenate([[0], np.cumsum(lengths)])
    o, s = impl(q, k, v, gamma, 0.7, h0, False, torch.tensor(cu))
    for i, (a, z) in enumerate(zip(cu, cu[1:])):
        want_o, want_s = brute_force(q[:, a:z], k[:, a:z], v[:, a:z], gamma.numpy(), 0.7, h0[i : i + 1].numpy())
        np.testing.assert_allclose(o[:, a:z].numpy(), want_o, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(s[i : i + 1].numpy(), want_s, rtol=1e-10, atol=1e-10)


def test_long_sequence_chunked_matches_quadratic(rng):
    """The long-sequence reference is trusted because it agrees with the quadratic one."""
    b, t, h, d = 1, 700, 2, 8
    q, k, v = rand(b, t, h, d, rng=rng), rand(b, t, h, d, rng=rng), rand(b, t, h, d, rng=rng)
    gamma = torch.from_numpy(alibi_decay(h).astype(np.float64))
    o1, s1 = torch_ref.lightning_naive(q, k, v, gamma)
    o2, s2 = torch_ref.lightning_chunked(q, k, v, gamma, chunk=128)
    torch.testing.assert_close(o1, o2, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s1, s2, rtol=1e-10, atol=1e-10)


def test_gradients_agree_between_formulations(rng):
    b, t, h, d = 1, 23, 2, 4
    tensors = [rand(b, t, h, d, rng=rng).requires_grad_() for _ in range(3)]
    h0 = rand(b, h, d, d, rng=rng).requires_grad_()
    gamma = torch.from_numpy(-rng.uniform(0, 1, h))
    do, ds = rand(b, t, h, d, rng=rng), rand(b, h, d, d, rng=rng)
    grads = []
    for impl in (torch_ref.lightning_naive, torch_ref.lightning_chunked):
        o, s = impl(*tensors, gamma, 0.9, h0)
        grads.append(torch.autograd.grad((o, s), [*tensors, h0], (do, ds)))
    for a, b_ in zip(*grads):
        torch.testing.assert_close(a, b_, rtol=1e-10, atol=1e-10)


def test_softmax_reference_matches_sdpa_math(rng):
    q, k, v = rand(2, 13, 4, 8, rng=rng), rand(2, 13, 2, 8, rng=rng), rand(2, 13, 2, 8, rng=rng)
    o = torch_ref.softmax_naive(q, k, v, 0.3)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=0.3, enable_gqa=True)
    torch.testing.assert_close(o, want.transpose(1, 2), rtol=1e-10, atol=1e-10)


def test_bad_inputs_raise_value_error(rng):
    q, k, v = rand(2, 5, 4, 3, rng=rng), rand(2, 5, 3, 3, rng=rng), rand(2, 5, 3, 3, rng=rng)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        torch_ref.lightning_naive(q, k, v)
    with pytest.raises(ValueError, match="batch size must be 1"):
        torch_ref.lightning_naive(q, q, q, cu_seqlens=[0, 2, 5])
    with pytest.raises(ValueError, match="initial_state"):
        torch_ref.lightning_naive(q, q, q, initial_state=rand(1, 4, 3, 3, rng=rng))
    with pytest.raises(ValueError, match="rank"):
        torch_ref.lightning_naive(q[0], q[0], q[0])


def test_decay_helpers():
    g = lightning_decay(8, 3, 12)
    np.testing.assert_allclose(g, -(8 / 8) * (1 - 3 / 12) * np.arange(8), rtol=1e-6)
    slopes = -alibi_decay(8)
    np.testing.assert_allclose(slopes, [2 ** -(i + 1) for i in range(8)], rtol=1e-6)
    assert np.all(np.diff(-alibi_decay(12)) != 0) and alibi_decay(12).shape == (12,)
    with pytest.raises(ValueError):
        lightning_decay(4, 5, 4)


def test_gla_varlen_equals_separate_sequences(rng):
    lengths = [6, 1, 9]
    t, h, d, e = sum(lengths), 2, 3, 4
    q, k, v = rand(1, t, h, d, rng=rng), rand(1, t, h, d, rng=rng), rand(1, t, h, e, rng=rng)
    g = torch.nn.functional.logsigmoid(rand(1, t, h, d, rng=rng))
    cu = np.concatenate([[0], np.cumsum(lengths)])
    o, s = torch_ref.recurrent_naive(q, k, v, g=g, scale=0.8, cu_seqlens=cu)
    for i, (a, z) in enumerate(zip(cu, cu[1:])):
        want_o, want_s = brute_force(q[:, a:z], k[:, a:z], v[:, a:z], np.zeros(h), 0.8, g=g[:, a:z].numpy())
        np.testing.assert_allclose(o[:, a:z].numpy(), want_o, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(s[i : i + 1].numpy(), want_s, rtol=1e-10, atol=1e-10)
