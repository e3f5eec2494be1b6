"""Lightning's chunked form (``lightning_chunked``: custom VJP, entering states from one matmul),
as ``lightning/jax-chunked`` calls it through ``chunked_attention``, against the fp64 torch
reference: forward and gradients (o, S_T, dq, dk, dv, dh0) for every path it takes: dense inputs
of several chunks (the direct state pass), of one chunk and packed varlen (``_state_pass``),
reverse, initial state or none, GQA, T not a multiple of C, fp32 / bf16 / fp16, and the folded
forward of undifferentiated calls."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import assert_close, cotangents, fast_jit, jax_run, make_inputs, torch_reference
from lattnbench.kernels.jax import chunked
from lattnbench.kernels.jax import lightning_chunked as lc
from lattnbench.kernels.jax.api import lightning_attn
from lattnbench.kernels.jax.chunked import chunked_attention
from lattnbench.kernels.naive import torch_ref
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

H, HK, D, E = 4, 2, 48, 80      # GQA, non-power-of-two D != E
CU = np.array([0, 17, 18, 45])  # unequal lengths, one of length 1


def _gamma(seed, strong=False):
    g = -np.random.default_rng(seed).uniform(0.02, 0.5, H)
    if strong:
        g[0] = -5.8             # the seeds' strongest head: λ^C and the decay matrix underflow to 0
    return g


def _check(seed, dtype, *, t=45, varlen=False, cu=CU, h0=True, gamma=True, strong=False, reverse=False,
           scale=None, **kw):
    b = 1 if varlen else 2
    n = len(cu) - 1 if varlen else b
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype, h0=h0, n=n if varlen else None)
    do, ds = cotangents(seed, (b, t, H, E), (n, H, D, E))
    ref_kw, kw = dict(reverse=reverse), dict(kw, reverse=reverse)
    if gamma:
        g = _gamma(seed, strong)
        ref_kw["gamma"], kw["g_gamma"] = torch.tensor(g), g
    if varlen:
        ref_kw["cu_seqlens"] = kw["cu_seqlens"] = cu
    if scale is not None:
        ref_kw["scale"] = kw["scale"] = scale
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, **ref_kw)
    got = jax_run(chunked_attention, inp, do, ds, dtype, **kw)
    return assert_close(got, ref, dtype)


# chunk 8: T = 45 is 6 chunks with a partial last one, 48 and 16 whole chunks (direct state pass);
# T = 6 is one chunk (the general state pass)
@pytest.mark.parametrize("dtype,t,reverse,h0,strong", [
    ("fp32", 45, False, True, False), ("fp32", 45, True, False, False), ("fp32", 48, True, True, True),
    ("fp32", 16, False, True, False), ("fp32", 6, True, True, False),
    ("bf16", 45, False, True, True), ("bf16", 45, True, True, False), ("bf16", 64, False, False, False),
    ("bf16", 6, False, True, False), ("bf16", 6, True, False, False),
])
def test_dense(dtype, t, reverse, h0, strong):
    _check(41, dtype, t=t, reverse=reverse, h0=h0, strong=strong, chunk=8)


@pytest.mark.parametrize("dtype,reverse,h0", [("fp32", False, True), ("fp32", True, False),
                                              ("bf16", True, True), ("bf16", False, False)])
def test_varlen(dtype, reverse, h0):
    _check(43, dtype, varlen=True, reverse=reverse, h0=h0, chunk=8)


@pytest.mark.parametrize("reverse", [False, True])
def test_varlen_empty_and_aligned_sequences(reverse):
    """A zero-length sequence (its final state is h0), one exactly 2 chunks long, one of 1 token."""
    _check(44, "fp32", t=30, varlen=True, cu=np.array([0, 0, 16, 17, 30]), reverse=reverse, chunk=8)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_strong_decay(dtype):
    """γ = −5.8 (the seeds' strongest head): λ^C ≈ e^-371 underflows; every exponent stays ≤ 0."""
    _check(45, dtype, t=300, strong=True, chunk=64)
    _check(45, dtype, t=100, varlen=True, cu=np.array([0, 70, 100]), strong=True, chunk=32)


def test_default_chunk_no_decay_no_state_scale_chunk_over_t():
    """Plain linear attention (γ absent), no initial state, explicit scale, T under the default chunk."""
    _check(46, "fp32", t=21, h0=False, gamma=False, scale=0.7)


def test_default_chunk_several_chunks():
    """The default chunk (128) over 300 tokens: two full chunks and a partial one."""
    _check(47, "bf16", t=300, reverse=True)


@pytest.mark.parametrize("seed,dtype,kw", [
    (50, "fp32", dict(chunk=16)),                                   # several chunks: the direct pass
    (64, "bf16", dict(chunk=8)),
    (65, "fp32", dict()),                                           # one chunk of the default 128
])
def test_grad_through_final_state_only(seed, dtype, kw):
    """Only S_T carries a cotangent (do = 0): dq = 0, and dk, dv, dh0 match the reference."""
    b, t = 2, 40
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype)
    _, ds = cotangents(seed, (b, t, H, E), (b, H, D, E))
    do = np.zeros((b, t, H, E))
    g = _gamma(seed)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g))
    got = jax_run(chunked_attention, inp, do, ds, dtype, g_gamma=g, **kw)
    assert float(np.abs(np.asarray(got["dq"], np.float32)).max()) == 0.0
    assert_close(got, ref, dtype, keys=["final_state", "dk", "dv", "dinitial_state"])


def _check_fp16(seed, varlen=False, reverse=False, t=45):
    """fp16 inputs (fp32 h0) against the fp64 reference, the fp16 bound; o and the input gradients
    stay fp16, S_T fp32."""
    b = 1 if varlen else 2
    n = len(CU) - 1 if varlen else b
    rng = np.random.default_rng(seed)
    r16 = lambda shape, s=1.0: (s * rng.standard_normal(shape)).astype(np.float16).astype(np.float64)  # noqa: E731
    inp = {"q": r16((b, t, H, D)), "k": r16((b, t, HK, D)), "v": r16((b, t, HK, E)),
           "initial_state": r16((n, H, D, E), 0.5)}
    do, ds = cotangents(seed, (b, t, H, E), (n, H, D, E))
    g = _gamma(seed)
    kw = dict(reverse=reverse) | (dict(cu_seqlens=CU) if varlen else {})
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g), **kw)
    names = list(inp)
    args = [jnp.asarray(inp[nm], jnp.float32 if nm == "initial_state" else jnp.float16) for nm in names]

    def f(*a):
        return chunked_attention(*a[:3], g_gamma=g, initial_state=a[3], chunk=16, **kw)

    @fast_jit  # one compile of forward and backward instead of an op-by-op dispatch of each
    def run(args, do, ds):
        (o, s), vjp = jax.vjp(f, *args)
        return o, s, vjp((do, ds))

    o, s, grads = run(args, jnp.asarray(do, jnp.float16), jnp.asarray(ds, jnp.float32))
    assert o.dtype == jnp.float16 and grads[0].dtype == jnp.float16 and s.dtype == jnp.float32
    got = {"o": o, "final_state": s, **{"d" + nm: gr for nm, gr in zip(names, grads)}}
    assert_close(got, ref, "fp16")


@pytest.mark.parametrize("varlen,reverse", [(False, False), (True, True)])
def test_fp16(varlen, reverse):
    """fp16 inputs (fp16 operands, fp32 accumulation), against the fp16 bound."""
    _check_fp16(49, varlen=varlen, reverse=reverse)


def test_catches_wrong_decay_and_direction():
    """The same comparison fails on a wrong decay or direction (the checks can fail)."""
    inp = make_inputs(52, 2, 45, H, HK, D, E, "bf16")
    do, ds = cotangents(52, (2, 45, H, E), (2, H, D, E))
    g = _gamma(52)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g))
    for kw in (dict(g_gamma=g * 1.1), dict(g_gamma=g, reverse=True)):
        got = jax_run(chunked_attention, inp, do, ds, "bf16", chunk=8, **kw)
        errs = {key: err_ratio(got[key], ref[key]) for key in ref}
        assert max(errs.values()) > TOLERANCE["bf16"], errs


def test_api_routes_to_it_with_the_default_chunk(monkeypatch):
    """lightning_attn(impl='chunked') and recurrent(impl='chunked') without g (the registry's
    lightning/jax-chunked) run lightning_chunked at chunk 128 unless told otherwise."""
    from lattnbench.kernels.jax.api import recurrent

    q = jnp.asarray(np.random.default_rng(51).standard_normal((1, 50, 2, 16)), jnp.float32)
    chunks = []
    real = chunked.lightning_chunked
    monkeypatch.setattr(chunked, "lightning_chunked", lambda *a, **kw: chunks.append(kw["chunk"]) or real(*a, **kw))
    lightning_attn(q, q, q, 1, 4, impl="chunked")
    recurrent(q, q, q, g_gamma=-0.1 * np.ones(2), impl="chunked")
    lightning_attn(q, q, q, 1, 4, impl="chunked", chunk=16)
    assert chunks == [lc.CHUNK, lc.CHUNK, 16] and lc.CHUNK == 128


def test_gla_options_are_refused_for_lightning():
    q = jnp.zeros((1, 8, H, D))
    for kw in (dict(scan="blocked"), dict(group=4), dict(sub=4), dict(scan="sequential", group=2)):
        with pytest.raises(ValueError, match="GLA's options"):
            chunked_attention(q, q, q, **kw)
    with pytest.raises(TypeError):
        chunked_attention(q, q, q, state="matrix")  # no such option


# the folded forward: an undifferentiated call of dense inputs with several chunks folds the
# intra-chunk decay into k and a row factor
@pytest.fixture
def fold_calls(monkeypatch):
    """A list that grows by one at every call of the folded forward."""
    calls = []
    real = lc._forward_fold
    monkeypatch.setattr(lc, "_forward_fold", lambda *a: (calls.append(1), real(*a))[1])
    return calls


@pytest.mark.parametrize("dtype,t,reverse,h0,strong,scale", [
    ("fp32", 45, False, True, False, None),                              # partial last chunk, h0
    ("fp32", 48, True, False, True, None),                               # |γ|·C/2 = 23: still folded
    ("bf16", 45, True, True, False, None),
    ("bf16", 64, False, False, False, 0.3),
])
def test_fold(dtype, t, reverse, h0, strong, scale, fold_calls):
    """The folded forward runs for the primal (undifferentiated) call: o and S_T against fp64;
    under jax.vjp the mask form runs (and the gradients are checked as everywhere else)."""
    _check(64, dtype, t=t, reverse=reverse, chunk=8, h0=h0, strong=strong, scale=scale)
    assert not fold_calls, "the differentiated forward took the folded form"
    b = 2
    inp = make_inputs(64, b, t, H, HK, D, E, dtype, h0=h0)
    g = _gamma(64, strong)
    do, ds = cotangents(64, (b, t, H, E), (b, H, D, E))
    ref_kw = dict(reverse=reverse, gamma=torch.tensor(g)) | ({} if scale is None else dict(scale=scale))
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, **ref_kw)
    args = {nm: jnp.asarray(x.astype(np.float32)).astype(jnp.float32 if nm == "initial_state" else
                                                         {"fp32": jnp.float32, "bf16": jnp.bfloat16}[dtype])
            for nm, x in inp.items()}
    primal = fast_jit(lambda a: chunked_attention(**a, g_gamma=g, reverse=reverse, chunk=8,
                                                  **({} if scale is None else dict(scale=scale))))
    o, fin = primal(args)  # g stays a concrete constant under jit: the fold is decided as it is eagerly
    assert fold_calls, "the primal call did not take the folded form"
    assert_close({"o": o, "final_state": fin}, ref, dtype, keys=["o", "final_state"])


def test_fold_only_where_safe(fold_calls):
    """A concrete, mild decay on dense inputs of several chunks folds; a traced decay, fp16,
    max|γ|·C/2 > FOLD_MAX_EXP, packed varlen and a single chunk keep the mask form, whose primal
    output is the differentiated call's, bit for bit."""
    rng = np.random.default_rng(65)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 40, 2, 16)), jnp.float32) for _ in range(3))
    mild, strong = -rng.uniform(0.05, 0.5, 2), np.array([-0.3, -16.0])  # strong: 16·4 > 60 at chunk 8
    fast_jit(lambda q, k, v: chunked_attention(q, k, v, g_gamma=mild, chunk=8))(q, k, v)
    assert len(fold_calls) == 1
    cu = np.array([0, 13, 40])
    cases = [  # (name, function of (q, k, v, g), g, its inputs' dtype)
        ("strong", lambda q, k, v, g: chunked_attention(q, k, v, g_gamma=strong, chunk=8), jnp.float32),
        ("fp16", lambda q, k, v, g: chunked_attention(q, k, v, g_gamma=mild, chunk=8), jnp.float16),
        ("traced", lambda q, k, v, g: chunked_attention(q, k, v, g_gamma=g, chunk=8), jnp.float32),
        ("varlen", lambda q, k, v, g: chunked_attention(q, k, v, g_gamma=mild, chunk=8, cu_seqlens=cu), jnp.float32),
        ("one chunk", lambda q, k, v, g: chunked_attention(q, k, v, g_gamma=mild), jnp.float32),
    ]
    for name, fn, dt in cases:
        args = [x.astype(dt) for x in (q, k, v)] + [jnp.asarray(mild, jnp.float32)]
        plain = fast_jit(fn)(*args)
        differentiated = fast_jit(lambda *a, fn=fn: jax.vjp(lambda q, k, v: fn(q, k, v, a[3]), *a[:3])[0])(*args)
        for a, m in zip(plain, differentiated):
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(m, np.float32), err_msg=name)
    assert len(fold_calls) == 1, "a blocked case took the folded forward"


def test_fold_blocker_names_the_reason():
    assert lc._fold_blocker(0.5, 128, 4, jnp.bfloat16, None) == ""
    assert "two chunks" in lc._fold_blocker(0.5, 128, 1, jnp.float32, None)
    assert "two chunks" in lc._fold_blocker(0.5, 128, 4, jnp.float32, np.array([0, 5, 9]))
    assert "fp16" in lc._fold_blocker(0.5, 128, 4, jnp.float16, None)
    assert "traced" in lc._fold_blocker(None, 128, 4, jnp.float32, None)
    assert "exceeds" in lc._fold_blocker(7.75, 128, 4, jnp.float32, None)  # lightning_decay's strongest head
