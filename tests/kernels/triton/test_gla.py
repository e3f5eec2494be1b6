"""The Triton GLA kernels against the fp64 token-by-token reference.

On a machine without a GPU the kernels run in the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), which cannot do bf16 dots: fp32 and fp16 here, bf16 on the GPU
(`lattnbench check-grad -k gla/triton --dtype bf16`). Outputs and every gradient (q, k, v, g,
initial_state) are checked with random ``do`` and ``dS_T``; every buffer the kernels must fully
write is NaN-poisoned first. The interpreter's chunk is 16 tokens, so T = 37 crosses two chunk
boundaries and ends in a partial chunk.
"""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.triton.gla import gla_triton
from lattnbench.kernels.triton.gla import ops as gla_ops
from lattnbench.kernels.triton.gla.naive import gla_naive
from lattnbench.measure.tolerance import TOLERANCE, err_ratio

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = {torch.float32: "fp32", torch.float16: "fp16"}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """NaN-fill every output buffer the kernels allocate, so an unwritten element shows (the int32
    row flags get -7, which no launch writes)."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan") if dtype.is_floating_point else -7, dtype=dtype, device=device)

    monkeypatch.setattr(gla_ops, "_empty", nan_empty)


def _gates(gen, shape, normaliser):
    """log σ(x) / normaliser: fla's gates (normaliser 16) and stronger ones."""
    return torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen)) / normaliser


def check(seed=0, b=1, t=37, h=2, hkv=None, d=24, e=40, dtype=torch.float32, h0=True, reverse=False,
          cu_seqlens=None, scale=None, normaliser=16.0, dst=True, skip=()):
    """Kernel and fp64 reference on the same dtype-rounded inputs; assert o, S_T, dq, dk, dv, dg,
    dh0 within the dtype's tolerance (names in ``skip`` only finite). Returns the errors."""
    hkv = hkv or h
    n = b if cu_seqlens is None else len(cu_seqlens) - 1
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=gen).to(dtype)
    k = torch.randn(b, t, hkv, d, generator=gen).to(dtype)
    v = torch.randn(b, t, hkv, e, generator=gen).to(dtype)
    g = _gates(gen, (b, t, h, d), normaliser)
    s0 = torch.randn(n, h, d, e, generator=gen) if h0 else None
    do = torch.randn(b, t, h, e, generator=gen).to(dtype)
    ds = torch.randn(n, h, d, e, generator=gen)
    ins = [q, k, v, g] + ([s0] if h0 else [])

    mine = [x.to(DEV).requires_grad_(True) for x in ins]
    o, st = gla_triton(*mine[:4], scale=scale, initial_state=mine[4] if h0 else None, reverse=reverse,
                       cu_seqlens=cu_seqlens)
    assert o.dtype == dtype and st.dtype == torch.float32 and st.shape == (n, h, d, e)
    outs, cots = ((o, st), (do.to(DEV), ds.to(DEV))) if dst else ((o,), (do.to(DEV),))
    grads = torch.autograd.grad(outs, mine, cots)

    ref = [x.double().requires_grad_(True) for x in ins]
    ro, rs = gla_naive(*ref[:4], scale=scale, initial_state=ref[4] if h0 else None, reverse=reverse,
                       cu_seqlens=cu_seqlens)
    routs, rcots = ((ro, rs), (do.double(), ds.double())) if dst else ((ro,), (do.double(),))
    rgrads = torch.autograd.grad(routs, ref, rcots)

    names = ["dq", "dk", "dv", "dg", "dh0"][: len(ins)]
    pairs = {"o": (o, ro), "final_state": (st, rs), **{nm: (x, r) for nm, x, r in zip(names, grads, rgrads)}}
    errs = {nm: err_ratio(x, r) for nm, (x, r) in pairs.items()}
    tol = TOLERANCE[NAMES[dtype]]
    bad = {nm: err for nm, err in errs.items() if not (err < float("inf") if nm in skip else err <= tol)}
    assert not bad, f"errors above {tol}: {bad} (all: {errs})"
    return errs


@pytest.mark.parametrize("reverse", [False, True])
def test_gqa_initial_state_odd_t_non_pow2_dims(reverse):
    check(seed=1, h=2, hkv=1, d=24, e=40, reverse=reverse, scale=0.3)


def test_fp16_batch_d_smaller_than_e():
    check(seed=2, b=2, h=1, d=16, e=40, dtype=torch.float16, normaliser=8.0)


@pytest.mark.parametrize("reverse", [False, True])
def test_varlen_with_a_length_one_sequence(reverse):
    check(seed=3, t=30, h=2, hkv=1, d=16, e=24, reverse=reverse, cu_seqlens=[0, 12, 13, 30])


def test_exact_path_matches(monkeypatch):
    # every chunk through the token-by-token intra-chunk path (the one wide gate spreads take)
    monkeypatch.setattr(gla_ops._cfg, "SAFE_DEPTH", -1.0)
    check(seed=4, t=20, h=1, d=16, e=24, reverse=True, normaliser=4.0)


def test_strong_gates_take_the_exact_path_and_stay_finite():
    # gates near -20 per token: chunks deeper than SAFE_DEPTH. dg is only
    # required finite here: its suffix-sum form q⊙dq − k⊙dk cancels when the state is wiped at
    # every token (docs/design/gla-triton.md)
    errs = check(seed=5, t=20, h=1, d=16, e=16, normaliser=0.05, skip=("dg",))
    assert errs["o"] <= TOLERANCE["fp32"]


def test_no_state_gradient_and_no_initial_state():
    check(seed=6, t=17, h=1, d=16, e=16, h0=False, dst=False)


def test_no_final_state_returned():
    gen = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 9, 1, 16, generator=gen), torch.randn(1, 9, 1, 16, generator=gen)
    v, g = torch.randn(1, 9, 1, 16, generator=gen), _gates(gen, (1, 9, 1, 16), 16.0)
    o, st = gla_triton(q, k, v, g, output_final_state=False)
    ro, _ = gla_naive(q.double(), k.double(), v.double(), g.double())
    assert st is None and err_ratio(o, ro) <= TOLERANCE["fp32"]


@pytest.mark.parametrize("change, needle", [
    (dict(g=torch.zeros(1, 5, 2, 16)), "g must be [B, T, H, D]"),
    (dict(g=torch.zeros(1, 5, 1, 16, dtype=torch.float64)), "g must be float32"),
    (dict(k=torch.zeros(1, 5, 1, 8)), "shape mismatch"),
    (dict(initial_state=torch.zeros(2, 1, 16, 16)), "initial_state must be"),
    (dict(cu_seqlens=[0, 3]), "cu_seqlens must rise"),
    (dict(scale=float("inf")), "scale must be finite"),
])
def test_bad_input_is_a_value_error_before_any_launch(monkeypatch, change, needle):
    launched = []
    for name in ("_FWD", "_BWD_Q", "_BWD_K", "_BWD_V"):
        monkeypatch.setattr(gla_ops, name, lambda *a, **kw: launched.append(a))
    args = dict(q=torch.zeros(1, 5, 1, 16), k=torch.zeros(1, 5, 1, 16), v=torch.zeros(1, 5, 1, 16),
                g=torch.zeros(1, 5, 1, 16))
    args.update(change)
    with pytest.raises(ValueError, match=needle.replace("[", r"\[")):
        gla_triton(**args)
    assert not launched


def test_fp16_dg_does_not_drift_over_a_long_sequence(monkeypatch):
    # dg's per-row terms q⊙dq − k⊙dk nearly cancel over a sequence: summed from S_T alone their
    # rounding drifts like a random walk (fp16 dg 2.8e-3 at this T, over the tolerance), so each
    # chunk's dg is pinned at both ends from its entry state. At the qk launch's GPU chunk
    # (BT = 64), one slice per head (fewer interpreted programs)
    monkeypatch.setitem(gla_ops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gla_ops._INTERP_META, "BS", 32)
    check(seed=8, t=2000, h=1, d=32, e=32, dtype=torch.float16)


def test_the_dq_and_dk_passes_share_one_chunk_length():
    # the dq pass writes the state entering each chunk in slots of its BT rows and the dk pass reads
    # them at its own BT: a second chunk length in either list (or in jax-triton's configs) would
    # let autotuning pair two that disagree
    from lattnbench.kernels.triton.gla import configs as C

    lengths = {c[0] for c in C.BWD_Q_CONFIGS + C.BWD_K_CONFIGS}
    assert len(lengths) == 1 and C.JAX_BWD_Q_CONFIG[0] == C.JAX_BWD_K_CONFIG[0] == lengths.pop()


def test_the_forward_and_the_dv_pass_sweep_the_prep_chunk():
    # both sweep the decayed operands the prep launch writes per chunk, and the chunk totals by slot:
    # every config of theirs, jax-triton's included, must run at that chunk
    from lattnbench.kernels.triton.gla import configs as C

    lengths = {c[0] for c in C.FWD_CONFIGS + C.BWD_V_CONFIGS} | {C.JAX_FWD_CONFIG[0], C.JAX_BWD_V_CONFIG[0]}
    assert lengths == {C.PRE_CHUNK}


@pytest.mark.parametrize("reverse", [False, True])
def test_prep_writes_every_chunks_decayed_operands(reverse):
    # varlen with a one-row sequence and partial chunks, GQA, two programs a row striding the chunks
    from lattnbench.kernels.triton.lightning import checks

    gen = torch.Generator().manual_seed(11)
    cu, h, hkv, d = [0, 21, 22, 50], 2, 1, 24
    t = cu[-1]
    q, k = torch.randn(1, t, h, d, generator=gen), torch.randn(1, t, hkv, d, generator=gen)
    g = _gates(gen, (1, t, h, d), 4.0)
    qd, kd, bl = gla_ops.gla_prep(q, k, g, reverse, checks.cu_tensor(cu, t, q.device), len(cu) - 1)
    bt = gla_ops._pre_chunk()
    for i_n, (bos, eos) in enumerate(zip(cu[:-1], cu[1:])):
        order = torch.arange(bos, eos).flip(0) if reverse else torch.arange(bos, eos)
        for i_c, rows in enumerate(order.split(bt)):
            gc = g[0, rows].double()
            B, Bl = gc.cumsum(0), gc.sum(0)
            want_q = q[0, rows].double() * B.exp()
            want_k = k[0, rows].double().repeat_interleave(h // hkv, 1) * (Bl - B).exp()
            torch.testing.assert_close(qd[0, rows].double(), want_q, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(kd[0, rows].double(), want_k, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(bl[bos // bt + i_n + i_c].double(), Bl, rtol=1e-5, atol=1e-6)


def _one_launch(fast, exact, key, fast_args, exact_args, spec, stream):
    """A pass launched as the JAX bridge launches it: once, with PATH "both" (the exact launch's
    arguments carry the forward's row flags)."""
    def both():
        grid, kw = spec()
        return grid, dict(kw, PATH="both")

    fast(key, exact_args, both, stream)


@pytest.mark.parametrize("reverse", [False, True])
def test_one_launch_per_pass_as_from_jax(monkeypatch, reverse):
    # jax-triton hands every launch fresh buffers, so the bridge cannot rerun rows into a fast
    # launch's outputs: each pass launches once and sweeps flagged rows with the exact path itself
    monkeypatch.setattr(gla_ops, "_twice", _one_launch)
    check(seed=10, h=2, hkv=1, d=24, e=40, reverse=reverse)


@pytest.mark.parametrize("launch", ["fast launch, then exact rerun", "one launch"])
def test_only_rows_with_a_deep_chunk_take_the_exact_path(monkeypatch, launch):
    # batch row 0 has fla's gates (chunks about −0.7 deep), row 1 gates near −14 per token: the fast
    # forward flags row 1 only, and both rows still match the fp64 reference (row 1 through the
    # exact path of every pass); T = 20 crosses the interpreter's 16-token chunk
    if launch == "one launch":
        monkeypatch.setattr(gla_ops, "_twice", _one_launch)
    gen = torch.Generator().manual_seed(9)
    b, t, h, d, e = 2, 20, 1, 16, 16
    q, k = torch.randn(b, t, h, d, generator=gen), torch.randn(b, t, h, d, generator=gen)
    v, do = torch.randn(b, t, h, e, generator=gen), torch.randn(b, t, h, e, generator=gen)
    g = torch.cat([_gates(gen, (1, t, h, d), 16.0), _gates(gen, (1, t, h, d), 0.05)])
    _, _, deep, _ = gla_ops.gla_fwd(q, k, v, g, d**-0.5, None, False, None, True, b)
    assert deep.tolist() == [0, 1]
    ins = [x.requires_grad_(True) for x in (q.clone(), k.clone(), v.clone(), g.clone())]
    o, _ = gla_triton(*ins, output_final_state=False)
    grads = torch.autograd.grad(o, ins, do)
    ref = [x.detach().double().requires_grad_(True) for x in ins]
    ro, _ = gla_naive(*ref)
    rgrads = torch.autograd.grad(ro, ref, do.double())
    tol = TOLERANCE["fp32"]
    assert err_ratio(o, ro) <= tol
    for name, x, r in zip(("dq", "dk", "dv"), grads, rgrads):
        assert err_ratio(x, r) <= tol, name
