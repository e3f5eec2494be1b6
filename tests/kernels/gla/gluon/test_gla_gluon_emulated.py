"""gla/triton's Gluon launches on the CPU, through the Gluon emulator (``gluon_emulator``): the prep
launch against the Triton one, and the whole op with the Gluon in-chunk backward in every form
against the fp64 reference.

The emulator runs each program's body over whole tiles, so these tests see the launches'
arithmetic (exponents, masks, scales, pairs, the exit terms, stores of partial chunks, reversed
and packed sequences) and, through its race tracker, every hand-off between threads that lacks a
barrier, fence or wait; not their compile: ``test_gla_gluon_host`` compiles them for sm_90 and
``tests/gpu`` runs them on the H200. The Triton sweeps run in the interpreter, in bf16 as
on the GPU (``interpreter_bf16``).
"""
from __future__ import annotations

import collections
import os
import sys

import pytest
import torch

import gluon_emulator as emu
import gluon_races as races
from gla_testutil import check
from lattnbench.kernels.gla.gluon import host, intra, prep, prep_sliced, prep_specialized
from lattnbench.kernels.gla.triton import ops as gops
from lattnbench.measure.tolerance import FLA_TOLERANCE, err_ratio


@pytest.fixture
def gluon_on_cpu(monkeypatch):
    """The Gluon launches through the emulator wherever their shape rule takes a call (the sm_90
    check skipped), at the GPU's chunk of 64 rows, every output buffer NaN-poisoned first."""
    launches = {"prep": emu.Launcher(prep.gla_prep_gluon_kernel),
                "prep_sliced": emu.Launcher(prep_sliced.gla_prep_sliced_gluon_kernel),
                "prep_specialized": emu.Launcher(prep_specialized.gla_prep_specialized_gluon_kernel),
                "intra": emu.Launcher(intra.gla_bwd_intra_gluon_kernel),
                "intra_exit": emu.Launcher(intra.gla_bwd_intra_exit_gluon_kernel)}
    monkeypatch.setattr(host, "_LAUNCH", launches["prep"])
    monkeypatch.setattr(host, "_LAUNCH_SLICED", launches["prep_sliced"])
    monkeypatch.setattr(host, "_LAUNCH_SPECIALIZED", launches["prep_specialized"])
    monkeypatch.setattr(host, "_LAUNCH_INTRA", launches["intra"])
    monkeypatch.setattr(host, "_LAUNCH_INTRA_EXIT", launches["intra_exit"])
    monkeypatch.setattr(host, "_reason", lambda q, bt: host._shape_reason(str(q.dtype).removeprefix("torch."),
                                                                          q.shape[3], bt))
    monkeypatch.setitem(gops._INTERP_META, "BT", 64)
    monkeypatch.setitem(gops._INTERP_META, "BS", 32)

    def nan_empty(*shape, dtype, device):
        return torch.full(shape, float("nan") if dtype.is_floating_point else -7, dtype=dtype, device=device)
    monkeypatch.setattr(gops, "_empty", nan_empty)
    return launches


def _prep64(q, k, g, reverse, lens, bt=64):
    """fp64 (qd, kd, A) as the prep launch lays them out: qd = q⊙e^B, kd = k⊙e^{Bl − B} per query
    head [B, T, H, D], and A [B, T, H, BT] with A[t, h, s − chunk start] = Σ_d q_td k_sd e^{B_td − B_sd}
    for s at or before t in processing order, else 0 (B the chunk's cumulative gate)."""
    b, t, h, d = q.shape
    kq = k.double().repeat_interleave(h // k.shape[2], 2)
    qd, kd = torch.zeros(b, t, h, d, dtype=torch.float64), torch.zeros(b, t, h, d, dtype=torch.float64)
    scores = torch.zeros(b, t, h, bt, dtype=torch.float64)
    seqs = [(i, 0, t) for i in range(b)] if lens is None else \
        [(0, int(s), int(s + n)) for s, n in zip(torch.tensor([0, *lens]).cumsum(0)[:-1].tolist(), lens)]
    for i_b, bos, eos in seqs:
        order = torch.arange(bos, eos)
        order = order.flip(0) if reverse else order
        for i_c, rows in enumerate(order.split(bt)):
            start = eos - (i_c + 1) * bt if reverse else bos + i_c * bt
            cum = g[i_b, rows].double().cumsum(0)
            qd[i_b, rows] = q[i_b, rows].double() * cum.exp()
            kd[i_b, rows] = kq[i_b, rows] * (cum[-1] - cum).exp()
            n = len(rows)
            lower = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
            expo = torch.where(lower[:, :, None, None], cum[:, None] - cum[None, :], -torch.inf)
            pairs = torch.einsum("thd,shd,tshd->ths", q[i_b, rows].double(), kq[i_b, rows], expo.exp())
            scores[i_b, rows[:, None], :, (rows - start)[None, :]] = pairs.permute(0, 2, 1)
    return qd, kd, scores


PREP_FORMS = {  # OP16, PREFETCH, key slice (0: all of D), lanes a key channel, warp-specialized
    "tf32": (False, False, 0, 2, False), "fp16": (True, False, 0, 2, False),
    "tf32-prefetch": (False, True, 0, 2, False),
    "fp16-prefetch": (True, True, 0, 2, False), "fp16-ks32": (True, False, 32, 4, False),
    "tf32-ks32": (False, False, 32, 4, False), "fp16-ws": (True, False, 0, 2, True),
    "fp16-ws-prefetch": (True, True, 0, 2, True), "fp16-ws-rl4-prefetch": (True, True, 0, 4, True),
    "fp16-rl4": (True, False, 0, 4, False),  # 16 rows a thread: 16 warps at D = 128, 128 registers
    "fp16-rl8": (True, False, 0, 8, False),  # 8 rows a thread: 32 warps at D = 128, 64 registers
}
_PREP_SWITCHES = ("PREP_OP16", "PREP_PREFETCH", "PREP_KS", "ROW_LANES", "PREP_WS")


def _prep_launch(form: str) -> str:
    """The fixture's launcher that takes the form's launches."""
    return "prep_specialized" if PREP_FORMS[form][4] else "prep_sliced" if PREP_FORMS[form][2] else "prep"
PREP_CASES = [  # b, t, h, hkv, d, dtype, reverse, packed lengths or None, gate norm
    (1, 150, 2, 1, 64, torch.bfloat16, False, None, 0.1),
    (1, 130, 2, 2, 64, torch.float16, True, (3, 64, 63), 1.0),
    (2, 70, 1, 1, 128, torch.bfloat16, True, None, 16.0),
]


def _case_id(c: tuple) -> str:
    return f"T{c[1]}-D{c[4]}-{str(c[5])[6:]}-{'rev' if c[6] else 'fwd'}{'-varlen' if c[7] else ''}-norm{c[8]:g}"


# the default form (fp16 operands, whole D) and the warp-specialized one (a kernel of its own) at every
# case, the latter's prefetch ring at both bf16 ones (fp16 inputs stage without it); each other form at
# one case, the cases taken in turn, so every form meets a gate norm, a dtype and an order of its own
_OWN_RUNS = ("fp16", "fp16-ws", "fp16-ws-prefetch")
PREP_RUNS = [(f, c) for f in _OWN_RUNS[:2] for c in PREP_CASES] + [("fp16-ws-prefetch", c) for c in PREP_CASES
                                                                    if c[5] == torch.bfloat16] + [
    (form, PREP_CASES[i % len(PREP_CASES)]) for i, form in enumerate(f for f in PREP_FORMS if f not in _OWN_RUNS)]


@pytest.mark.parametrize("form,case", PREP_RUNS, ids=[f"{f}-{_case_id(c)}" for f, c in PREP_RUNS])
def test_the_emulated_prep_launch_matches_the_triton_one(gluon_on_cpu, monkeypatch, form, case):
    """The totals as the Triton launch (interpreted) makes them, from fp32 gates cumulated in another
    order; qd and kd too where they are fp32, and where they are bf16 as close to fp64 as fp64
    rounded to bf16 (the interpreter truncates where the GPU rounds); the scores within fp64's
    rounding to their dtype and that of their 10-bit level operands (tf32 or fp16)."""
    b, t, h, hkv, d, dtype, reverse, lens, norm = case
    for name, value in zip(_PREP_SWITCHES, PREP_FORMS[form]):
        monkeypatch.setattr(host, name, value)
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    q = torch.randn(b, t, h, d, generator=gen).to(dtype)
    k = (torch.randn(b, t, hkv, d, generator=gen) * d**-0.5).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, d, generator=gen)) / norm
    cu = None if lens is None else torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    n = b if cu is None else len(lens)
    monkeypatch.setattr(host, "PREP_ON", True)
    got = gops.gla_prep(q, k, g, reverse, cu, n)
    assert gluon_on_cpu[_prep_launch(form)].launches == 1
    monkeypatch.setattr(host, "PREP_ON", False)
    want = gops.gla_prep(q, k, g, reverse, cu, n)
    qd64, kd64, a64 = _prep64(q, k, g, reverse, lens)
    used = ~torch.isnan(want[2])  # slots no chunk takes stay NaN in both
    # the same fp32 gates cumulated in another order: an exponent such as Bl − B differs by about an
    # ulp of the chunk's depth, and a factor e^x by that much relatively
    order = torch.finfo(torch.float32).eps * want[2][used].abs().max().item()
    for name, x, y, x64 in zip(("qd", "kd", "bl"), got, want, (qd64, kd64, None)):
        if name == "bl":
            assert torch.isnan(x[~used]).all()
            x, y = x[used], y[used]
        assert torch.isfinite(x).all(), name
        if x.dtype == torch.float32:
            assert err_ratio(x, y) <= max(2e-5, order), (name, err_ratio(x, y))
        else:
            assert err_ratio(x, x64) <= 1.02 * err_ratio(x64.to(x.dtype), x64) + order, (name, err_ratio(x, x64))
    assert torch.isfinite(got[3]).all()
    # each level product reads its two operands at 10 bits: at most 2^-11 relative each (fp16
    # rounds; tf32 truncates, so 2^-10), about 2^-10 of the scores over a row's random signs, on
    # top of the scores' own rounding to their dtype
    own = err_ratio(a64.to(dtype), a64)
    assert err_ratio(got[3], a64) <= own + 2.0**-10, (err_ratio(got[3], a64), own)


def _dropping_barriers(monkeypatch, site: str | None) -> collections.Counter:
    """The emulator's CTA barrier, recording each call's site (file:line of the kernel) and doing
    nothing at ``site``; returns the calls per site."""
    calls = collections.Counter()

    def barrier():
        frame = sys._getframe(1)
        here = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        calls[here] += 1
        if here != site:
            emu._barrier()
    monkeypatch.setitem(emu._COMPAT, "cta_barrier", barrier)
    return calls


# the warp-specialized form places no barrier of its own: inside a partition the compiler's barrier
# pass orders the warps, and the mbarriers order the partitions (the race tracker checks those)
@pytest.mark.parametrize("form", [f for f in PREP_FORMS if not PREP_FORMS[f][4]])
def test_every_barrier_the_prep_launch_passes_is_needed(gluon_on_cpu, monkeypatch, form):
    """Each barrier site of the form, dropped (every call there), leaves a hand-off between threads
    that the race tracker finds: the chunk loop holds no barrier it could do without, and the
    tracker sees each one's job (bf16 inputs, so the fp16 forms' row scales run too)."""
    for name, value in zip(_PREP_SWITCHES, PREP_FORMS[form]):
        monkeypatch.setattr(host, name, value)
    monkeypatch.setattr(host, "PREP_ON", True)
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    q, k = (torch.randn(1, 150, 2, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
    g = torch.nn.functional.logsigmoid(torch.randn(1, 150, 2, 64, generator=gen))
    sites = _dropping_barriers(monkeypatch, None)
    gops.gla_prep(q, k, g, False, None, 1)
    assert len(sites) >= 3
    for site in list(sites):
        _dropping_barriers(monkeypatch, site)
        with pytest.raises(races.Race):
            gops.gla_prep(q, k, g, False, None, 1)


INTRA_FORMS = {  # OP16, EPI, PAIRS (ROW_LANES 64 / PAIRS, 4 without: a block is a thread's rows)
    "tf32": (False, False, 0), "fp16": (True, False, 0), "fp16-epi": (True, True, 0),
    "tf32-pairs": (False, False, 16), "fp16-pairs": (True, False, 16), "fp16-epi-pairs": (True, True, 16),
    "fp16-pairs-kds32": (True, False, 16),  # key slices of 32: 4 warps, two programs an SM
    "fp16-pairs8-kds32": (True, False, 8),  # blocks of 8 rows, 8 lanes a channel: 8 warps
}


# each form once, the exit terms in and out in turn, and the form the suites time as the candidate
# default (fp16 operands, pairs in registers) both ways; every other run reversed, so both values of
# the operands, epilogue, pairs and exit switches meet both orders
INTRA_RUNS = [("tf32", False), ("fp16-epi", False), ("fp16", True), ("tf32-pairs", True), ("fp16-pairs", False),
              ("fp16-pairs", True), ("fp16-epi-pairs", True), ("fp16-pairs-kds32", False),
              ("fp16-pairs8-kds32", True)]


def _intra_form(monkeypatch, form: str, exit_terms: bool) -> None:
    """The host's switches for the in-chunk launch in ``form`` (``INTRA_FORMS``): a block of pairs is
    a thread's rows, so the lanes a channel follow PAIRS (4 without pairs); slices of 32 or 64."""
    op16, epi, pairs = INTRA_FORMS[form]
    for name, value in (("INTRA_ON", True), ("INTRA_OP16", op16), ("INTRA_EPI", epi), ("INTRA_PAIRS", pairs),
                        ("INTRA_ROW_LANES", 64 // pairs if pairs else 4),
                        ("INTRA_KDS", 32 if form.endswith("kds32") else 64), ("INTRA_EXIT", exit_terms)):
        monkeypatch.setattr(host, name, value)


@pytest.mark.parametrize("form,exit_terms", INTRA_RUNS, ids=[f"{f}-{'exit' if x else 'plain'}" for f, x in INTRA_RUNS])
def test_the_emulated_gluon_backward_meets_fp64(gluon_on_cpu, monkeypatch, form, exit_terms):
    """The whole op with the Gluon prep and in-chunk launches, every gradient dg included within
    fp16's tolerance of fp64, or fla's 0.005 in bf16: packed sequences (one of a single row, one
    ending inside a block of 16), GQA, an initial state and dS_T, and per form another gate norm of
    fla's recipes, order and input dtype."""
    _intra_form(monkeypatch, form, exit_terms)
    i = list(INTRA_FORMS).index(form)
    j = INTRA_RUNS.index((form, exit_terms))  # every other run reversed
    norm, reverse = (16.0, 1.0, 0.1)[i % 3], bool(j % 2)
    dtype = (torch.float16, torch.bfloat16)[(i // 2 + exit_terms) % 2]
    check(seed=40 + 2 * i + exit_terms, t=150, h=2, hkv=1, d=64, e=64, dtype=dtype, normaliser=norm,
          reverse=reverse, cu_seqlens=[0, 70, 71, 150], tol=FLA_TOLERANCE if dtype == torch.bfloat16 else None)
    ran = gluon_on_cpu["intra_exit" if exit_terms else "intra"]
    assert gluon_on_cpu["prep"].launches == 1 and ran.launches == 1
    assert gluon_on_cpu["intra" if exit_terms else "intra_exit"].launches == 0


@pytest.mark.parametrize("form,exit_terms", [("tf32", False), ("fp16-epi", True), ("fp16-pairs-kds32", True)])
def test_every_barrier_the_in_chunk_launch_passes_is_needed(gluon_on_cpu, monkeypatch, form, exit_terms):
    """As for the prep launch: the in-chunk launch of one backward (two key slices a chunk at KDS 32),
    replayed with each of its barrier sites dropped, leaves a race the tracker names at every one:
    the chunk's staging, the slice's, the levels' and the outputs'."""
    _intra_form(monkeypatch, form, exit_terms)
    launch = gluon_on_cpu["intra_exit" if exit_terms else "intra"]
    calls = []

    def recording(key, args, spec, stream=None):
        calls.append((spec()[0]({}), [a.clone() if isinstance(a, torch.Tensor) else a for a in args], spec()[1]))
        emu.Launcher.__call__(launch, key, args, spec, stream)
    monkeypatch.setattr(host, "_LAUNCH_INTRA_EXIT" if exit_terms else "_LAUNCH_INTRA", recording)
    check(seed=7, t=150, h=2, hkv=1, d=64, e=64, dtype=torch.bfloat16, normaliser=1.0, reverse=False,
          cu_seqlens=[0, 70, 71, 150], tol=FLA_TOLERANCE)
    (grid, args, kw), = calls

    def replay():
        emu.run(launch.kernel, grid, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kw)
    sites = _dropping_barriers(monkeypatch, None)
    replay()
    assert len(sites) >= 4
    for site in list(sites):
        _dropping_barriers(monkeypatch, site)
        with pytest.raises(races.Race):
            replay()
