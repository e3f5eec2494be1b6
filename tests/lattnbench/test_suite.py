"""The suite parser: examples, the bundled suites, and a property over random TOML documents.

The property builds suite documents from labelled pieces, valid and invalid, writes them as
TOML text, and checks that ``parse`` either returns measurements whose cases and fields are
exactly what the pieces say, or raises a one-line SpecError naming one of the bad pieces —
never another exception.
"""
from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lattnbench.spec import Case, SpecError
from lattnbench.suite import load_suite, parse

ROOT = Path(__file__).resolve().parents[2]


# ---- examples ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "suites").glob("*.toml")))
def test_bundled_suites_parse(name):
    suite = load_suite(ROOT / "suites" / f"{name}.toml")
    assert suite.name == name and suite.measurements
    assert all(m.cases for m in suite.measurements)


@pytest.mark.parametrize("suite_name,module", [("gla-forms", "gla_forms"), ("lightning-floor", "lightning_forms")])
def test_a_forms_suite_names_every_timing_form_and_only_those(monkeypatch, suite_name, module):
    """A suite that times a kernel's forms (suites/gla-forms.toml, suites/lightning-floor.toml) and the
    plugins it times (tests/gpu/) stay in step: a form added to one and not the other would go
    untimed, or fail the run as an unknown kernel; the command in its header names every form too."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "gpu"))
    plugins = __import__(module)

    forms = {obj.lattnbench_name: name for name, obj in vars(plugins).items()
             if callable(obj) and hasattr(obj, "lattnbench_name")}
    suite = load_suite(ROOT / "suites" / f"{suite_name}.toml")
    named = {k for m in suite.measurements for k in m.kernels if k.startswith("form/")}
    assert named == set(forms), (named ^ set(forms))
    command = {name for ln in suite.path.read_text().splitlines() if ln.startswith("#   F=")
               for name in ln.removeprefix("#   F=").removeprefix("$F,").split(",")}
    assert command == set(forms.values()), (command ^ set(forms.values()))


def test_sections_override_axes_and_kernels(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('kernels = ["lightning/*"]\n[axes]\nn = "64..256"\nheads = 4\ndim = 16\ndtype = "fp32"\n'
                    '[speed]\nmodes = ["fwd"]\nbudget = 0.2\n'
                    '[check-grad]\nkernels = ["softmax/*"]\naxes = { n = "100", dtype = "fp32,bf16" }\nseed = 3\n')
    suite = load_suite(path)
    speed, check = suite.measurements
    assert suite.name == "s" and speed.kernels == ["lightning/*"] and speed.modes == ["fwd"]
    assert [c.seqlen for c in speed.cases] == [64, 128, 256] and speed.budget == 0.2
    assert check.kernels == ["softmax/*"] and check.seed == 3
    assert [(c.seqlen, c.dtype) for c in check.cases] == [(100, "fp32"), (100, "bf16")]


@pytest.mark.parametrize("text, needle", [
    ("[axes]\nn = 16\n[speed]\nbogus = 1\n", "unknown key 'bogus'"),
    ("colour = 'red'\n[axes]\nn = 16\n[speed]\n", "unknown key 'colour'"),
    ("[axes]\nn = 16\nnn = 3\n[speed]\n", "unknown key 'nn'"),
    ("[axes]\nn = 16.5\n[speed]\n", "axes.n"),
    ("[axes]\nn = 16\nheads = true\n[speed]\n", "axes.heads"),
    ("[axes]\nn = 16\n[speed]\nmodes = 'fwd,bwd'\n", "unknown mode"),
    ("[axes]\nn = 16\n[check-grad]\nseed = 'x'\n", "check-grad.seed"),
    ("[axes]\nbatch = 2\n[memory]\n", "missing key 'n'"),
    ("[axes]\nn = 16\n", "nothing to measure"),
    ("name = 3\n[axes]\nn = 16\n[speed]\n", "'name'"),
])
def test_bad_suites_name_the_key(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_suite(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="no such suite file"):
        load_suite(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("[axes\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_suite(tmp_path / "bad.toml")


# ---- found by the property test, fixed in the parser --------------------------------------------

def test_dtype_list_with_a_number_is_a_spec_error():
    with pytest.raises(SpecError, match="dtype"):
        parse({"axes": {"n": 16, "dtype": ["fp32", 3]}, "speed": {}}, "t.toml", "t")


@pytest.mark.parametrize("doc", [{"speed": {"budget": -1}}, {"speed": {"budget": 0}},
                                 {"check-grad": {"seed": -1}}])
def test_negative_budget_or_seed_is_a_spec_error(doc):
    with pytest.raises(SpecError):
        parse({"axes": {"n": 16}, **doc}, "t.toml", "t")


def test_varlen_cases_are_not_duplicated_by_batch():
    suite = parse({"axes": {"n": 16, "batch": "1,2", "varlen": [3, 5]}, "speed": {}}, "t.toml", "t")
    cases = suite.measurements[0].cases
    assert len(cases) == len(set(cases))


# ---- the property -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Piece:
    """A value for one key: ``expect`` is what the parser must make of it; ``needle`` marks it invalid."""

    value: Any
    expect: Any = None
    needle: str | None = None


def ok(value, expect=None) -> Piece:
    return Piece(value, value if expect is None else expect)


def bad(value, needle: str) -> Piece:
    return Piece(value, None, needle)


ABSENT = Piece(None)  # the key is left out
MISSING = Piece(None, None, "missing key")  # a required key left out (n)
AXES: dict[str, list[Piece]] = {
    "n": [MISSING, ok(16, [16]), ok("16..64", [16, 32, 64]), ok("16,48", [16, 48]), ok("1k", [1024]),
          bad("0", "axes.n"), bad("abc", "axes.n"), bad(-3, "axes.n"), bad(1.5, "axes.n"),
          bad(True, "axes.n"), bad(["16"], "axes.n"), bad("64..16", "axes.n")],
    "batch": [ABSENT, ok(1, [1]), ok("1,2", [1, 2]), bad(0, "axes.batch"), bad("x", "axes.batch"),
              bad(False, "axes.batch")],
    "heads": [ABSENT, ok(2, [2]), ok("2,4", [2, 4]), bad("h", "axes.heads"), bad(0, "axes.heads")],
    "kv_heads": [ABSENT, ok(1, [1]), ok(2, [2]), ok(3, [3]), bad("kv", "axes.kv_heads")],
    "dim": [ABSENT, ok(8, [8]), ok("8,16", [8, 16]), bad(0, "axes.dim"), bad("d", "axes.dim")],
    "dim_v": [ABSENT, ok(4, [4]), bad("e", "axes.dim_v")],
    "dtype": [ABSENT, ok("fp32", ["fp32"]), ok("bf16,fp32", ["bf16", "fp32"]), ok(["fp16"], ["fp16"]),
              ok("FP32", ["fp32"]), bad("fp8", "dtype"), bad(3, "dtype"), bad([], "dtype")],
    "decay": [ABSENT, ok("zero"), ok("random"), bad("none", "decay"), bad(1, "decay")],
    "initial_state": [ABSENT, ok(False, (False,)), ok(True, (True,)), ok("both", (False, True)),
                      bad("yes", "axes.initial_state"), bad(1, "axes.initial_state")],
    "reverse": [ABSENT, ok(True), ok(False), bad("no", "axes.reverse")],
    "varlen": [ABSENT, ok([3, 5], (3, 5)), bad([2, 0], "varlen"), bad("3,5", "axes.varlen"),
               bad([True], "axes.varlen")],
    "heads_kv": [ABSENT, bad(2, "unknown key 'heads_kv'")],
}
AXIS_DEFAULTS = {"batch": [1], "heads": [4], "dim": [64], "dtype": ["bf16"], "decay": "alibi",
                 "initial_state": (False,), "reverse": False}
KERNELS = [ABSENT, ok(["lightning/*"]), ok("softmax/x", ["softmax/x"]), ok([], []),
           bad([1], "kernels"), bad(5, "kernels")]
SECTION = {
    "speed": {"modes": [ABSENT, ok(["fwd"]), ok(["fwd", "fwdbwd", "fwd"], ["fwd", "fwdbwd"]), ok("bwd", ["bwd"]),
                        bad(["sideways"], "mode"), bad([1], "speed.modes"), bad("fwd,bwd", "mode")],
              "budget": [ABSENT, ok(0.2), ok(1, 1.0), bad("fast", "speed.budget"), bad(True, "speed.budget")],
              "repeat": [ABSENT, bad(2, "unknown key 'repeat'")]},
    "memory": {"modes": [ABSENT, ok(["fwdbwd"]), bad(["up"], "mode"), bad(["fwd", "bwd"], "memory.modes")]},
    "check-grad": {"seed": [ABSENT, ok(0), ok(7), bad("s", "check-grad.seed"), bad(1.5, "check-grad.seed")]},
}
TOP = {
    "name": [ABSENT, ok("x"), bad(3, "'name'")],
    "description": [ABSENT, ok("d"), bad(["d"], "'description'")],
    "reference": [ABSENT, ok("softmax/naive-torch"), bad(1, "'reference'")],
    "device": [ABSENT, ok("cpu"), bad(1, "'device'")],
    "colour": [ABSENT, bad("red", "unknown key 'colour'")],
}


def to_toml(doc: dict) -> str:
    """A minimal TOML writer for what the strategy makes (no writer in the standard library)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
    return "".join(f"{json.dumps(k)} = {value(v)}\n" for k, v in doc.items())


#: hypothesis favours the first option and small integers, so odds are drawn from lists whose
#: first (favoured) entry is the common case
FAULT_ODDS = [False] * 24 + [True]
OFTEN, SOMETIMES, RARELY = [True, True, False], [False, False, False, True], [False] * 9 + [True]


@st.composite
def pieces(draw, table: dict[str, list[Piece]]) -> dict[str, Piece]:
    """A value per key: mostly valid ones, an invalid one about one time in 25 (so that about a
    third of the documents are valid throughout and the rest have one or two faults)."""
    out = {}
    for key, options in table.items():
        good = [p for p in options if p.needle is None]
        faults = [p for p in options if p.needle is not None]
        p = draw(st.sampled_from(faults if faults and draw(st.sampled_from(FAULT_ODDS)) else good))
        if p is not ABSENT and p is not MISSING:
            out[key] = p
    return out


@st.composite
def documents(draw):
    top = draw(pieces(TOP))
    kernels = draw(pieces({"kernels": KERNELS})).get("kernels", ABSENT)
    axes = draw(pieces(AXES))
    sections = {}
    for kind in sorted(SECTION):
        if not draw(st.sampled_from(OFTEN if kind == "speed" else SOMETIMES)):
            continue
        sec = draw(pieces(SECTION[kind]))
        if draw(st.sampled_from(SOMETIMES)):
            sec.update(draw(pieces({"kernels": KERNELS[1:]})))
        if draw(st.sampled_from(SOMETIMES)):
            sec["axes"] = Piece(None)  # placeholder: replaced by an axes table below
            sec["axes_pieces"] = draw(pieces({k: AXES[k] for k in ("n", "dtype", "heads")}))
        if draw(st.sampled_from(RARELY)):
            sec = {"not_a_table": bad(3, f"'{kind}'")}
        sections[kind] = sec
    return top, kernels, axes, sections


def build(top, kernels, axes, sections) -> dict:
    doc = {k: p.value for k, p in top.items()}
    if kernels is not ABSENT:
        doc["kernels"] = kernels.value
    if axes:
        doc["axes"] = {k: p.value for k, p in axes.items()}
    for kind, sec in sections.items():
        if "not_a_table" in sec:
            doc[kind] = sec["not_a_table"].value
            continue
        table = {k: p.value for k, p in sec.items() if k not in ("axes", "axes_pieces")}
        if "axes_pieces" in sec:
            table["axes"] = {k: p.value for k, p in sec["axes_pieces"].items()}
        doc[kind] = table
    return doc


def expected_cases(ax: dict[str, Piece]) -> list[Case] | None:
    """The cases a valid axes table means (None when a heads/kv_heads pair cannot work)."""
    get = lambda k: ax[k].expect if k in ax else AXIS_DEFAULTS.get(k)  # noqa: E731
    heads, kvs = get("heads"), get("kv_heads")
    if kvs and any(h % kv for h in heads for kv in kvs):
        return None
    varlen = get("varlen")
    out = set()
    for dt, b, h, d, h0 in itertools.product(get("dtype"), get("batch"), heads, get("dim"), get("initial_state")):
        for kv in kvs or [h]:
            for e in get("dim_v") or [d]:
                if varlen:
                    out.add(Case(1, sum(varlen), h, kv, d, e, dt, get("decay"), varlen, h0, get("reverse")))
                else:
                    out.update(Case(b, t, h, kv, d, e, dt, get("decay"), None, h0, get("reverse"))
                               for t in get("n"))
    return sorted(out, key=repr)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_random_suites_parse_exactly_or_raise_spec_error(parts):
    top, kernels, axes, sections = parts
    doc = build(top, kernels, axes, sections)
    text = to_toml(doc)
    assert tomllib.loads(text) == doc  # what a user could write

    # what must go wrong, in the parser's order: top keys, then each section in file order
    needles = [p.needle for p in [*top.values(), kernels] if p.needle]
    valid = not needles
    plan = []
    for kind in (k for k in doc if k in ("speed", "memory", "check-grad")):
        sec = sections[kind]
        merged = {**axes, **sec.get("axes_pieces", {})}
        bad_here = [p.needle for k, p in sec.items() if isinstance(p, Piece) and p.needle]
        bad_here += [p.needle for p in merged.values() if p.needle]
        if "n" not in merged:
            bad_here.append("missing key 'n'")
        heads, kvs = merged.get("heads", ok(4, [4])), merged.get("kv_heads", ok(None, []))
        if not heads.needle and not kvs.needle and any(h % kv for h in heads.expect for kv in kvs.expect):
            bad_here.append("heads")  # a shape that cannot work: heads not a multiple of kv heads
        cases = expected_cases(merged) if not bad_here else None
        needles += bad_here
        valid = valid and not bad_here
        plan.append((kind, sec, cases))
    if not sections:
        needles.append("nothing to measure")
        valid = False

    event("valid" if valid else "invalid")
    try:
        suite = parse(tomllib.loads(text), "t.toml", "t")
    except SpecError as exc:
        msg = str(exc)
        assert not valid, f"refused a valid suite: {msg}\n{text}"
        assert "\n" not in msg and any(n in msg for n in needles), (msg, needles)
        return
    assert valid, f"accepted an invalid suite (expected one of {needles}):\n{text}"
    assert suite.name == (top["name"].expect if "name" in top else "t")
    assert suite.device == (top["device"].expect if "device" in top else "auto")
    assert suite.reference == (top["reference"].expect if "reference" in top else None)
    assert [m.kind for m in suite.measurements] == [k for k, _, _ in plan]
    top_kernels = kernels.expect if kernels is not ABSENT else []
    for m, (kind, sec, cases) in zip(suite.measurements, plan):
        assert sorted(set(m.cases), key=repr) == cases
        assert m.kernels == (sec["kernels"].expect if "kernels" in sec else top_kernels)
        if kind in ("speed", "memory"):
            assert m.modes == (sec["modes"].expect if "modes" in sec else ["fwd", "fwdbwd"])
        if kind == "speed":
            assert m.budget == (sec["budget"].expect if "budget" in sec else 0.5)
        if kind == "check-grad":
            assert m.seed == (sec["seed"].expect if "seed" in sec else 0)
