"""The Lightning ``lightning="vjp"`` chunked path (custom VJP, matrix state pass) against the fp64
torch reference: every option, forward and gradients (o, S_T, dq, dk, dv, dh0)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jax
import jax.numpy as jnp

from jax_testutil import assert_close, cotangents, fast_jit, jax_run, make_inputs, torch_reference
from lattnbench.kernels.jax import chunked
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
    ref_kw, kw = dict(reverse=reverse), dict(kw, reverse=reverse, lightning="vjp")
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


# chunk 8 with T = 45: 6 chunks, a partial last one; group 4 leaves the last group short
@pytest.mark.parametrize("dtype,reverse,state,save", [
    ("fp32", False, "twolevel", True), ("fp32", True, "twolevel", False), ("fp32", False, "matrix", False),
    ("fp32", True, "scan", True), ("bf16", False, "twolevel", True), ("bf16", True, "matrix", True),
    ("bf16", False, "scan", False), ("bf16", True, "twolevel", False),
])
def test_vjp_dense(dtype, reverse, state, save):
    _check(41, dtype, reverse=reverse, chunk=8, state=state, group=4, save_states=save)


@pytest.mark.parametrize("t,chunk,group", [(64, 8, None), (64, 16, 3), (70, 8, 1), (9, 8, 2)])
def test_vjp_chunk_and_group_shapes(t, chunk, group):
    """T a multiple of C (no padding), default group ≈ sqrt(NC), group 1, NC = 2 < group."""
    _check(42, "fp32", t=t, chunk=chunk, group=group)


@pytest.mark.parametrize("dtype,reverse,save", [("fp32", False, True), ("fp32", True, False),
                                                ("bf16", True, True), ("bf16", False, False)])
def test_vjp_varlen(dtype, reverse, save):
    _check(43, dtype, varlen=True, reverse=reverse, chunk=8, save_states=save)


@pytest.mark.parametrize("reverse", [False, True])
def test_vjp_varlen_empty_and_aligned_sequences(reverse):
    """A zero-length sequence (its final state is h0), one exactly 2 chunks long, one of 1 token."""
    _check(44, "fp32", t=30, varlen=True, cu=np.array([0, 0, 16, 17, 30]), reverse=reverse, chunk=8)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_vjp_strong_decay(dtype):
    """γ = −5.8 (the seeds' strongest head): λ^C ≈ e^-371 underflows; every exponent stays ≤ 0."""
    _check(45, dtype, t=300, strong=True, chunk=64, group=2)
    _check(45, dtype, t=100, varlen=True, cu=np.array([0, 70, 100]), strong=True, chunk=32)


def test_vjp_no_decay_no_state_scale_chunk_over_t():
    _check(46, "fp32", t=21, h0=False, gamma=False, scale=0.7, chunk=64)


@pytest.mark.parametrize("reverse", [False, True])
def test_vjp_low_scores_bf16(reverse):
    """scores='low': Q Kᵀ written in bf16 before the mask, same tolerance."""
    _check(47, "bf16", t=90, reverse=reverse, chunk=32, scores="low")


def test_vjp_state_precision_default():
    """state_precision='default' (TF32 on a GPU; exact fp32 on CPU) runs and agrees here."""
    _check(48, "bf16", t=90, chunk=16, state_precision="default")


def test_vjp_fp16():
    """fp16 inputs (fp16 operands, fp32 accumulation), against the fp16 bound."""
    _check_fp16(49)


@pytest.mark.parametrize("seed,dtype,kw", [
    (50, "fp32", dict(chunk=16)),
    (64, "bf16", dict(chunk=8, state="direct", layout="bthd")),
])
def test_vjp_grad_through_final_state_only(seed, dtype, kw):
    """Only S_T carries a cotangent (do = 0): dq = 0, and dk, dv, dh0 match the reference."""
    b, t = 2, 40
    inp = make_inputs(seed, b, t, H, HK, D, E, dtype)
    _, ds = cotangents(seed, (b, t, H, E), (b, H, D, E))
    do = np.zeros((b, t, H, E))
    g = _gamma(seed)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g))
    got = jax_run(chunked_attention, inp, do, ds, dtype, g_gamma=g, lightning="vjp", **kw)
    assert float(np.abs(np.asarray(got["dq"], np.float32)).max()) == 0.0
    assert_close(got, ref, dtype, keys=["final_state", "dk", "dv", "dinitial_state"])


def test_vjp_is_the_default_and_api_routes_to_it(monkeypatch):
    """lightning_attn(impl='chunked') takes LIGHTNING_ALGO; flipping it flips the path (chosen while
    tracing, so a fresh jitted function per setting)."""
    q = jnp.asarray(np.random.default_rng(51).standard_normal((1, 50, 2, 16)), jnp.float32)
    calls = []
    real = chunked._lightning_vjp
    monkeypatch.setattr(chunked, "_lightning_vjp", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    o_new, s_new = fast_jit(lambda x: lightning_attn(x, x, x, 1, 4, impl="chunked", chunk=16))(q)
    assert calls and chunked.LIGHTNING_ALGO == "vjp"
    monkeypatch.setattr(chunked, "LIGHTNING_ALGO", "autodiff")
    o_old, s_old = fast_jit(lambda x: lightning_attn(x, x, x, 1, 4, impl="chunked", chunk=16))(q)
    assert len(calls) == 1
    assert err_ratio(o_new, o_old) < 1e-6 and err_ratio(s_new, s_old) < 1e-6


def test_vjp_catches_wrong_decay_and_direction():
    """The same comparison fails on a wrong decay or direction (the checks can fail)."""
    inp = make_inputs(52, 2, 45, H, HK, D, E, "bf16")
    do, ds = cotangents(52, (2, 45, H, E), (2, H, D, E))
    g = _gamma(52)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g))
    for kw in (dict(g_gamma=g * 1.1), dict(g_gamma=g, reverse=True)):
        got = jax_run(chunked_attention, inp, do, ds, "bf16", chunk=8, lightning="vjp", **kw)
        errs = {key: err_ratio(got[key], ref[key]) for key in ref}
        assert max(errs.values()) > TOLERANCE["bf16"], errs


def test_vjp_option_errors():
    q = jnp.zeros((1, 8, H, D))
    with pytest.raises(ValueError, match="state must be one of"):
        chunked_attention(q, q, q, lightning="vjp", state="blocked")
    with pytest.raises(ValueError, match="scan= belongs"):
        chunked_attention(q, q, q, lightning="vjp", scan="blocked")
    with pytest.raises(ValueError, match="lightning must be one of"):
        chunked_attention(q, q, q, lightning="fast")
    with pytest.raises(TypeError, match="belong to lightning='vjp'"):
        chunked_attention(q, q, q, lightning="autodiff", state="matrix")
    with pytest.raises(TypeError, match="belong to lightning='vjp'"):
        chunked_attention(q, q, q, g=jnp.zeros((1, 8, H, D)), save_states=False)


@pytest.mark.parametrize("combine,dtype,varlen,reverse", [
    ("low", "bf16", False, False), ("low", "bf16", True, True), ("concat", "bf16", False, True),
    ("concat", "bf16", True, False), ("concat", "fp32", False, False), ("low", "fp32", True, False),
    ("f32", "bf16", False, True), ("f32", "bf16", True, False),
])
def test_vjp_combine(combine, dtype, varlen, reverse):
    """combine='low' / 'concat' (inter + intra parts summed in bf16 / in one matmul); fp32 inputs
    ignore the knob and keep fp32 sums, so the fp32 bound still holds."""
    _check(53, dtype, t=45, varlen=varlen, reverse=reverse, chunk=8, combine=combine)


def _check_fp16(seed, **kw):
    """fp16 inputs (fp32 h0) through the vjp path against the fp64 reference, the fp16 bound; o and the
    input gradients stay fp16, S_T fp32."""
    b, t = 2, 45
    rng = np.random.default_rng(seed)
    r16 = lambda shape, s=1.0: (s * rng.standard_normal(shape)).astype(np.float16).astype(np.float64)  # noqa: E731
    inp = {"q": r16((b, t, H, D)), "k": r16((b, t, HK, D)), "v": r16((b, t, HK, E)),
           "initial_state": r16((b, H, D, E), 0.5)}
    do, ds = cotangents(seed, (b, t, H, E), (b, H, D, E))
    g = _gamma(seed)
    ref = torch_reference(torch_ref.lightning_naive, inp, do, ds, gamma=torch.tensor(g))
    names = list(inp)
    args = [jnp.asarray(inp[nm], jnp.float32 if nm == "initial_state" else jnp.float16) for nm in names]

    def f(*a):
        return chunked_attention(*a[:3], g_gamma=g, initial_state=a[3], chunk=16, lightning="vjp", **kw)

    @fast_jit  # one compile of forward and backward instead of an op-by-op dispatch of each
    def run(args, do, ds):
        (o, s), vjp = jax.vjp(f, *args)
        return o, s, vjp((do, ds))

    o, s, grads = run(args, jnp.asarray(do, jnp.float16), jnp.asarray(ds, jnp.float32))
    assert o.dtype == jnp.float16 and grads[0].dtype == jnp.float16 and s.dtype == jnp.float32
    got = {"o": o, "final_state": s, **{"d" + nm: gr for nm, gr in zip(names, grads)}}
    assert_close(got, ref, "fp16")


def test_vjp_combine_concat_fp16_and_low_scores():
    _check_fp16(54, combine="concat", scores="low")


# layout="bthd": einsums on the [B, NC, C, H, D] view of the inputs (no transposes at entry / exit)
@pytest.mark.parametrize("dtype,t,varlen,reverse,kw", [
    ("fp32", 45, False, False, dict(state="twolevel", group=4)),
    ("fp32", 48, False, True, dict(state="matrix", save_states=False)),
    ("fp32", 45, True, False, dict()),
    ("bf16", 45, False, False, dict(state="twolevel", group=4, strong=True)),
    ("bf16", 64, False, True, dict(combine="low", scores="low")),
    ("bf16", 45, True, True, dict(combine="low", save_states=False)),
    ("bf16", 45, False, False, dict(state="scan", combine="low", scores="low", h0=False)),
    ("fp32", 64, False, False, dict(state="twolevel", combine="low", scores="low", strong=True)),
])
def test_vjp_layout_bthd(dtype, t, varlen, reverse, kw):
    _check(61, dtype, t=t, varlen=varlen, reverse=reverse, chunk=8, layout="bthd", **kw)


def test_vjp_layout_bthd_fp16():
    _check_fp16(62, layout="bthd", combine="low")


def test_vjp_auto_group_divides_chunks():
    from lattnbench.kernels.jax.lightning_chunked import _auto_group
    assert _auto_group(128) in (8, 16)
    assert 128 % _auto_group(128) == 0 and 32 % _auto_group(32) == 0
    assert _auto_group(1) == 1
    assert _auto_group(13) == 4          # a prime: no divisor near √13, the rounded root (padding)


def test_vjp_state_precision_and_layout_errors():
    q = jnp.zeros((1, 8, H, D))
    with pytest.raises(ValueError, match="layout must be one of"):
        chunked_attention(q, q, q, lightning="vjp", layout="thd")
    with pytest.raises(ValueError, match="needs layout='bhtd'"):
        chunked_attention(q, q, q, lightning="vjp", layout="bthd", combine="concat")
    with pytest.raises(ValueError, match="state_precision must be one of"):
        chunked_attention(q, q, q, lightning="vjp", state_precision="tf32")


# state="direct": S_in written once in the compute dtype by one [NC, NC] matmul, plus λ^{Cn}·h0 when there
# is an initial state (h0=False: no initial state, its terms skipped)
@pytest.mark.parametrize("dtype,t,varlen,reverse,kw", [
    ("fp32", 45, False, False, dict()),
    ("fp32", 48, False, True, dict(layout="bthd", save_states=False, strong=True)),
    ("bf16", 45, False, False, dict(strong=True)),
    ("bf16", 64, False, True, dict(layout="bthd", scores="low")),
    ("bf16", 45, False, False, dict(layout="bthd", h0=False, save_states=False)),
    ("fp32", 45, False, True, dict(h0=False)),
    ("bf16", 45, True, True, dict()),                                   # varlen: the matrix form
    ("bf16", 6, False, False, dict()),                                  # one chunk: the generic path
    ("fp32", 16, False, True, dict(layout="bthd")),                     # two full chunks
])
def test_vjp_state_direct(dtype, t, varlen, reverse, kw):
    _check(63, dtype, t=t, varlen=varlen, reverse=reverse, chunk=8, state="direct", **kw)


# intra="fold": the forward's intra-chunk decay folded into k and a row factor (dense, direct state)
@pytest.fixture
def fold_calls(monkeypatch):
    """A list that grows by one at every call of the folded forward."""
    from lattnbench.kernels.jax import lightning_chunked as lc

    calls = []
    real = lc._forward_fold
    monkeypatch.setattr(lc, "_forward_fold", lambda *a: (calls.append(1), real(*a))[1])
    return calls


@pytest.mark.parametrize("dtype,t,reverse,kw", [
    ("fp32", 45, False, dict()),                                        # partial last chunk, h0
    ("fp32", 48, True, dict(h0=False, strong=True)),                    # |γ|·C/2 = 23: still folded
    ("bf16", 45, True, dict()),
    ("bf16", 64, False, dict(h0=False, scores="f32", combine="f32")),
    ("bf16", 45, False, dict(save_states=False, scale=0.3)),
])
def test_vjp_fold(dtype, t, reverse, kw, fold_calls):
    """The folded forward runs for the primal (undifferentiated) call: o and S_T against fp64;
    under jax.vjp the mask form runs (and the gradients are checked as everywhere else)."""
    h0, strong, scale = kw.pop("h0", True), kw.pop("strong", False), kw.pop("scale", None)
    _check(64, dtype, t=t, reverse=reverse, chunk=8, state="direct", intra="fold", h0=h0, strong=strong,
           scale=scale, **kw)
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
    primal = fast_jit(lambda a: chunked_attention(**a, g_gamma=g, reverse=reverse, chunk=8, state="direct",
                                                  intra="fold", lightning="vjp",
                                                  **({} if scale is None else dict(scale=scale)), **kw))
    o, fin = primal(args)  # g stays a concrete constant under jit: the fold is decided as it is eagerly
    assert fold_calls, "the primal call did not take the folded form"
    assert_close({"o": o, "final_state": fin}, ref, dtype, keys=["o", "final_state"])


def test_fold_auto_picks_fold_when_safe_and_mask_otherwise(fold_calls):
    """auto folds a concrete, mild decay; a traced decay, fp16 or max|γ|·C/2 > FOLD_MAX_EXP fall back
    to the mask path (same results as intra='mask'), and intra='fold' then refuses with the reason."""
    rng = np.random.default_rng(65)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 40, 2, 16)), jnp.float32) for _ in range(3))
    mild, strong = -rng.uniform(0.05, 0.5, 2), np.array([-0.3, -16.0])  # strong: 16·4 > 60 at chunk 8
    kw = dict(chunk=8, lightning="vjp")
    # jitted with the decay closed over (a concrete constant, decided on as it is eagerly), or passed
    # as an argument (a tracer)
    fast_jit(lambda q, k, v: chunked_attention(q, k, v, g_gamma=mild, **kw))(q, k, v)
    assert len(fold_calls) == 1
    for name, run in [
        ("strong", lambda intra: fast_jit(lambda q, k, v: chunked_attention(q, k, v, g_gamma=strong, intra=intra,
                                                                            **kw))(q, k, v)),
        ("fp16", lambda intra: fast_jit(lambda q, k, v: chunked_attention(q, k, v, g_gamma=mild, intra=intra, **kw))(
            *(x.astype(jnp.float16) for x in (q, k, v)))),
        ("traced", lambda intra: fast_jit(lambda g: chunked_attention(q, k, v, g_gamma=g, intra=intra, **kw))(
            jnp.asarray(mild, jnp.float32))),
    ]:
        auto, mask = run("auto"), run("mask")
        for a, m in zip(auto, mask):
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(m, np.float32), err_msg=name)
        with pytest.raises(ValueError, match="fold"):
            run("fold")
    assert len(fold_calls) == 1, "a blocked case took the folded forward"
    with pytest.raises(ValueError, match="intra"):
        chunked_attention(q, k, v, g_gamma=mild, intra="folded", **kw)
