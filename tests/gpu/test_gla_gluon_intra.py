"""gla/triton's Gluon in-chunk backward launch on the H200 against its Triton one: the whole backward
(dq, dk, dv, dg, dh0) with one launch and then the other, on poisoned outputs, at D 64 and 128,
bf16 and fp16, both orders, packed sequences, GQA, odd lengths and the gate norms of fla's recipes
(16, 1, 0.1); and against fp64 at fla's rule. Each form also runs with the exit launch's terms in
the same launch (GLA_GLUON_INTRA_EXIT, ``exit_terms``), which then replaces the exit launch."""
from __future__ import annotations

import pytest
import torch

from lattnbench.kernels.gla.gluon import host
from lattnbench.kernels.gla.triton import ops as gops
from lattnbench.kernels.gla.triton.naive import gla_naive
from lattnbench.measure.tolerance import err_ratio

pytestmark = pytest.mark.gpu

CASES = [  # b, t, h, hkv, d, e, dtype, reverse, packed lengths or None, gate norm
    (2, 1024, 4, 4, 128, 128, torch.bfloat16, False, None, 16.0),
    (2, 1000, 4, 2, 128, 128, torch.bfloat16, True, None, 0.1),
    (1, 777, 4, 4, 64, 64, torch.float16, False, None, 1.0),
    (1, 333, 2, 2, 64, 128, torch.bfloat16, True, None, 1.0),
    (1, 700, 4, 4, 128, 64, torch.float16, False, (100, 1, 599), 0.1),
    (1, 500, 2, 2, 128, 128, torch.bfloat16, True, (64, 436), 16.0),
]
NAMES = ("dq", "dk", "dv", "dg", "dh0")


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every buffer the launches fully write starts as NaN: a row left unwritten fails."""
    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(gops, "_empty", nan_empty)


def _inputs(b, t, h, hkv, d, e, dtype, lens, norm):
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    n = b if lens is None else len(lens)
    x = dict(q=rnd(b, t, h, d).to(dtype), k=(rnd(b, t, hkv, d) * d**-0.5).to(dtype), v=rnd(b, t, hkv, e).to(dtype),
             g=torch.nn.functional.logsigmoid(rnd(b, t, h, d)) / norm, do=rnd(b, t, h, e).to(dtype),
             h0=rnd(n, h, d, e), dht=rnd(n, h, d, e))
    cu = None if lens is None else torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32,
                                                device="cuda")
    return x, cu, n


#: the Gluon launch's forms: (fp16 level operands, their products' epilogue in the MMA layout, the
#: rows of the blocks whose pairs run in fp32 registers, 0 for none)
VARIANTS = {"gluon_tf32": (False, False, 0), "gluon_fp16": (True, False, 0), "gluon_fp16_epi": (True, True, 0),
            "gluon_tf32_pairs": (False, False, 16), "gluon_fp16_pairs": (True, False, 16),
            "gluon_fp16_epi_pairs": (True, True, 16),
            # key slices of 32 channels at 4 lanes a channel: 4 warps, two programs an SM
            "gluon_fp16_pairs_kds32": (True, False, 16),
            # blocks of 8 rows at 8 lanes a channel, key slices of 32: 8 warps
            "gluon_fp16_pairs8_kds32": (True, False, 8)}


def _backward(monkeypatch, on: bool, x: dict, reverse: bool, cu, n, variant: str = "gluon_tf32",
              exit_terms: bool = False) -> dict:
    """The backward's gradients with the Gluon in-chunk launch (on; in the form ``variant``, with the
    exit terms in the same launch if ``exit_terms``) or the Triton one, and that the launches taken
    are the ones asked for: the Triton exit launch runs unless the Gluon launch takes its terms.
    With a form that takes the pairs inside blocks in registers, the Triton launch takes its own
    register form at the same blocks (GLA_INTRA_TREE), so that both sum those pairs in fp32 in the
    same order."""
    op16, epi, pairs = VARIANTS[variant]
    monkeypatch.setattr(host, "INTRA_ON", on)
    monkeypatch.setattr(host, "INTRA_OP16", op16)
    monkeypatch.setattr(host, "INTRA_EPI", epi)
    monkeypatch.setattr(host, "INTRA_PAIRS", pairs)
    monkeypatch.setattr(host, "INTRA_ROW_LANES", 64 // pairs if pairs else 4)  # a block is a thread's rows
    monkeypatch.setattr(host, "INTRA_KDS", 32 if variant.endswith("kds32") else 64)
    monkeypatch.setattr(host, "INTRA_EXIT", exit_terms)
    if pairs:  # the Triton launch's levels above blocks of ``pairs`` rows
        monkeypatch.setattr(gops._cfg, "INTRA_TREE", gops._cfg.levels(64 // pairs))
    taken, exits = [], []
    real, real_exit = host.launch_intra, gops._BWD_EXIT
    monkeypatch.setattr(host, "launch_intra",
                        lambda *a, **kw: taken.append(kw.get("exit_terms", False)) or real(*a, **kw))
    monkeypatch.setattr(gops, "_BWD_EXIT", lambda *a: exits.append(1) or real_exit(*a))
    scale = x["q"].shape[3] ** -0.5
    _, _, pre = gops.gla_fwd(x["q"], x["k"], x["v"], x["g"], scale, x["h0"], reverse, cu, True, n)
    got = gops.gla_bwd(x["q"], x["k"], x["v"], x["g"], x["do"], scale, x["h0"], x["dht"], reverse, cu, n, pre)
    assert taken == ([exit_terms] if on else [])
    assert len(exits) == (0 if on and exit_terms else 1)
    return dict(zip(NAMES, got))


def _reference(x: dict, reverse: bool, cu) -> dict:
    """The fp64 recurrence's gradients of the same inputs and cotangents."""
    leaves = [x[k].double().requires_grad_() for k in ("q", "k", "v", "g", "h0")]
    o, s = gla_naive(*leaves[:4], initial_state=leaves[4], reverse=reverse, cu_seqlens=cu)
    return dict(zip(NAMES, torch.autograd.grad((o, s), leaves, (x["do"].double(), x["dht"].double()))))


CASE_IDS = [f"T{c[1]}-D{c[4]}-E{c[5]}-{str(c[6])[6:]}-{'rev' if c[7] else 'fwd'}"
            f"{'-gqa' if c[3] < c[2] else ''}{'-varlen' if c[8] else ''}-norm{c[9]:g}" for c in CASES]
#: the exit launch's terms: a launch of their own (``plain``) or in the Gluon in-chunk launch (``exit``)
EXIT_TERMS = pytest.mark.parametrize("exit_terms", [False, True], ids=["plain", "exit"])


@EXIT_TERMS
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("b,t,h,hkv,d,e,dtype,reverse,lens,norm", CASES, ids=CASE_IDS)
def test_the_gluon_intra_launch_matches_the_triton_one(monkeypatch, b, t, h, hkv, d, e, dtype, reverse, lens, norm,
                                                       variant, exit_terms):
    """dv and dh0 are the same launches' outputs, bit for bit. dq, dk and dg are no further from the
    fp64 recurrence than the Triton launch's (within 1.25×); with tf32 operands, which both launches
    truncate alike and sum in fp32 in another order, they also agree with the Triton launch's to
    2e-3 (the 16-bit ones but for last-bit flips). fp16 operands round where tf32 ones truncate,
    to the same 10 bits. ``gluon_fp16_epi`` takes the products in the MMA layout, with the operands read back
    from shared memory. The ``_pairs`` forms take the pairs inside blocks of 16 rows in fp32 registers,
    against the Triton launch's register form at the same blocks; the scratch they read W from
    starts as NaN too, so a weight read from a slot no chunk wrote fails. With ``exit`` the Gluon
    launch takes the exit terms too and writes dk and dg whole: dk rounds once where the Triton path
    rounds its in-chunk part and then the sum, so its agreement allows a last-bit flip more (4e-3)."""
    x, cu, n = _inputs(b, t, h, hkv, d, e, dtype, lens, norm)
    if host._reason(x["q"], 64) is not None:
        pytest.skip(host._reason(x["q"], 64))
    got = _backward(monkeypatch, True, x, reverse, cu, n, variant, exit_terms)
    want = _backward(monkeypatch, False, x, reverse, cu, n, variant)
    ref = _reference(x, reverse, cu)
    for name in NAMES:
        assert torch.isfinite(got[name]).all(), name
        if name in ("dv", "dh0"):
            assert torch.equal(got[name], want[name]), name
            continue
        mine, theirs = err_ratio(got[name], ref[name]), err_ratio(want[name], ref[name])
        assert mine <= 1.25 * theirs + 1e-6, (name, mine, theirs)
        if variant in ("gluon_tf32", "gluon_tf32_pairs"):
            tol = 4e-3 if exit_terms and name == "dk" else 2e-3
            assert err_ratio(got[name], want[name]) <= tol, (name, err_ratio(got[name], want[name]))


@EXIT_TERMS
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("norm", [16.0, 1.0, 0.1])
def test_the_gluon_intra_launch_meets_flas_rule_against_fp64(monkeypatch, dtype, norm, variant, exit_terms):
    """fla's recipe at D = E = 128 (B2 T1024 H4, an initial state): every gradient of the backward
    with the Gluon in-chunk launch (and the exit terms in it, ``exit``) within fla's 0.005 of the
    fp64 recurrence, dg included."""
    x, cu, n = _inputs(2, 1024, 4, 4, 128, 128, dtype, None, norm)
    if host._reason(x["q"], 64) is not None:
        pytest.skip(host._reason(x["q"], 64))
    got = _backward(monkeypatch, True, x, False, cu, n, variant, exit_terms)
    ref = _reference(x, False, cu)
    errs = {name: err_ratio(got[name], ref[name]) for name in NAMES}
    assert all(err <= 0.005 for err in errs.values()), errs


@EXIT_TERMS
@pytest.mark.parametrize("variant", ["gluon_fp16", "gluon_fp16_epi", "gluon_fp16_pairs"])
def test_fp16_operands_hold_inputs_and_cotangents_far_from_fp16s_range(monkeypatch, variant, exit_terms):
    """bf16 q around 1e6, k around 1e-6 and do around 1e-7 (W = do·vᵀ below fp16's normal range,
    q⊙E past its largest value), some rows all zero: the powers of two keep every level operand in
    range, so dq, dk and dg are as close to fp64 as the Triton launch's."""
    x, cu, n = _inputs(2, 300, 4, 4, 128, 128, torch.bfloat16, None, 1.0)
    x["q"] = (x["q"].float() * 1e6).to(torch.bfloat16)
    x["k"] = (x["k"].float() * 1e-6).to(torch.bfloat16)
    x["do"] = (x["do"].float() * 1e-7).to(torch.bfloat16)
    x["q"][:, 7], x["k"][:, 70] = 0, 0
    if host._reason(x["q"], 64) is not None:
        pytest.skip(host._reason(x["q"], 64))
    got = _backward(monkeypatch, True, x, False, cu, n, variant, exit_terms)
    want = _backward(monkeypatch, False, x, False, cu, n, variant)
    ref = _reference(x, False, cu)
    for name in ("dq", "dk", "dg"):
        assert torch.isfinite(got[name]).all(), name
        mine, theirs = err_ratio(got[name], ref[name]), err_ratio(want[name], ref[name])
        assert mine <= 1.25 * theirs + 1e-6, (name, mine, theirs)


@pytest.mark.parametrize("variant", ["gluon_tf32", "gluon_fp16_pairs", "gluon_fp16_epi_pairs"])
@pytest.mark.parametrize("b,t,h,hkv,d,e,dtype,reverse,lens,norm", CASES, ids=CASE_IDS)
def test_the_exit_terms_in_the_gluon_launch_change_only_dk_and_dg(monkeypatch, b, t, h, hkv, d, e, dtype, reverse,
                                                                 lens, norm, variant):
    """The Gluon launch of one form with the exit terms and without (then the Triton exit launch
    adds them): dq, dv and dh0 bit for bit (the exit terms touch only dk and dg, and dq's arithmetic
    is the same); dg, fp32, as close as the two sums' order allows (the exit product over all of E
    in one wgmma, e^{Bl−B} from sums of the gates after each row, against the exit launch's E-slices
    and suffix sum less the row's own gate); dk within a last-bit flip of the input dtype (the fused
    form rounds it once, the other twice; under GQA both sum fp32 per-head parts, then round)."""
    x, cu, n = _inputs(b, t, h, hkv, d, e, dtype, lens, norm)
    if host._reason(x["q"], 64) is not None:
        pytest.skip(host._reason(x["q"], 64))
    fused = _backward(monkeypatch, True, x, reverse, cu, n, variant, True)
    plain = _backward(monkeypatch, True, x, reverse, cu, n, variant, False)
    for name in ("dq", "dv", "dh0"):
        assert torch.equal(fused[name], plain[name]), name
    assert fused["dg"].dtype == plain["dg"].dtype == x["g"].dtype
    assert err_ratio(fused["dg"], plain["dg"]) <= 1e-4, err_ratio(fused["dg"], plain["dg"])
    assert err_ratio(fused["dk"], plain["dk"]) <= 4e-3, err_ratio(fused["dk"], plain["dk"])


@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("g_dtype", [torch.bfloat16, torch.float16], ids=["g-bf16", "g-fp16"])
def test_the_fused_launch_writes_dg_in_gs_dtype(monkeypatch, g_dtype, reverse):
    """A 16-bit g: the fused launch stores dg in g's dtype itself (no fp32 part is allocated), as
    the exit launch does; both round the fp32 sum once, so they differ by last-bit flips only."""
    x, cu, n = _inputs(1, 333, 2, 2, 64, 128, torch.bfloat16, None, 1.0)
    x["g"] = x["g"].to(g_dtype)
    if host._reason(x["q"], 64) is not None:
        pytest.skip(host._reason(x["q"], 64))
    fused = _backward(monkeypatch, True, x, reverse, cu, n, "gluon_fp16_pairs", True)
    plain = _backward(monkeypatch, True, x, reverse, cu, n, "gluon_fp16_pairs", False)
    assert fused["dg"].dtype == plain["dg"].dtype == g_dtype
    assert err_ratio(fused["dg"], plain["dg"]) <= torch.finfo(g_dtype).eps, err_ratio(fused["dg"], plain["dg"])
