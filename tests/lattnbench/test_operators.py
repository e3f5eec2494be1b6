"""The family registry: each bundled family's answers, looked up by name, with no harness branch."""
from __future__ import annotations

import pytest

from lattnbench.operators import family, is_decayed, is_gated, names
from lattnbench.operators.inputs import numpy_inputs
from lattnbench.spec import Case

CASE = Case(2, 16, 4, 2, 8, 6, "bf16", initial_state=True, g_dtype="fp16")


def test_bundled_families_in_table_order():
    assert names()[:3] == ("lightning", "gla", "softmax")
    with pytest.raises(KeyError, match="unknown family 'mamba'.*lightning"):
        family("mamba")


def test_each_family_names_its_tensors():
    assert family("lightning").expected_tensors(CASE) == ["o", "final_state", "dq", "dk", "dv", "dh0"]
    assert family("gla").expected_tensors(CASE) == ["o", "final_state", "dq", "dk", "dv", "dh0", "dg"]
    assert family("softmax").expected_tensors(CASE) == ["o", "dq", "dk", "dv"]
    assert not family("softmax").applies(CASE) and family("softmax").applies(CASE.with_(initial_state=False))


def test_gates_are_drawn_and_stored_as_the_case_says():
    gla = family("gla")
    assert gla.shapes(CASE)["g"] == (2, 16, 4, 8) and "g" not in family("lightning").shapes(CASE)
    assert gla.stored_dtype("g", CASE) == "fp16" and gla.stored_dtype("h0", CASE) == "fp32"
    assert gla.stored_dtype("q", CASE) == "bf16"
    g = numpy_inputs(CASE, "gla", 0)["g"]
    assert (g <= 0).all() and g.min() > -2  # logsigmoid(x) / 16 for x ~ N(0, 1)


def test_a_gates_gradient_is_held_to_the_looser_of_both_dtypes():
    gla, half = family("gla"), CASE.with_(dtype="fp16", g_dtype="bf16")
    assert gla.tolerance(half, "dg") > gla.tolerance(half, "dq")
    assert family("lightning").tolerance(half, "dq") == gla.tolerance(half, "dq")


def test_flags_the_views_read():
    assert is_gated("gla") and not is_gated("lightning") and not is_gated(None)
    assert is_decayed("lightning") and not is_decayed("gla") and not is_decayed("unknown")
